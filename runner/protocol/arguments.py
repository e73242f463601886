"""Validating tool arguments: the input schema first (jsonschema), then, for `run_python`, the byte caps.

Every violation becomes an `ArgumentError` whose message names the offending field.

What jsonschema costs grows with the instance (an error made, its whole instance repr'd, for each
bad item of an array), and a call is checked on the event loop: so what is cheap and bounds the rest
is checked by hand first (each argument's type, the length of each array and of each bounded string,
every key known), and jsonschema only sees arguments of a bounded size. A message shows at most
`SHOWN_CHARS` of any value.
"""

from __future__ import annotations

import heapq
import itertools
import math
import reprlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.config import Config
from runner.errors import ArgumentError
from runner.logs import SHOWN_CHARS, cut
from runner.outcome import InputFile
from runner.protocol.files import MAX_FILES, MAX_PATH_CHARS, check_files
from runner.protocol.packages import MAX_NAME_CHARS, MAX_PACKAGES, check_packages
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
        _check_shape(tool, arguments)
        # A few errors at most are made and ranked: after the check by hand there are few to make, but
        # jsonschema makes them all if asked (one per bad item), each with its instance's repr.
        error = self._best_match(itertools.islice(validator.iter_errors(arguments), MAX_ERRORS))
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
        names = _names(name for name in instance if name not in known)
        if error.absolute_path:  # inside an entry of `files`
            where = _field(error)
            return f"invalid argument '{where}': unknown field {names}; a file has 'path', 'content' and 'encoding'"
        return f"unknown argument {names}: {_TAKES[tool]}"
    if error.validator == "required":
        if error.absolute_path:  # an entry of `files` without a field it needs, perhaps misnamed
            entry: dict[str, Any] = error.instance  # type: ignore[assignment]  # an object, per the schema
            unknown = [name for name in entry if name not in _FILE_FIELDS]
            also = f"; unknown field {_names(unknown)}" if unknown else ""
            missing = error.message.split("'")[1] if error.message.count("'") >= 2 else error.message
            missing = cut(missing, SHOWN_CHARS)
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
        return f"invalid argument '{_field(error)}': must be {bound} {shown}{setting}, got {_shown(error.instance)}"
    if error.validator == "type" and not error.path:
        return f"arguments must be a JSON object, got {type(error.instance).__name__}"
    return f"invalid argument '{_field(error)}': {cut(error.message, SHOWN_CHARS)}"


def _field(error: ValidationError) -> str:
    """e.g. files[0].path: where in the arguments the error is."""
    parts = [f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path]
    return "".join(parts).lstrip(".") or "arguments"


# How many unknown names a message lists.
SHOWN_NAMES = 5
# How many of jsonschema's errors are made and ranked (best_match) at most.
MAX_ERRORS = 8
_PYTHON_TYPES: dict[str, type] = {"string": str, "array": list, "object": dict}
# Each argument's JSON type, checked by hand before jsonschema sees the arguments.
_TYPES = {
    RUN_TOOL: {
        "code": "string",
        "timeout": "number",
        "stdin": "string",
        "files": "array",
        "packages": "array",
        "session": "string",
    },
    CLOSE_TOOL: {"session": "string"},
}
_ENCODINGS = ("utf-8", "base64")
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 3, 8, 8, SHOWN_CHARS, SHOWN_CHARS


def _check_shape(tool: str, arguments: object) -> None:
    """What the schema says that is cheap to check and bounds the rest, by hand: an `ArgumentError` in
    jsonschema's words (as `_describe` puts them) for the first argument that is not so, in time linear
    in the arguments' keys and the arrays' bounds, never in their items."""
    if not isinstance(arguments, dict):
        raise ArgumentError(f"arguments must be a JSON object, got {_type_name(arguments)}")
    types = _TYPES[tool]
    unknown = [name for name in arguments if name not in types]
    if unknown:
        raise ArgumentError(f"unknown argument {_names(unknown)}: {_TAKES[tool]}")
    for name, value in arguments.items():
        _check_type(name, value, types[name])
    files = arguments.get("files", ())
    _check_length("files", files, MAX_FILES)
    for index, entry in enumerate(files):
        where = f"files[{index}]"
        _check_type(where, entry, "object")
        extra = [name for name in entry if name not in _FILE_FIELDS]
        if extra:  # a misnamed field, perhaps: the one it stands for is said missing too, as `_describe` does
            missing = next((f"missing field {name!r}; " for name in ("path", "content") if name not in entry), "")
            raise ArgumentError(
                f"invalid argument '{where}': {missing}unknown field {_names(extra)}; "
                "a file has 'path', 'content' and 'encoding'"
            )
        for field, value in entry.items():
            _check_type(f"{where}.{field}", value, "string")
        if len(entry.get("path", "")) > MAX_PATH_CHARS:
            raise ArgumentError(
                f"invalid argument '{where}.path': {len(entry['path']):,} characters, more than {MAX_PATH_CHARS:,}"
            )
        if entry.get("encoding", "utf-8") not in _ENCODINGS:
            raise ArgumentError(
                f"invalid argument '{where}.encoding': {_shown(entry['encoding'])} is not one of {list(_ENCODINGS)}"
            )
    packages = arguments.get("packages", ())
    _check_length("packages", packages, MAX_PACKAGES)
    for index, entry in enumerate(packages):
        _check_type(f"packages[{index}]", entry, "string")
        if len(entry) > MAX_NAME_CHARS:
            raise ArgumentError(
                f"invalid argument 'packages[{index}]': {len(entry):,} characters, more than {MAX_NAME_CHARS:,}"
            )


def _check_type(where: str, value: object, expected: str) -> None:
    if not _is(value, expected):
        raise ArgumentError(f"invalid argument '{where}': {_shown(value)} is not of type '{expected}'")
    if isinstance(value, float) and not math.isfinite(value):
        # JSON has no NaN or infinity, but the SDK's parser takes them; NaN passes every bound of the
        # schema (each comparison is false) and would reach the run's deadline.
        raise ArgumentError(f"invalid argument '{where}': must be a finite number, got {value}")


def _is(value: object, expected: str) -> bool:
    if expected == "number":  # as JSON Schema has it: true and false are not numbers
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, _PYTHON_TYPES[expected])


def _check_length(where: str, value: list[Any], limit: int) -> None:
    if len(value) > limit:
        raise ArgumentError(f"invalid argument '{where}': {len(value):,} entries, more than {limit:,}")


def _type_name(value: object) -> str:
    return type(value).__name__


def _shown(value: object) -> str:
    """repr(value), at most SHOWN_CHARS of it, made without repr'ing the whole (reprlib looks at the first
    few items of a container, a few levels deep, and the ends of a string)."""
    try:
        return cut(_REPR.repr(value), SHOWN_CHARS)
    except ValueError:  # an int of more digits than Python converts
        return f"a {_type_name(value)} too large to show"


def _names(names: Iterable[str]) -> str:
    """The first few of `names`, sorted, each cut, and how many there were."""
    listed = list(names)
    first = heapq.nsmallest(SHOWN_NAMES, listed)
    shown = ", ".join(_shown(name) for name in first)
    return shown if len(listed) <= SHOWN_NAMES else f"{shown} and {len(listed) - SHOWN_NAMES:,} more"
