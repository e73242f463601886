"""How one RUNNER_* variable is declared, read from its text and listed in docs/configuration.md.

The variables themselves are declared in `runner.config.variables`, each once, as a `Setting`: the reading,
the error that names a bad variable and the documentation's table all come from that record. Only
text is read here; what a path names on disk is looked at where the environment is opened
(`runner.config.disk`).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from runner.errors import ConfigError

# int: a whole number. number: a decimal number of `unit`; a number of MiB is held as whole bytes
# (rounded down), the others as they are. choice: one of `choices`, in any case. path: an absolute
# path. list: comma-separated items, each matching `pattern`. text: anything, or what `pattern` matches.
Kind = Literal["int", "number", "choice", "path", "list", "text"]
Unit = Literal["", "seconds", "MiB"]

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True, slots=True)
class Setting:
    """One RUNNER_* variable. Its default is its field's, in `Config` (so the two cannot differ)."""

    name: str
    field: str  # of Config; "http.<field>" for one of HttpConfig
    kind: Kind
    meaning: str  # the "Meaning" column of the documentation's table
    unit: Unit = ""
    # The accepted range, in the field's terms: bytes for a number of MiB.
    low: float = 0
    high: float = 0
    choices: tuple[str, ...] = ()
    pattern: str = ""
    expected: str = ""  # what a path, a list or a text must be, as its error says it
    # The documentation's "Default" and "Accepted" columns, where the value or the range alone does not say it.
    shown_default: str = ""
    shown_accepted: str = ""

    def __post_init__(self) -> None:
        # A number's range must hold something: `high` left at 0 above a `low` of 1 refused every value.
        if self.kind in ("int", "number") and self.high < self.low:
            raise ValueError(f"{self.name}: declared range {self.low}-{self.high} holds no value")

    @property
    def http(self) -> bool:
        """Whether this is one of HttpConfig's, read only when RUNNER_TRANSPORT=http."""
        return self.field.startswith("http.")

    @property
    def attribute(self) -> str:
        """The field's name in its own class."""
        return self.field.removeprefix("http.")

    def parse(self, raw: str) -> object:
        """The field's value for the variable's text `raw`, which is not blank; `ConfigError` naming the
        variable if it is not accepted."""
        text = raw.strip()
        if self.kind == "int":
            return self._integer(raw, text)
        if self.kind == "number":
            return self._number(raw, text)
        if self.kind == "choice":
            if text.lower() not in self.choices:
                raise ConfigError(self.name, f"expected one of {'|'.join(self.choices)}, got {raw!r}")
            return text.lower()
        if self.kind == "path":
            if not os.path.isabs(text):
                raise ConfigError(self.name, f"expected {self.expected}, got {text!r}")
            return text
        if self.kind == "list":
            items = tuple(part.strip() for part in text.split(",") if part.strip())
            for item in items:
                if not re.fullmatch(self.pattern, item):
                    raise ConfigError(self.name, f"expected {self.expected}, got {item!r}")
            return items
        if self.pattern and not re.fullmatch(self.pattern, text):
            raise ConfigError(self.name, f"expected {self.expected}, got {text!r}")
        return text

    def expectation(self, high: float | None = None) -> str:
        """What the error of a bad value says was expected (up to `high` instead of the declared bound)."""
        top = self.high if high is None else high
        if self.kind == "int":
            return f"an integer from {self.low} to {top}"
        if self.unit == "MiB":
            return f"a number of MiB from {mebibytes(self.low)} to {mebibytes(top)}"
        return f"a number of seconds from {self.low:g} to {top:g}"

    def _integer(self, raw: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(self.name, f"expected {self.expectation()}, got {raw!r}") from None
        if not self.low <= value <= self.high:
            raise ConfigError(self.name, f"expected {self.expectation()}, got {value}")
        return value

    def _number(self, raw: str, text: str) -> float | int:
        try:
            value = float(text) * (MIB if self.unit == "MiB" else 1)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not self.low <= value <= self.high:
            raise ConfigError(self.name, f"expected {self.expectation()}, got {raw!r}")
        return int(value) if self.unit == "MiB" else value

    def row(self, default: object) -> str:
        """The variable's row of the documentation's table, `default` being its field's default."""
        return f"| `{self.name}` | {self._default(default)} | {self._accepted()} | {self.meaning} |"

    def _default(self, default: object) -> str:
        if self.shown_default:
            return self.shown_default
        if self.unit == "MiB" and isinstance(default, int):
            return f"`{mebibytes(default)}`{_kib(default)}"
        return f"`{default:g}`" if isinstance(default, float) else f"`{default}`"

    def _accepted(self) -> str:
        if self.shown_accepted:
            return self.shown_accepted
        if self.kind == "int":
            return f"integer {self.low}-{self.high}"
        if self.kind == "choice":
            return ", ".join(f"`{choice}`" for choice in self.choices) + " (any case)"
        if self.unit == "MiB":
            return f"number of MiB {mebibytes(self.low)}{_kib(self.low)}-{mebibytes(self.high)}"
        return f"number {self.low:g}-{self.high:g}"


def mebibytes(count: float) -> str:
    """`count` bytes in MiB, exactly: a whole number of bytes is at most 20 decimals of a MiB."""
    return f"{count / MIB:.20f}".rstrip("0").rstrip(".")


def _kib(count: float) -> str:
    """A size below one MiB in KiB too (`0.046875` says little; 48 KiB does)."""
    return f" ({count / KIB:g} KiB)" if 0 < count < MIB else ""


def markdown_table(settings: Iterable[Setting], defaults: object, http_defaults: object) -> str:
    """docs/configuration.md's table of every variable, from the declarations and the fields' defaults."""
    rows = (each.row(getattr(http_defaults if each.http else defaults, each.attribute)) for each in settings)
    return "\n".join(("| Variable | Default | Accepted | Meaning |", "| --- | --- | --- | --- |", *rows)) + "\n"


# Read by the test suite (tests/conftest.py, the Makefile's `unit`), not by the server.
TEST_PREFIX = "RUNNER_TEST_"
# Set by a server of ours in a stdio tool server's environment (the directory it holds, for the start
# after a killed server; the mark the stray sweep knows that server by): which may be another
# python-runner-mcp, for whom they are no settings, nor misspellings of one.
HELD_VARIABLE = "RUNNER_HELD_DIRECTORY"
MARK_VARIABLE = "RUNNER_TOOL_SERVER_MARK"
# Set on every job by GitHub Actions (and the runners of Forgejo and Gitea, which copy it): a client run
# there that passes its environment on would otherwise get no server (found by a first hour).
CI_VARIABLES = frozenset(
    (
        "RUNNER_ARCH",
        "RUNNER_DEBUG",
        "RUNNER_ENVIRONMENT",
        "RUNNER_NAME",
        "RUNNER_OS",
        "RUNNER_PERFLOG",
        "RUNNER_TEMP",
        "RUNNER_TOOL_CACHE",
        "RUNNER_TRACKING_ID",
        "RUNNER_WORKSPACE",
    )
)


# Names a user may well mean more than one setting by: each is named, with what it is.
AMBIGUOUS = {
    "RUNNER_TIMEOUT": "RUNNER_DEFAULT_TIMEOUT (a call's timeout when it names none) or RUNNER_MAX_TIMEOUT "
    "(the most a call may ask for)",
    # Found by a first hour: the closest spelling named a limit of code mode's, or the setting that gives
    # runs the server's whole network, where what was meant was the file of servers, or the allowlist.
    "RUNNER_TOOLS": "RUNNER_TOOLS_CONFIG (the file of MCP servers runs may call)",
    "RUNNER_NETWORK": "RUNNER_EGRESS_ALLOW (the hosts runs may reach through the server's proxy)",
    "RUNNER_ALLOW_NETWORK": "RUNNER_EGRESS_ALLOW (the hosts runs may reach through the server's proxy)",
    "RUNNER_EGRESS": "RUNNER_EGRESS_ALLOW (the hosts runs may reach through the server's proxy)",
}


def unknown_variables(settings: Iterable[Setting], environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """Each RUNNER_* name in `environ` that no setting has (a misspelling the server would otherwise run
    without: RUNNER_MAX_MEMORY=512 left every run at the default 256 MiB), with why, naming the closest
    known one where there is one. The test suite's own (RUNNER_TEST_*) are not the server's, nor are the
    marks a server of ours sets on a tool server it starts, nor a CI runner's own (`CI_VARIABLES`)."""
    known = sorted(setting.name for setting in settings)
    said = []
    for name in sorted(environ):
        if not name.startswith("RUNNER_") or name in known or name.startswith(TEST_PREFIX):
            continue
        if name in (HELD_VARIABLE, MARK_VARIABLE) or name in CI_VARIABLES:
            continue
        close = AMBIGUOUS.get(name) or closest_name(name, known)
        guess = f"; did you mean {close}?" if close else ""
        said.append((name, f"not a setting of this server{guess}"))
    return said


def closest_name(name: str, known: list[str]) -> str:
    """The known name `name` most likely misspells, or "": one that holds it (or that it holds) with the
    underscores left out (RUNNER_MAXCPU, RUNNER_MAX_CPU_SECONDS), else the most alike of those alike."""
    import difflib

    def squashed(text: str) -> str:  # in capitals too (found by a first hour: RUNNER_max_memory_mb, no guess)
        return text.upper().removeprefix("RUNNER_").replace("_", "")

    mine = squashed(name)
    holding = [other for other in known if len(mine) >= 4 and (mine in squashed(other) or squashed(other) in mine)]
    if holding:
        return min(holding, key=lambda other: abs(len(squashed(other)) - len(mine)))
    by_squashed = {squashed(other): other for other in known}
    close = difflib.get_close_matches(mine, list(by_squashed), n=1, cutoff=0.75)
    return by_squashed[close[0]] if close else ""
