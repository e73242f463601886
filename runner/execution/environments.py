"""The environments the server installs from the vetted wheelhouse on a run's behalf (issue 27, begun:
no run is handed one yet): one directory per distribution, layered on the package environment.

One per distribution rather than one per set: the sets runs ask for overlap (statsmodels and
seaborn both bring patsy's neighbours; sympy alone is mpmath and sympy), so a distribution installed
once serves every set that holds it, an install is as small as it can be, and eviction frees one
distribution at a time. A run then gets its closure's directories on its path, after the package
environment's.

A directory's name is the distribution, its version and the first 16 hex digits of its wheel's
SHA-256 (`scikit_learn-1.9.1-3f0c...`): what is in it is known by its name, so a later call, or a
later server, reuses it as it is. An install:
- checks the wheel's SHA-256 against the lock's before reading anything else of it;
- unpacks it as PEP 427 says for a target directory: every member where it says, but `*.data/purelib`
  and `*.data/platlib` moved to the top, and scripts, headers and data left out; no code of the
  package runs (wheels have no build step, and nothing is imported);
- refuses a member outside the directory, a link, more than `max_bytes` in all, or an install that
  takes longer than `max_seconds`, and then leaves nothing behind;
- writes into a temporary directory beside the cache's and renames it into place, so a half-done
  install is never found; two calls that want the same distribution at once install it once.

The cache has a size cap: past it, the distributions least recently used go first, never one a run
is using. Pip is not used: the image's server has none, and what a target-directory install of a
wheel does is the few steps above, over the standard library's zipfile.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import anyio

CHUNK = 1 << 20
TEMPORARY_PREFIX = ".installing-"


class InstallError(Exception):
    """A wheel that cannot be installed: the message names it and says why."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """One distribution a run needs: its wheel and the hashes the lock allows for it."""

    name: str  # normalized
    version: str
    wheel: Path
    hashes: frozenset[str]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _target(member: str) -> PurePosixPath | None:
    """Where a wheel member goes in a target-directory install; None for what such an install leaves out."""
    path = PurePosixPath(member)
    if path.is_absolute() or ".." in path.parts or not path.parts or "\\" in member:
        raise InstallError(f"a member outside the wheel's directory: {member[:200]!r}")
    first = path.parts[0]
    if first.endswith(".data"):
        if len(path.parts) > 2 and path.parts[1] in ("purelib", "platlib"):
            return PurePosixPath(*path.parts[2:])
        return None  # scripts, headers, data: nothing a run imports
    return path


def install_wheel(wanted: Wanted, destination: Path, max_bytes: int, max_seconds: float) -> int:
    """Unpack `wanted`'s wheel into `destination` (which must not exist); the bytes written."""
    deadline = time.monotonic() + max_seconds
    if sha256_of(wanted.wheel) not in wanted.hashes:
        raise InstallError(f"{wanted.wheel.name} does not have any of the lock's hashes for {wanted.name}")
    destination.mkdir()
    written = 0
    try:
        with zipfile.ZipFile(wanted.wheel) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                if stat.S_ISLNK(info.external_attr >> 16):
                    raise InstallError(f"{wanted.wheel.name} holds a link: {info.filename[:200]!r}")
                target = _target(info.filename)
                if target is None:
                    continue
                path = destination.joinpath(*target.parts)
                path.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as source, path.open("xb") as sink:
                    while chunk := source.read(CHUNK):
                        written += len(chunk)
                        if written > max_bytes:
                            raise InstallError(f"{wanted.wheel.name} unpacks to more than {max_bytes:,} bytes")
                        if time.monotonic() > deadline:
                            raise InstallError(f"{wanted.wheel.name} took more than {max_seconds:g} s to install")
                        sink.write(chunk)
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        shutil.rmtree(destination, ignore_errors=True)
        raise InstallError(f"{wanted.wheel.name} could not be installed: {exc}") from exc
    except BaseException:
        shutil.rmtree(destination, ignore_errors=True)
        raise
    return written


def directory_name(wanted: Wanted, digest: str) -> str:
    return f"{wanted.name.replace('-', '_')}-{wanted.version}-{digest[:16]}"


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


@dataclass
class _Installed:
    path: Path
    size: int
    used: float  # when last handed out or given back (monotonic)
    holders: int = 0


@dataclass
class Environments:
    """The installed distributions under `root`, at most `max_bytes` of them (the ones runs hold aside)."""

    root: Path
    max_bytes: int
    max_install_bytes: int = 1 << 30
    max_install_seconds: float = 120.0
    _installed: dict[str, _Installed] = field(default_factory=dict)
    _locks: dict[str, anyio.Lock] = field(default_factory=dict)
    # A wheel's SHA-256 by its path, size and mtime: read once, not on every call that wants it.
    _digests: dict[Path, tuple[int, int, str]] = field(default_factory=dict)
    installs: int = 0  # installs made by this server (a number for tests and the log)

    def __post_init__(self) -> None:
        # Private to the server's uid: a directory is trusted by its name.
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = self.root.stat()
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise InstallError(f"{self.root} must be the server's own, mode 0700, to hold installed packages")
        for stale in self.root.glob(TEMPORARY_PREFIX + "*"):  # an install a killed server left half done
            shutil.rmtree(stale, ignore_errors=True)

    async def acquire(self, wanted: Iterable[Wanted]) -> list[Path]:
        """The directories of `wanted`, installed first where they are not yet, held until `release`."""
        held: list[str] = []
        try:
            for one in wanted:
                key = await self._ensure(one)
                self._installed[key].holders += 1
                self._installed[key].used = time.monotonic()
                held.append(key)
        except BaseException:
            self._release(held)
            raise
        await anyio.to_thread.run_sync(self._evict)  # removing directories: not on the event loop
        return [self._installed[key].path for key in held]

    def release(self, paths: Iterable[Path]) -> None:
        """A run that held these directories has ended."""
        by_path = {installed.path: key for key, installed in self._installed.items()}
        self._release([by_path[path] for path in paths if path in by_path])
        self._evict()

    @property
    def size(self) -> int:
        return sum(installed.size for installed in self._installed.values())

    def _release(self, keys: list[str]) -> None:
        now = time.monotonic()
        for key in keys:
            self._installed[key].holders -= 1
            self._installed[key].used = now  # used until its run ended

    def _digest(self, wheel: Path) -> str:
        info = wheel.stat()
        known = self._digests.get(wheel)
        if known is not None and known[:2] == (info.st_size, info.st_mtime_ns):
            return known[2]
        digest = sha256_of(wheel)
        self._digests[wheel] = (info.st_size, info.st_mtime_ns, digest)
        return digest

    async def _ensure(self, wanted: Wanted) -> str:
        digest = await anyio.to_thread.run_sync(self._digest, wanted.wheel)
        if digest not in wanted.hashes:
            raise InstallError(f"{wanted.wheel.name} does not have any of the lock's hashes for {wanted.name}")
        key = directory_name(wanted, digest)
        lock = self._locks.setdefault(key, anyio.Lock())
        async with lock:  # a second call for the same distribution waits for the first's install
            if key not in self._installed:
                self._installed[key] = await anyio.to_thread.run_sync(self._found_or_installed, wanted, key)
            return key

    def _found_or_installed(self, wanted: Wanted, key: str) -> _Installed:
        path = self.root / key
        if path.is_dir():  # installed by an earlier server: its name says what it holds
            return _Installed(path, _size(path), time.monotonic())
        scratch = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX, dir=self.root))
        try:
            size = install_wheel(wanted, scratch / key, self.max_install_bytes, self.max_install_seconds)
            os.rename(scratch / key, path)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self.installs += 1
        return _Installed(path, size, time.monotonic())

    def _evict(self) -> None:
        """Past the cap, the least recently used go first; never one a run holds."""
        idle = sorted((i.used, key) for key, i in self._installed.items() if i.holders == 0)
        for _, key in idle:
            if self.size <= self.max_bytes:
                break
            shutil.rmtree(self._installed.pop(key).path, ignore_errors=True)
