"""The hand-written JSON Schemas of `run_python`: its input, and its output (structuredContent).

Numbers that depend on the configuration are filled in from it. Nothing here validates; see
`arguments` for that.
"""

from __future__ import annotations

from typing import Any

from runner.config import Config
from runner.outcome import Status
from runner.protocol.files import MAX_FILES, MAX_PATH_CHARS

DIALECT = "https://json-schema.org/draft/2020-12/schema"


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
        },
        "required": ["code"],
        "additionalProperties": False,
    }


_NULLABLE_INT: dict[str, Any] = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
_NULLABLE_NUMBER: dict[str, Any] = {"anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}]}


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
