"""The hand-written JSON Schemas of the tools: `run_python`'s input and output (structuredContent),
and `close_session`'s.

Numbers that depend on the configuration are filled in from it. Nothing here validates; see
`arguments` for that.
"""

from __future__ import annotations

from typing import Any

from runner.config import Config, PackagesConfig
from runner.outcome import Status
from runner.protocol.files import MAX_FILES, MAX_PATH_CHARS
from runner.protocol.packages import MAX_NAME_CHARS, MAX_PACKAGES

DIALECT = "https://json-schema.org/draft/2020-12/schema"
RUN_TOOL = "run_python"
CLOSE_TOOL = "close_session"
# SEP-2243: a client mirrors the `session` argument into an `Mcp-Param-Session` header, so that a
# proxy can route every call of a session to the replica that holds it without reading the body.
SESSION_HEADER = "Session"


def _session_property(description: str) -> dict[str, Any]:
    return {"type": "string", "x-mcp-header": SESSION_HEADER, "description": description}


def input_schema(config: Config) -> dict[str, Any]:
    """The tool's inputSchema; numbers that depend on the configuration are filled in from it."""
    return {
        "$schema": DIALECT,
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "description": (
                    f"Python 3 source to run as __main__ in a fresh interpreter (at most {config.max_code_bytes:,} "
                    "bytes of UTF-8). Print what you want to see."
                ),
            },
            "timeout": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": config.max_timeout,
                "default": config.default_timeout,
                "description": (
                    f"Wall-clock limit in seconds (default {config.default_timeout:g}, at most "
                    f"{config.max_timeout:g}); the whole process tree is killed when it is reached."
                ),
            },
            "stdin": {
                "type": "string",
                "description": (
                    f"Text fed to the program's standard input (at most {config.max_stdin_bytes:,} bytes). "
                    "Without it, stdin is empty and reads return EOF at once."
                ),
            },
            "files": {
                "type": "array",
                "maxItems": MAX_FILES,
                "description": (
                    "Files written into the run's working directory before the code starts, e.g. a CSV to load "
                    f"(at most {config.max_input_mb} MiB together, decoded). Paths are relative to that "
                    "directory; subdirectories are made as needed."
                ),
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "minLength": 1, "maxLength": MAX_PATH_CHARS},
                        "content": {"type": "string"},
                        "encoding": {"type": "string", "enum": ["utf-8", "base64"], "default": "utf-8"},
                    },
                    "required": ["path", "content"],
                    "additionalProperties": False,
                },
            },
            "packages": {
                "type": "array",
                "maxItems": MAX_PACKAGES,
                "items": {"type": "string", "maxLength": MAX_NAME_CHARS},
                "description": _packages_description(config.packages_section),
            },
            "session": _session_property(
                f"Leave this out: {config.sessions.refused}"
                if config.sessions.refused
                else '"new" starts a session: globals, imports, loaded data, open figures and the working '
                "directory's files are kept for the next call that passes the handle this call returns "
                "(structuredContent.session). Each call is still its own process; one that does not end "
                f"ok is rolled back. A session ends after {config.session_idle_seconds:,} s unused, "
                f"{config.session_max_seconds:,} s after it began, or with close_session. Without it, "
                "nothing is kept."
            ),
        },
        "required": ["code"],
        "additionalProperties": False,
    }


def _packages_description(packages: PackagesConfig) -> str:
    if not packages.wheelhouse_distributions:
        return "This server has no wheelhouse: leave this out (an entry other than a preinstalled package is refused)."
    names = ", ".join(distribution.name for distribution in packages.wheelhouse_distributions)
    return (
        "Distributions to provide besides what the code's import statements already bring in (those need no "
        "entry): for an import the code makes by a computed name. Names alone, from the server's vetted "
        f"wheelhouse: {names}. Installed once, offline, read-only."
    )


_NULLABLE_INT: dict[str, Any] = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
_NULLABLE_NUMBER: dict[str, Any] = {"anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}]}


# A table's cell: a JSON scalar.
_CELL = {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"}]}


def output_schema() -> dict[str, Any]:
    """The tool's outputSchema: what `structured_result` returns for every call."""
    count = {"type": "integer", "minimum": 0}
    return {
        "$schema": DIALECT,
        "type": "object",
        "properties": {
            "request_id": {"type": "string", "pattern": "^[0-9a-f]{8}$"},
            "status": {"type": "string", "enum": [s.value for s in Status]},
            "message": {
                "type": "string",
                "description": "Why the run ended this way; empty when it ran to completion.",
            },
            "exit_code": {
                **_NULLABLE_INT,
                "description": "Exit status; negative signal number when a signal ended it; null when nothing ran.",
            },
            "signal": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "e.g. SIGKILL"},
            "stdout": {"type": "string"},
            "stderr": {"type": "string"},
            "stdout_truncated": {"type": "boolean"},
            "stderr_truncated": {"type": "boolean"},
            "stdout_bytes": count,
            "stderr_bytes": count,
            "stdout_dropped_bytes": count,
            "stderr_dropped_bytes": count,
            **{
                f"{name}_cut_at": {
                    "type": "integer",
                    "minimum": 0,
                    "description": (
                        f"Only when {name} above was cut: where in it (in characters) the server's mark of the "
                        "cut begins, `\\n... [N bytes dropped] ...\\n`; a mark elsewhere is the run's own."
                    ),
                }
                for name in ("stdout", "stderr")
            },
            "duration_seconds": {"type": "number", "minimum": 0},
            "queue_wait_seconds": {"type": "number", "minimum": 0},
            "cpu_seconds": _NULLABLE_NUMBER,
            "peak_memory_bytes": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
            "result": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "description": "repr() of the last expression's value when the code ends with one that is not None.",
            },
            "result_truncated": {"type": "boolean"},
            "images": {
                "type": "array",
                "description": "The images returned as image content, in order (their bytes are there, not here).",
                "items": _object(
                    name={"type": "string"},
                    mime_type={"type": "string"},
                    bytes=count,
                    width=count,
                    height=count,
                    note={"type": "string"},
                ),
            },
            "files": {
                "type": "array",
                "description": "Files the code made or changed, returned as embedded resources (content there).",
                "items": _object(
                    path={"type": "string"}, uri={"type": "string"}, mime_type={"type": "string"}, bytes=count
                ),
            },
            "not_returned": {
                "type": "array",
                "description": "What the run made that did not come back, and why (a budget, a link, ...).",
                "items": _object(name={"type": "string"}, bytes=count, reason={"type": "string"}),
            },
            "note": {
                "type": "string",
                "description": (
                    "Only when the server has something to add: for a module the run could not import, whether "
                    "the wheelhouse has it and what it offers."
                ),
            },
            "network": {
                "type": "array",
                "description": (
                    "Only when the run used the network (RUNNER_EGRESS_ALLOW): each host and port it asked the "
                    "server's proxy for, the bytes it received from there and sent there, and whether it was "
                    "allowed (a refused one has 0 bytes)."
                ),
                "items": _object(
                    host={"type": "string"},
                    port={"type": "integer", "minimum": 1, "maximum": 65535},
                    bytes_in=count,
                    bytes_out=count,
                    allowed={"type": "boolean"},
                ),
            },
            "table": {
                "type": "object",
                "description": (
                    "Only for a client that shows MCP App views, when the last value is a pandas DataFrame or "
                    "Series: its column names and dtypes, its whole shape, and its first rows (at most "
                    "RUNNER_MAX_TABLE_ROWS), values as JSON (NaN and NaT as null, datetimes as ISO text); "
                    "`index` where its index is not 0, 1, 2, ..."
                ),
                "required": ["columns", "dtypes", "shape", "rows"],
                "properties": {
                    "columns": {"type": "array", "items": {"type": "string"}},
                    "dtypes": {"type": "array", "items": {"type": "string"}},
                    "shape": {"type": "array", "items": count, "minItems": 1, "maxItems": 2},
                    "rows": {"type": "array", "items": {"type": "array", "items": _CELL}},
                    "index": _object(
                        names={"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                        rows={"type": "array", "items": {"type": "array", "items": _CELL}},
                    ),
                },
                "additionalProperties": False,
            },
            "session": {
                "type": "string",
                "description": "The session's handle (only in a session's call): pass it as `session` to go on.",
            },
            "rolled_back": {
                "type": "boolean",
                "description": "True when the session is as it was before this call (only in a session's call).",
            },
            "session_note": {
                "type": "string",
                "description": (
                    "Why the call was rolled back, or what its kept state does not carry, or why the session "
                    "ended with it; may be empty."
                ),
            },
            "full_output": {
                "type": "array",
                "description": (
                    "Only when stdout or stderr above was cut: each such stream kept whole (up to "
                    "RUNNER_MAX_KEPT_OUTPUT_MB), linked as resource_link content too; read it with "
                    "resources/read on its uri within `expires_in_seconds`."
                ),
                "items": _object(
                    stream={"type": "string", "enum": ["stdout", "stderr"]},
                    uri={"type": "string"},
                    bytes=count,
                    complete={"type": "boolean", "description": "False when the keep cap cut it too."},
                    expires_in_seconds=count,
                ),
            },
            "linked_files": {
                "type": "array",
                "description": (
                    "Only when a file the code wrote (or a figure at full size) is over what the answer "
                    "carries: each kept whole (up to RUNNER_MAX_KEPT_OUTPUT_MB in all), linked as "
                    "resource_link content too; read it with resources/read on its uri within "
                    "`expires_in_seconds`."
                ),
                "items": _object(
                    path={"type": "string"},
                    uri={"type": "string"},
                    mime_type={"type": "string"},
                    bytes=count,
                    reason={"type": "string", "description": "The budget it is over."},
                    expires_in_seconds=count,
                ),
            },
        },
        "required": [
            "request_id",
            "status",
            "message",
            "exit_code",
            "signal",
            "stdout",
            "stderr",
            "stdout_truncated",
            "stderr_truncated",
            "stdout_bytes",
            "stderr_bytes",
            "stdout_dropped_bytes",
            "stderr_dropped_bytes",
            "duration_seconds",
            "queue_wait_seconds",
            "cpu_seconds",
            "peak_memory_bytes",
            "result",
            "result_truncated",
            "images",
            "files",
            "not_returned",
        ],
        "additionalProperties": False,
    }


def _object(**properties: dict[str, Any]) -> dict[str, Any]:
    """An object with exactly these properties, all of them required."""
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def close_input_schema() -> dict[str, Any]:
    """close_session's inputSchema."""
    return {
        "$schema": DIALECT,
        "type": "object",
        "properties": {"session": _session_property("The handle of a session, from a run_python result.")},
        "required": ["session"],
        "additionalProperties": False,
    }


def close_output_schema() -> dict[str, Any]:
    """close_session's outputSchema."""
    return {
        "$schema": DIALECT,
        "type": "object",
        "properties": {
            "request_id": {"type": "string", "pattern": "^[0-9a-f]{8}$"},
            "session": {"type": "string"},
            "closed": {"type": "boolean", "description": "False when no open session of this caller had the handle."},
            "message": {"type": "string"},
        },
        "required": ["request_id", "session", "closed", "message"],
        "additionalProperties": False,
    }
