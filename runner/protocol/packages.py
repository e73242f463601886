"""The `packages` argument, checked: each entry one distribution of the server's wheelhouse, by name
alone. Pure: what the schema cannot say.

A name any spelling of which PEP 503 makes one of the wheelhouse's (`scikit_learn`, `PyYAML`) is
taken; one of the package environment's (numpy, always importable) is taken and needs nothing. A
version specifier, extras, a marker, a URL or a path, or anything like a pip option is refused
with an `ArgumentError` that names the entry, says which kind of thing it is, and lists what the
wheelhouse has; and nothing runs. The server installs only the wheelhouse's own pins, only from
it: nothing a call says reaches an installer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from runner.config import PackagesConfig
from runner.config.locks import normalized
from runner.errors import ArgumentError
from runner.logs import SHOWN_CHARS, cut

MAX_PACKAGES = 64
MAX_NAME_CHARS = 200
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


def offered(packages: PackagesConfig) -> str:
    """What the wheelhouse has, as a refusal lists it."""
    if not packages.wheelhouse_distributions:
        return "this server has no wheelhouse (RUNNER_WHEELHOUSE): no package can be named"
    return "the wheelhouse has " + ", ".join(map(str, packages.wheelhouse_distributions))


def _kind(entry: str) -> str:
    """What an entry that is not a bare name is, for the refusal; "" for a bare name."""
    text = entry.strip()
    if not text:
        return "empty"
    if text.startswith("-"):
        return "a pip option, which the server never passes on"
    if "://" in text or text.startswith(("/", ".", "~")) or "/" in text or "\\" in text:
        return "a URL or a path: packages come from the wheelhouse only"
    if text.lower().endswith((".whl", ".tar.gz", ".zip", ".tgz")):
        return "a file name: packages come from the wheelhouse only"
    if ";" in text:
        return "an environment marker"
    if "[" in text or "]" in text:
        return "a name with extras"
    if any(mark in text for mark in "<>=!~@() ,*"):
        return "a version specifier: the wheelhouse has one version of each"
    if not _NAME.match(text):
        return "not a distribution name"
    return ""


def check_packages(entries: Sequence[str], packages: PackagesConfig) -> tuple[str, ...]:
    """The wheelhouse's distributions (normalized, sorted) a call's `packages` names; `ArgumentError`
    naming the first entry that is not one of them (or of the package environment's)."""
    if not entries:
        return ()  # most calls name none: no set of names built for them
    wheelhouse = {distribution.name for distribution in packages.wheelhouse_distributions}
    base = {normalized(distribution.name) for distribution in packages.package_distributions}
    found: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"invalid argument 'packages[{index}]' ({cut(entry, SHOWN_CHARS)!r})"
        kind = _kind(entry)
        if kind:
            raise ArgumentError(f"{where}: {kind}; name a distribution alone; {offered(packages)}")
        name = normalized(entry.strip())
        if name in wheelhouse:
            found.add(name)
        elif name not in base:
            raise ArgumentError(f"{where}: not in the wheelhouse; {offered(packages)}")
    return tuple(sorted(found))
