"""Exceptions for infrastructure faults. A run's own outcome is data (see `outcome`), never an exception."""

from __future__ import annotations


class ConfigError(Exception):
    """A configuration variable has an unusable value; the server must not start."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


class SpawnError(Exception):
    """An interpreter could not be started or did not become ready."""


class ArgumentError(Exception):
    """Tool arguments failed validation; the message names the offending field."""
