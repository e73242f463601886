"""A `RunResult` in MCP's shape: the text block, the images and files, structuredContent, and isError;
and close_session's answer."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

import mcp_types as types

from runner.outcome import Attachment, KeptOutput, RunResult, Table

Block = types.TextContent | types.ImageContent | types.EmbeddedResource | types.ResourceLink
# A returned file larger than this is marked for the user's eyes (`audience`), not the model's.
LARGE_FILE_BYTES = 8 * 1024


def to_call_result(result: RunResult) -> types.CallToolResult:
    """Text block in the documented format, then each image and file; structured content (which names
    the images and files but never carries their bytes: a client may show it to the model as text);
    isError unless status is ok."""
    content: list[Block] = [types.TextContent(type="text", text=result.to_text())]
    for attachment in result.images:
        data = base64.b64encode(attachment.data).decode("ascii")
        content.append(types.ImageContent(type="image", data=data, mime_type=attachment.mime_type))
    for attachment in result.files:
        resource = _resource(result.request_id, attachment)
        # A large file is for the person more than for the model (the text block names it and its size):
        # a client that honours `audience` can keep it out of the model's context.
        large = len(attachment.data) > LARGE_FILE_BYTES
        annotations = types.Annotations(audience=["user"], priority=0.3) if large else None
        content.append(types.EmbeddedResource(type="resource", resource=resource, annotations=annotations))
    for kept in result.kept:
        content.append(_link(kept))
    return types.CallToolResult(
        content=list(content),
        structured_content=structured_result(result),
        is_error=result.is_error,
    )


def file_uri(request_id: str, path: str) -> str:
    """Where a returned file is said to be: the run's directory is gone, so the call names it."""
    return f"run://{request_id}/{quote(path)}"


def _resource(request_id: str, file: Attachment) -> types.TextResourceContents | types.BlobResourceContents:
    uri = file_uri(request_id, file.name)
    if file.kind == "text":
        return types.TextResourceContents(uri=uri, mime_type=file.mime_type, text=file.data.decode("utf-8"))
    return types.BlobResourceContents(uri=uri, mime_type=file.mime_type, blob=base64.b64encode(file.data).decode())


def _link(kept: KeptOutput) -> types.ResourceLink:
    """Where the whole of a cut stream, or a file over what the answer carries, can be read; meant for
    the person more than for the model, whose context the text block's head and tail serve."""
    if kept.is_file:
        return types.ResourceLink(
            type="resource_link",
            uri=kept.uri,
            name=kept.stream,
            title=f"{kept.stream}, whole",
            description=(
                f"{kept.size:,} bytes, not returned inline ({kept.reason}); "
                f"readable with resources/read for {kept.seconds} s"
            ),
            mime_type=kept.mime_type,
            size=kept.size,
            annotations=types.Annotations(audience=["user", "assistant"], priority=0.2),
        )
    whole = "whole" if kept.complete else f"first {kept.size:,} of {kept.total:,} bytes"
    return types.ResourceLink(
        type="resource_link",
        uri=kept.uri,
        name=kept.stream,
        title=f"The run's {kept.stream}, {whole}",
        description=f"{kept.size:,} bytes, shown cut above; readable with resources/read for {kept.seconds} s",
        mime_type="text/plain",
        size=kept.size,
        annotations=types.Annotations(audience=["user", "assistant"], priority=0.2),
    )


# A kept stream or file whose text would be more than this many times its bytes in JSON is answered
# as base64 (4/3 of them): a control character is six bytes of JSON (`\u0001`), and a 16 MiB stream
# of them was a 96 MiB answer.
MAX_TEXT_GROWTH = 1.5
# Bytes JSON writes as six (the control characters but the three below) or as two.
_SIX = bytes(set(range(0x20)) - {0x09, 0x0A, 0x0D})
_TWO = b'\t\n\r"\\'


def text_json_bytes(data: bytes) -> int:
    """How long `data`, UTF-8, is as a JSON string (the SDK leaves what is not ASCII as it is)."""
    six = len(data) - len(data.translate(None, _SIX))
    two = len(data) - len(data.translate(None, _TWO))
    return len(data) + 5 * six + two


def kept_contents(kept: KeptOutput, data: bytes) -> types.TextResourceContents | types.BlobResourceContents:
    """A kept stream or file as resources/read returns it: text when it is UTF-8 (an image never is,
    as the answer judged it) and its JSON is at most MAX_TEXT_GROWTH times its bytes, else its bytes
    (base64), with the type the answer gave it."""
    binary = kept.mime_type.startswith("image/") and kept.mime_type != "image/svg+xml"
    if not binary and text_json_bytes(data) > MAX_TEXT_GROWTH * len(data):
        return types.BlobResourceContents(uri=kept.uri, mime_type=kept.mime_type, blob=base64.b64encode(data).decode())
    if not binary:
        try:
            return types.TextResourceContents(uri=kept.uri, mime_type=kept.mime_type, text=data.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    blob = base64.b64encode(data).decode("ascii")
    mime_type = kept.mime_type if kept.is_file else "application/octet-stream"
    return types.BlobResourceContents(uri=kept.uri, mime_type=mime_type, blob=blob)


def closed_result(request_id: str, handle: str, unknown: str | None) -> types.CallToolResult:
    """close_session's answer: the session has ended, or (`unknown`) why there was none to end."""
    message = unknown or f"session {handle} closed: its processes, memory and files are freed"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"[request_id={request_id}]\n{message}\n")],
        structured_content={"request_id": request_id, "session": handle, "closed": unknown is None, "message": message},
        is_error=unknown is not None,
    )


def structured_result(result: RunResult) -> dict[str, Any]:
    """The structuredContent of a call, matching `output_schema()`; the session's fields only in a
    session's call."""
    content: dict[str, Any] = {
        "request_id": result.request_id,
        "status": result.status.value,
        "message": result.message,
        "exit_code": result.exit_code,
        "signal": result.signal,
        "stdout": result.stdout.text,
        "stderr": result.stderr.text,
        "stdout_truncated": result.stdout.truncated,
        "stderr_truncated": result.stderr.truncated,
        "stdout_bytes": result.stdout.total_bytes,
        "stderr_bytes": result.stderr.total_bytes,
        "stdout_dropped_bytes": result.stdout.dropped_bytes,
        "stderr_dropped_bytes": result.stderr.dropped_bytes,
        "duration_seconds": round(result.duration, 6),
        "queue_wait_seconds": round(result.queue_wait, 6),
        "cpu_seconds": None if result.cpu_seconds is None else round(result.cpu_seconds, 6),
        "peak_memory_bytes": result.peak_memory_bytes,
        "result": result.result,
        "result_truncated": result.result is not None and result.result_chars > len(result.result),
        "images": [
            {
                "name": image.name,
                "mime_type": image.mime_type,
                "bytes": len(image.data),
                "width": image.width,
                "height": image.height,
                "note": image.note,
            }
            for image in result.images
        ],
        "files": [
            {
                "path": file.name,
                "uri": file_uri(result.request_id, file.name),
                "mime_type": file.mime_type,
                "bytes": len(file.data),
            }
            for file in result.files
        ],
        "not_returned": [{"name": o.name, "bytes": o.size, "reason": o.reason} for o in result.omitted],
    }
    for name, stream in (("stdout", result.stdout), ("stderr", result.stderr)):
        if stream.truncated and stream.cut_at is not None:
            content[f"{name}_cut_at"] = stream.cut_at
    if result.note:
        content["note"] = result.note
    if result.network:
        content["network"] = [
            {
                "host": use.host,
                "port": use.port,
                "bytes_in": use.bytes_in,
                "bytes_out": use.bytes_out,
                "allowed": use.allowed,
            }
            for use in result.network
        ]
    if result.table is not None:
        content["table"] = table_content(result.table)
    if result.session is not None:
        content["session"] = result.session.handle
        content["rolled_back"] = not result.session.kept and not result.session.ended
        content["session_note"] = result.session.note
    streams = [kept for kept in result.kept if not kept.is_file]
    files = [kept for kept in result.kept if kept.is_file]
    if streams:
        content["full_output"] = [
            {
                "stream": kept.stream,
                "uri": kept.uri,
                "bytes": kept.size,
                "complete": kept.complete,
                "expires_in_seconds": kept.seconds,
            }
            for kept in streams
        ]
    if files:
        content["linked_files"] = [
            {
                "path": kept.stream,
                "uri": kept.uri,
                "mime_type": kept.mime_type,
                "bytes": kept.size,
                "reason": kept.reason,
                "expires_in_seconds": kept.seconds,
            }
            for kept in files
        ]
    return content


def table_content(table: Table) -> dict[str, Any]:
    """`structuredContent.table`: what the app view sorts, filters and pages."""
    content: dict[str, Any] = {
        "columns": list(table.columns),
        "dtypes": list(table.dtypes),
        "shape": list(table.shape),
        "rows": [list(row) for row in table.rows],
    }
    if table.index_names:
        content["index"] = {"names": list(table.index_names), "rows": [list(key) for key in table.index_rows]}
    return content
