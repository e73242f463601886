"""Which zygote a call goes to: pure, over the code's text.

A call whose code imports a preloaded module, or anything outside the standard library (a package
of RUNNER_PACKAGES, which most likely builds on numpy), goes to the preloading zygote, where those
are already loaded; every other call keeps the lean one, so that a trivial call never pays for
forking a process of a hundred megabytes.

A scan of import statements, not a parse: the code is not compiled in the server, and a miss costs
time, never correctness (a lean run imports what it needs itself, under the same limits).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

# `import a.b as c, d` and `from a.b import c` at any indentation; __import__("a") and
# importlib.import_module("a.b").
_STATEMENT = re.compile(r"^[ \t]*(?:import[ \t]+([^#\n;]+)|from[ \t]+([\w.]+)[ \t]+import\b)", re.MULTILINE)
_CALL = re.compile(r"""(?:__import__|import_module)\(\s*['"]([\w.]+)['"]""")
_STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


def imported_packages(code: str) -> set[str]:
    """The top-level names of every module the code imports by a statement or a literal call."""
    found: set[str] = set()
    for plain, origin in _STATEMENT.findall(code):
        if origin:
            found.add(origin.split(".")[0])
        for clause in plain.split(","):
            name = clause.strip().split(" ")[0].strip("()\\")
            if name:
                found.add(name.split(".")[0])
    found.update(name.split(".")[0] for name in _CALL.findall(code))
    found.discard("")  # a relative import's "." part
    return found


def wants_preloaded(code: str, preloaded: Iterable[str]) -> bool:
    """Whether the code is better run by the zygote that preloaded `preloaded` (module names)."""
    tops = {name.split(".")[0] for name in preloaded}
    if not tops:
        return False
    return any(name in tops or name not in _STDLIB for name in imported_packages(code))
