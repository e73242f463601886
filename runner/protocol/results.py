"""A `RunResult` in MCP's shape: the text block, structuredContent, and isError."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from runner.outcome import RunResult


def to_call_result(result: RunResult) -> types.CallToolResult:
    """Text block in the documented format plus structured content; isError unless status is ok."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=result.to_text())],
        structured_content=structured_result(result),
        is_error=result.is_error,
    )


def structured_result(result: RunResult) -> dict[str, Any]:
    """The structuredContent of a call, matching `output_schema()`."""
    return {
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
    }
