"""What the vetted wheelhouse offers: its distributions, the modules each one provides, and what each
needs of the others, read with `runner.config.locks` from the lock beside the wheels and the wheels'
directories. Read once, when the configuration is opened (`runner.config.disk`): the tool's description
lists its modules, and the execution side maps a call's imports to what it installs with the same value.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runner.config.locks import Pin, normalized, parse_lock, requirements, wheel_modules


@dataclass(frozen=True)
class Wheelhouse:
    """The wheelhouse as the server sees it: each extra distribution's wheel and pin, which modules
    map to which distribution, and what each needs of the others (those the package environment
    already has are not the wheelhouse's)."""

    wheels: Mapping[str, Path]  # normalized name -> its wheel
    pins: Mapping[str, Pin]
    modules: Mapping[str, str] = field(default_factory=dict)  # top-level module -> normalized name
    needs: Mapping[str, frozenset[str]] = field(default_factory=dict)
    provides: Mapping[str, frozenset[str]] = field(default_factory=dict)  # normalized name -> its modules
    directory: Path = Path()  # where it is (resolved)

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
        graph = requirements(pins)
        # Only what can be installed whole: one that needs a distribution neither here nor in the package
        # environment is not offered (found by a first hour: with RUNNER_PACKAGES empty, seaborn was, and
        # `import seaborn` installed it, then failed on matplotlib, the package environment's).
        while unmet := [n for n in wheels if any(d not in wheels and d not in present for d in graph.get(n, ()))]:
            for name in unmet:
                del wheels[name]
        modules: dict[str, str] = {}
        provides: dict[str, frozenset[str]] = {}
        for name, path in sorted(wheels.items()):
            try:
                provides[name] = wheel_modules(path)
            except (OSError, zipfile.BadZipFile):
                # A damaged wheel: no import maps to it, and naming it in `packages` fails its hash check.
                continue
            for module in provides[name]:
                modules.setdefault(module, name)
        needs = {name: frozenset(n for n in graph.get(name, ()) if n in wheels) for name in wheels}
        return cls(wheels, {name: pins[name] for name in wheels}, modules, needs, provides, directory)

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
