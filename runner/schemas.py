"""The hand-written JSON Schemas of `run_python` (input and output) and argument parsing against them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.config import Config
from runner.errors import ArgumentError
from runner.outcome import RunResult, Status

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

TOOL_NAME = "run_python"
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
        ],
        "additionalProperties": False,
    }


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


@dataclass(frozen=True, slots=True)
class Arguments:
    """Validated arguments of one call."""

    code: str
    timeout: float
    stdin: str


class ArgumentParser:
    """Validates `run_python` arguments against the input schema, then against the byte caps."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._validator: Draft202012Validator | None = None
        self._best_match: Callable[[Iterable[ValidationError]], ValidationError | None] | None = None

    def parse(self, arguments: Any) -> Arguments:
        """Return validated arguments or raise `ArgumentError` with a message naming the field."""
        if arguments is None:
            arguments = {}
        if self._validator is None or self._best_match is None:
            # Imported at the first call: jsonschema takes ~30 ms to import (a twentieth of the
            # server's start), which the initialize response does not need to wait for.
            from jsonschema import Draft202012Validator
            from jsonschema.exceptions import best_match

            self._validator, self._best_match = Draft202012Validator(input_schema(self._config)), best_match
        error = self._best_match(self._validator.iter_errors(arguments))
        if error is not None:
            raise ArgumentError(_describe(error))
        code: str = arguments["code"]
        stdin: str = arguments.get("stdin", "")
        timeout = float(arguments.get("timeout", self._config.default_timeout))
        _check_bytes("code", code, self._config.max_code_bytes)
        _check_bytes("stdin", stdin, self._config.max_stdin_bytes)
        return Arguments(code=code, timeout=timeout, stdin=stdin)


def _check_bytes(name: str, value: str, limit: int) -> None:
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ArgumentError(
            f"invalid argument '{name}': contains a lone surrogate at character {exc.start} (not valid Unicode)"
        ) from None
    if size > limit:
        raise ArgumentError(f"invalid argument '{name}': {size:,} bytes of UTF-8, more than the limit of {limit:,}")


_KNOWN_ARGUMENTS = frozenset({"code", "timeout", "stdin"})


def _describe(error: ValidationError) -> str:
    if error.validator == "additionalProperties":
        instance: dict[str, Any] = error.instance  # type: ignore[assignment]  # an object, per the schema
        extra = sorted(name for name in instance if name not in _KNOWN_ARGUMENTS)
        names = ", ".join(repr(name) for name in extra)
        return f"unknown argument {names}: run_python takes 'code', and optionally 'timeout' and 'stdin'"
    if error.validator == "required":
        return f"missing argument: {error.message}"
    if error.validator == "type" and not error.path:
        return f"arguments must be a JSON object, got {type(error.instance).__name__}"
    field = ".".join(str(part) for part in error.absolute_path) or "arguments"
    return f"invalid argument '{field}': {error.message}"
