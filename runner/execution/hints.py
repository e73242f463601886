"""One line more for a run that failed to import a module this server cannot give it, so that a model
does not try `pip install` next: what the module is not (in the package environment, in the wheelhouse),
and what the wheelhouse offers instead, bounded.

The stderr a run wrote is read here as hostile text, only its last line, by one anchored pattern (pure
functions); a run that prints such a line itself gets the same note, which only says what the server
has. `ModuleNotes` applies them to a result, looking the module up only on that path.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from runner.outcome import RunResult, Status

# The interpreter's last line for an uncaught ModuleNotFoundError; a dotted name's first part is the
# distribution's module. Only the stream's end is looked at: stderr is capped, not trusted.
_MISSING = re.compile(r"(?:^|\n)ModuleNotFoundError: No module named '([A-Za-z_]\w{0,99})(?:\.[\w.]{0,200})?'\n?\Z")
TAIL_CHARS = 400
SHOWN = 20


def missing_module(stderr: str) -> str | None:
    """The top-level module an uncaught ModuleNotFoundError at the end of `stderr` names, or None."""
    found = _MISSING.search(stderr[-TAIL_CHARS:])
    return found[1] if found else None


def missing_module_note(
    module: str, present: Callable[[str], bool], wheelhouse: Mapping[str, str], offered: Sequence[str]
) -> str:
    """The note for a run that could not import `module`: "" when it is there (`present`: in the
    standard library or the package environment; what failed was within it); else whether the
    wheelhouse has it (`wheelhouse`: module -> distribution) but the call did not ask for it, or that
    nothing here has it, with at most SHOWN of the modules the wheelhouse `offered`."""
    if present(module):
        return ""
    if module in wheelhouse:
        return (
            f"{module!r} is in the wheelhouse ({wheelhouse[module]}) but was not installed for this call: "
            f"the code imports it by a name no import statement shows; name {wheelhouse[module]!r} in 'packages'"
        )
    said = f"no module {module!r} here: it is neither in the package environment nor in the wheelhouse"
    if not offered:
        return said + ", and this server has no wheelhouse; nothing can be installed"
    shown = ", ".join(offered[:SHOWN]) + (f" and {len(offered) - SHOWN} more" if len(offered) > SHOWN else "")
    return f"{said}, and nothing else can be installed; the wheelhouse offers {shown}"


@dataclass(frozen=True)
class ModuleNotes:
    """What a result's note is made from, decided when the pool opens: the package environment's
    site-packages, the wheelhouse's module -> distribution map, and what it offers a user."""

    site: str = ""
    wheelhouse: Mapping[str, str] = dataclasses.field(default_factory=dict)
    offered: tuple[str, ...] = ()

    def noted(self, result: RunResult) -> RunResult:
        """`result`, with a note when it is an error that ended on a module this server cannot give."""
        if result.status is not Status.ERROR:
            return result
        module = missing_module(result.stderr.text)
        note = missing_module_note(module, self._present, self.wheelhouse, self.offered) if module else ""
        return dataclasses.replace(result, note=note) if note else result

    def _present(self, module: str) -> bool:
        if module in sys.stdlib_module_names:
            return True
        return bool(self.site) and importlib.machinery.PathFinder.find_spec(module, [self.site]) is not None
