"""Validating tool arguments: the input schema first (jsonschema), then, for `run_python`, the byte caps.

Every violation becomes an `ArgumentError` whose message names the offending field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.config import Config
from runner.errors import ArgumentError
from runner.outcome import InputFile
from runner.protocol.files import check_files
from runner.protocol.packages import check_packages
from runner.protocol.schemas import CLOSE_TOOL, RUN_TOOL, close_input_schema, input_schema

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError


@dataclass(frozen=True, slots=True)
class Arguments:
    """Validated arguments of one call."""

    code: str
    timeout: float
    stdin: str
    files: tuple[InputFile, ...] = ()
    session: str | None = None
    packages: tuple[str, ...] = ()  # the wheelhouse's distributions, normalized


class ArgumentParser:
    """Validates `run_python` arguments against the input schema, then against the byte caps; and
    `close_session`'s against its own."""

    def __init__(self, config: Config) -> None:
        # The whole, for the input schema (which says the limits, the sessions and the packages); the
        # checks beyond it read two sections.
        self._config = config
        self._limits = config.limits
        self._packages = config.packages_section
        self._validators: dict[str, Draft202012Validator] = {}
        self._best_match: Callable[[Iterable[ValidationError]], ValidationError | None] | None = None

    def _check(self, tool: str, schema: Callable[[], dict[str, Any]], arguments: Any) -> dict[str, Any]:
        if arguments is None:
            arguments = {}
        validator = self._validators.get(tool)
        if validator is None or self._best_match is None:
            # Imported at the first call: jsonschema takes ~30 ms to import (a twentieth of the
            # server's start), which the initialize response does not need to wait for.
            from jsonschema import Draft202012Validator
            from jsonschema.exceptions import best_match

            validator = self._validators[tool] = Draft202012Validator(schema())
            self._best_match = best_match
        error = self._best_match(validator.iter_errors(arguments))
        if error is not None:
            raise ArgumentError(_describe(error, tool))
        checked: dict[str, Any] = arguments
        return checked

    def parse_close(self, arguments: Any) -> str:
        """The handle `close_session` was given, or `ArgumentError`."""
        handle: str = self._check(CLOSE_TOOL, close_input_schema, arguments)["session"]
        return handle

    def parse(self, arguments: Any) -> Arguments:
        """Return validated arguments or raise `ArgumentError` with a message naming the field."""
        arguments = self._check(RUN_TOOL, lambda: input_schema(self._config), arguments)
        code: str = arguments["code"]
        stdin: str = arguments.get("stdin", "")
        limits = self._limits
        timeout = float(arguments.get("timeout", limits.default_timeout))
        _check_bytes("code", code, limits.max_code_bytes)
        _check_bytes("stdin", stdin, limits.max_stdin_bytes)
        files = check_files(arguments.get("files", ()), limits.max_input_bytes, limits.file_size_bytes)
        packages = check_packages(arguments.get("packages", ()), self._packages)
        return Arguments(code, timeout, stdin, files, arguments.get("session"), packages)


def _check_bytes(name: str, value: str, limit: int) -> None:
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ArgumentError(
            f"invalid argument '{name}': contains a lone surrogate at character {exc.start} (not valid Unicode)"
        ) from None
    if size > limit:
        raise ArgumentError(
            f"invalid argument '{name}': {size:,} bytes of UTF-8, more than the limit of {limit:,} "
            f"(RUNNER_MAX_{name.upper()}_MB)"
        )


_KNOWN_ARGUMENTS = {
    RUN_TOOL: frozenset({"code", "timeout", "stdin", "files", "packages", "session"}),
    CLOSE_TOOL: frozenset({"session"}),
}
_TAKES = {
    RUN_TOOL: "run_python takes 'code', and optionally 'timeout', 'stdin', 'files', 'packages' and 'session'",
    CLOSE_TOOL: "close_session takes 'session' only",
}
_FILE_FIELDS = frozenset({"path", "content", "encoding"})
# How a number's bound reads, by the schema keyword that sets it.
_BOUNDS = {
    "minimum": "at least",
    "exclusiveMinimum": "more than",
    "maximum": "at most",
    "exclusiveMaximum": "less than",
}


def _describe(error: ValidationError, tool: str) -> str:
    if error.validator == "additionalProperties":
        instance: dict[str, Any] = error.instance  # type: ignore[assignment]  # an object, per the schema
        known = _FILE_FIELDS if error.absolute_path else _KNOWN_ARGUMENTS[tool]
        names = ", ".join(repr(name) for name in sorted(name for name in instance if name not in known))
        if error.absolute_path:  # inside an entry of `files`
            where = _field(error)
            return f"invalid argument '{where}': unknown field {names}; a file has 'path', 'content' and 'encoding'"
        return f"unknown argument {names}: {_TAKES[tool]}"
    if error.validator == "required":
        if error.absolute_path:  # an entry of `files` without a field it needs, perhaps misnamed
            entry: dict[str, Any] = error.instance  # type: ignore[assignment]  # an object, per the schema
            unknown = sorted(name for name in entry if name not in _FILE_FIELDS)
            also = f"; unknown field {', '.join(map(repr, unknown))}" if unknown else ""
            missing = error.message.split("'")[1] if error.message.count("'") >= 2 else error.message
            return (
                f"invalid argument '{_field(error)}': missing field {missing!r}{also}; "
                "a file has 'path', 'content' and 'encoding'"
            )
        return f"missing argument: {error.message}"
    bound = _BOUNDS.get(str(error.validator))
    if bound is not None:
        value: float = error.validator_value  # type: ignore[assignment]  # a number, per the schema
        setting = " (RUNNER_MAX_TIMEOUT)" if error.validator == "maximum" and _field(error) == "timeout" else ""
        shown = int(value) if float(value).is_integer() else value
        return f"invalid argument '{_field(error)}': must be {bound} {shown}{setting}, got {error.instance!r}"
    if error.validator == "type" and not error.path:
        return f"arguments must be a JSON object, got {type(error.instance).__name__}"
    return f"invalid argument '{_field(error)}': {error.message}"


def _field(error: ValidationError) -> str:
    """e.g. files[0].path: where in the arguments the error is."""
    parts = [f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path]
    return "".join(parts).lstrip(".") or "arguments"
