"""One reader of the locks and wheels the package environment and the vetted wheelhouse are made from:
pins, versions, hashes, who needs what, which pins were asked for, and the top-level modules a wheel or
an installed distribution provides. Pure functions over a lock's text and a wheel's or a distribution's
file list; no I/O but reading a zip's directory or an installed
distribution's metadata (`installed`).

A lock is pip-compile's output: its `# via` comments name, for every pin, the pins that need it (as
resolved for this platform and Python when it was compiled, markers included), and `-r FILE.in` for the
pins FILE.in asked for, which are what a user imports (numpy, sklearn), not what they need (cycler,
threadpoolctl). A wheel says which top-level modules it installs: its `top_level.txt` when it has one,
else the first part of every importable path in it. So `import sklearn` maps to scikit-learn, and
`from bs4 import BeautifulSoup` to beautifulsoup4, without a table of our own that could go stale.

What a distribution needs is read from the lock's `# via` graph, not from its wheel's `Requires-Dist`:
those carry environment markers and extras (`; python_version < "3.12"`, `; extra == "plot"`) that
only `packaging` evaluates (not a dependency of the server's), and the lock is already that
evaluation, done by the resolver for the platform the wheelhouse was downloaded for; a closure read
from it is what was vetted and hashed together, never a distribution the lock does not pin.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)[^\n]*\n((?:[ \t]+[^\n]*\n)*)", re.MULTILINE)
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_VIA_ONE = re.compile(r"^[ \t]*# via ([^\n]+)$", re.MULTILINE)
_VIA_MANY = re.compile(r"^[ \t]*#[ \t]{2,}([^\n]+)$", re.MULTILINE)
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EXTENSION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\.[\w-]+)?\.(?:so|pyd)$")


@dataclass(frozen=True, slots=True, order=True)
class Distribution:
    """One distribution an environment has or offers: its name (as its metadata spells it) and version."""

    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


@dataclass(frozen=True, slots=True)
class Pin:
    """One distribution of the lock: its version, its hashes, and the pins that need it."""

    name: str  # normalized
    version: str
    hashes: frozenset[str]
    needed_by: frozenset[str] = frozenset()  # normalized names; "-r ..." and "-c ..." lines left out
    requested: bool = False  # asked for by the lock's .in file ("# via -r ..."): what a user imports


def parse_lock(text: str) -> dict[str, Pin]:
    """Every pin of a pip-compile lock with hashes and `# via` comments."""
    pins = {}
    for match in _ENTRY.finditer(text):
        body = match[3]
        parents = _VIA_ONE.findall(body) + _VIA_MANY.findall(body)
        needed_by = frozenset(normalized(p.strip()) for p in parents if not p.strip().startswith(("-r", "-c")))
        requested = any(p.strip().startswith("-r") for p in parents)
        name = normalized(match[1])
        pins[name] = Pin(name, match[2], frozenset(_HASH.findall(body)), needed_by, requested)
    return pins


def requirements(pins: Mapping[str, Pin]) -> dict[str, frozenset[str]]:
    """For every pin, the pins it needs: the `# via` graph turned around."""
    needs: dict[str, set[str]] = {name: set() for name in pins}
    for name, pin in pins.items():
        for parent in pin.needed_by:
            if parent in needs:
                needs[parent].add(name)
    return {name: frozenset(found) for name, found in needs.items()}


def top_level_modules(names: Iterable[str]) -> frozenset[str]:
    """The top-level modules a wheel whose members are `names` installs: `*.dist-info/top_level.txt`
    is read by the caller when there is one; this is the fallback, from the paths themselves."""
    found = set()
    for member in names:
        first, _, rest = member.partition("/")
        if first.endswith((".dist-info", ".data")):
            continue
        if rest:  # a package directory (or a namespace package's)
            if _MODULE.match(first):
                found.add(first)
        elif first.endswith(".py") and _MODULE.match(first[:-3]):
            found.add(first[:-3])
        elif extension := _EXTENSION.match(first):
            found.add(extension[1])
    return frozenset(found)


def wheel_modules(path: Path) -> frozenset[str]:
    """The top-level modules the wheel at `path` installs, from its directory alone."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        listed = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/top_level.txt")]
        if listed:
            text = archive.read(listed[0]).decode("utf-8", "replace")
            modules = {line.strip().split("/")[0] for line in text.splitlines()}
            return frozenset(m for m in modules if _MODULE.match(m))
    return top_level_modules(names)


def installed_modules(distribution: metadata.Distribution) -> frozenset[str]:
    """The top-level modules an installed `distribution` provides: its `top_level.txt` when it has
    one, else the paths its RECORD lists."""
    text = distribution.read_text("top_level.txt")
    if text is not None:
        return frozenset(m for m in (line.strip().split("/")[0] for line in text.splitlines()) if _MODULE.match(m))
    return top_level_modules(str(path) for path in distribution.files or ())


def installed(site: str) -> dict[Distribution, frozenset[str]]:
    """Every distribution installed in `site` (a site-packages directory), with the top-level modules
    it provides. Read with `importlib.metadata`, the standard library's reader of installed
    distributions: names and versions from their METADATA as the packaging specs define them, not
    from a directory name's spelling, and `.egg-info` installs too (a user's own environment may have
    them). It reads a file more per distribution than listing directory names did: 12 ms against
    5 ms for the 13 of `make sandbox-env`, once, at start."""
    found: dict[Distribution, frozenset[str]] = {}
    for distribution in metadata.distributions(path=[site]):
        name, version = distribution.metadata["Name"], distribution.version
        if name and version:  # without them it is no install (a half-removed one)
            found[Distribution(name, version)] = installed_modules(distribution)
    return dict(sorted(found.items()))


def shown_modules(distribution: str, modules: Iterable[str]) -> tuple[str, ...]:
    """What a user imports of a distribution that provides `modules`: the one named like it when
    there is one (matplotlib, not also pylab and mpl_toolkits), else every public one (sklearn, yaml)."""
    public = sorted(m for m in modules if not m.startswith("_"))
    own = [m for m in public if normalized(m) == normalized(distribution)]
    return tuple(own or public)


def normalized(name: str) -> str:
    """PEP 503: the form under which two spellings of a distribution's name are the same (the lock's,
    a wheel's file name, a `packages` entry)."""
    return re.sub(r"[-_.]+", "-", name).lower()
