"""Exceptions for infrastructure faults. A run's own outcome is data (see `outcome`), never an exception."""

from __future__ import annotations


class ConfigError(Exception):
    """A configuration variable has an unusable value; the server must not start."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


class Unavailable(Exception):
    """The host cannot give what a valid configuration asks for (a sandbox its probe refuses, a block of
    run uids other servers hold); the server must not start. `ConfigError` is for the values themselves,
    and is raised in `runner.config` alone."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


class SpawnError(Exception):
    """An interpreter could not be started or did not become ready."""


class ArgumentError(Exception):
    """Tool arguments failed validation; the message names the offending field."""


def is_exit(exc: BaseException) -> bool:
    """Whether `exc` ends the interpreter's work (Ctrl-C, sys.exit) rather than being a fault where it was
    raised. Any other BaseException is a fault to contain there: pyo3's PanicException, which a Rust
    extension raises as it panics (found by a review: rpds, under jsonschema, panicked as a downstream's
    self-referencing schema met Python's recursion limit, passed every `except Exception`, and ended the
    server). Code that awaits re-raises the event loop's cancellation before asking."""
    return isinstance(exc, (KeyboardInterrupt, SystemExit))
