"""What the vetted wheelhouse offers (issue 27, begun: nothing installs from it yet): its
distributions, the modules each one provides, and what each needs. Pure functions over the lock's
text and the wheels' file lists; no I/O but reading a zip's directory, never its members' code.

The lock (requirements-wheelhouse.lock, from pip-compile) is the source of versions, hashes and the
dependency graph: its `# via` comments name, for every pin, the pins that need it, as resolved for this
platform and Python when it was compiled, markers included. A wheel says which top-level modules it
installs: its `top_level.txt` when it has one, else the first part of every importable path in it.
So `import sklearn` maps to scikit-learn, and `from bs4 import BeautifulSoup` to beautifulsoup4,
without a table of our own that could go stale.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runner.environment import normalized_name as normalized

_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)[^\n]*\n((?:[ \t]+[^\n]*\n)*)", re.MULTILINE)
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_VIA_ONE = re.compile(r"^[ \t]*# via ([^\n]+)$", re.MULTILINE)
_VIA_MANY = re.compile(r"^[ \t]*#[ \t]{2,}([^\n]+)$", re.MULTILINE)
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EXTENSION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\.[\w-]+)?\.(?:so|pyd)$")


@dataclass(frozen=True, slots=True)
class Pin:
    """One distribution of the lock: its version, its hashes, and the pins that need it."""

    name: str  # normalized
    version: str
    hashes: frozenset[str]
    needed_by: frozenset[str] = frozenset()  # normalized names; "-r ..." and "-c ..." lines left out


def parse_lock(text: str) -> dict[str, Pin]:
    """Every pin of a pip-compile lock with hashes and `# via` comments."""
    pins = {}
    for match in _ENTRY.finditer(text):
        body = match[3]
        parents = _VIA_ONE.findall(body) + _VIA_MANY.findall(body)
        needed_by = frozenset(normalized(p.strip()) for p in parents if not p.strip().startswith(("-r", "-c")))
        name = normalized(match[1])
        pins[name] = Pin(name, match[2], frozenset(_HASH.findall(body)), needed_by)
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


@dataclass(frozen=True)
class Wheelhouse:
    """The wheelhouse as the server sees it: each extra distribution's wheel and pin, which modules
    map to which distribution, and what each needs of the others (those the package environment
    already has are not the wheelhouse's)."""

    wheels: Mapping[str, Path]  # normalized name -> its wheel
    pins: Mapping[str, Pin]
    modules: Mapping[str, str] = field(default_factory=dict)  # top-level module -> normalized name
    needs: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def read(cls, directory: Path, lock_text: str, base: Iterable[str]) -> Wheelhouse:
        """The wheelhouse in `directory` per its lock; `base`: the package environment's distributions."""
        pins = parse_lock(lock_text)
        present = set(normalized(name) for name in base)
        wheels = {}
        for path in sorted(directory.glob("*.whl")):
            name = normalized(path.name.split("-")[0])
            if name in pins and name not in present:
                wheels[name] = path
        modules: dict[str, str] = {}
        for name, path in sorted(wheels.items()):
            try:
                provides = wheel_modules(path)
            except (OSError, zipfile.BadZipFile):
                # A damaged wheel: no import maps to it, and naming it in `packages` fails its hash check.
                continue
            for module in provides:
                modules.setdefault(module, name)
        graph = requirements(pins)
        needs = {name: frozenset(n for n in graph.get(name, ()) if n in wheels) for name in wheels}
        return cls(wheels, {name: pins[name] for name in wheels}, modules, needs)

    def for_modules(self, modules: Iterable[str]) -> frozenset[str]:
        """The distributions that provide these top-level modules (the rest are not the wheelhouse's)."""
        return frozenset(self.modules[m] for m in modules if m in self.modules)

    def closure(self, names: Iterable[str]) -> tuple[str, ...]:
        """`names` and everything they need from the wheelhouse, sorted: what one run gets."""
        found: set[str] = set()
        pending = [normalized(n) for n in names]
        while pending:
            name = pending.pop()
            if name in found or name not in self.wheels:
                continue
            found.add(name)
            pending.extend(self.needs.get(name, ()))
        return tuple(sorted(found))
