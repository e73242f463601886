"""The environments the server installs from the vetted wheelhouse on a run's behalf: one directory
per distribution, layered on the package environment.

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
- refuses a member outside the directory, a link, more than `max_install_bytes` in all, or an install
  that takes longer than `max_install_seconds`, and then leaves nothing behind;
- writes into a temporary directory beside the cache's and renames it into place, so a half-done
  install is never found; two calls that want the same distribution at once install it once;
- makes what it writes readable by all and writable by the server alone, whatever its umask: a root
  server's runs are other uids, and a sandboxed run sees the cache read-only anyway.

The cache has a size cap: past it, the distributions least recently used go first, never one a run
is using. Servers may share a cache (HTTP workers, replicas on one host, a restart): a directory in
use is held with a shared flock(2) on it, and one is removed only by a server that gets the exclusive
lock without waiting, after renaming it out of the way; so no server removes what another's run is
importing. What a server finds at start is counted against its cap, least recently used by its
mtime, which every release touches. A cache the server cannot write (an image's, installed at build
time by `python -m runner --install-packages`) is used as it is: nothing is installed into it or
evicted from it.

Pip is not used: the image's server has none, and what a target-directory install of a wheel does is
the few steps above, over the standard library's zipfile.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import anyio

CHUNK = 1 << 20
TEMPORARY_PREFIX = ".installing-"
EVICTING_PREFIX = ".evicting-"
# What an installed distribution's directory is called (`directory_name`).
_INSTALLED = re.compile(r"^[A-Za-z0-9_.]+-[^-/]+-[0-9a-f]{16}$")
DIRECTORY_MODE = 0o755
FILE_MODE = 0o644


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


def _make_directories(destination: Path, relative: PurePosixPath) -> Path:
    """`destination`/`relative`'s parent, made with DIRECTORY_MODE whatever the umask; returns it."""
    directory = destination
    for part in relative.parts[:-1]:
        directory = directory / part
        if not directory.is_dir():
            directory.mkdir()
            directory.chmod(DIRECTORY_MODE)
    return directory


def install_wheel(wanted: Wanted, destination: Path, max_bytes: int, max_seconds: float) -> int:
    """Unpack `wanted`'s wheel into `destination` (which must not exist); the bytes written."""
    deadline = time.monotonic() + max_seconds
    if sha256_of(wanted.wheel) not in wanted.hashes:
        raise InstallError(f"{wanted.wheel.name} does not have any of the lock's hashes for {wanted.name}")
    destination.mkdir()
    destination.chmod(DIRECTORY_MODE)
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
                path = _make_directories(destination, target) / target.name
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
                os.fchmod(fd, FILE_MODE)
                with archive.open(info) as source, open(fd, "wb") as sink:
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


# What compiles an installed distribution: the runs' own interpreter, for its bytecode's magic number;
# hash-checked bytecode, valid whatever the files' mtimes; readable by all as the rest is.
_COMPILE = (
    "import compileall, os, sys; os.umask(0o022); "
    "compileall.compile_dir(sys.argv[1], quiet=2, workers=0, "
    "invalidation_mode=compileall.py_compile.PycInvalidationMode.CHECKED_HASH)"
)


def compile_bytecode(python: str, directory: Path, wanted: Wanted, max_seconds: float) -> None:
    """Compile `directory`'s modules to bytecode once, as `python` would at import: a run sees the
    directory read-only and could not write its own, and sympy compiled from source at every import
    took 2.8 s. Compiling runs no package code; a module that does not compile is left as it is
    (importing it fails the same either way)."""
    try:
        subprocess.run(
            [python, "-I", "-S", "-c", _COMPILE, str(directory)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=max(max_seconds, 1.0),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise InstallError(f"{wanted.wheel.name} took more than the install's time to compile") from exc
    except OSError as exc:
        raise InstallError(f"{wanted.wheel.name} could not be compiled by {python}: {exc}") from exc


def directory_name(wanted: Wanted, digest: str) -> str:
    return f"{wanted.name.replace('-', '_')}-{wanted.version}-{digest[:16]}"


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _locked(path: Path, how: int) -> int | None:
    """An fd of the directory `path` holding flock `how`; None where it is gone or the lock is taken."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, how)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def _remove_locked(root: Path, path: Path) -> bool:
    """Remove the directory `path` unless some server holds it; whether it went."""
    fd = _locked(path, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if fd is None:
        return False
    try:
        if not _same(fd, path):
            return False
        aside = Path(tempfile.mkdtemp(prefix=EVICTING_PREFIX, dir=root))
        os.rename(path, aside / path.name)
    except OSError:
        return False
    finally:
        os.close(fd)
    shutil.rmtree(aside, ignore_errors=True)
    return True


def _same(fd: int, path: Path) -> bool:
    """Whether `path` is still the directory `fd` was opened on (another server may have moved it)."""
    try:
        held, there = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


@dataclass
class _Installed:
    path: Path
    size: int
    used: float  # when last handed out or given back (wall-clock: kept across servers as the mtime)
    holders: int = 0
    held: int | None = None  # the directory's fd, share-locked while this server's runs hold it


@dataclass
class Environments:
    """The installed distributions under `root`, at most `max_bytes` of them (the ones runs hold aside)."""

    root: Path
    max_bytes: int
    max_install_bytes: int = 1 << 30
    max_install_seconds: float = 120.0
    # The interpreter runs use, which compiles what is installed to bytecode ("": not compiled).
    python: str = ""
    _installed: dict[str, _Installed] = field(default_factory=dict)
    _locks: dict[str, anyio.Lock] = field(default_factory=dict)
    # A wheel's SHA-256 by its path, size and mtime: read once, not on every call that wants it.
    _digests: dict[Path, tuple[int, int, str]] = field(default_factory=dict)
    installs: int = 0  # installs made by this server (a number for tests and the log)
    writable: bool = True

    def __post_init__(self) -> None:
        # A directory is trusted by its name: no one but the server (or root, for an image's) may write here.
        self.root.mkdir(mode=0o711, parents=True, exist_ok=True)
        info = self.root.stat()
        if info.st_uid not in (os.getuid(), 0) or info.st_mode & 0o022:
            raise InstallError(
                f"{self.root} must be the server's own (or root's) and writable by no one else to hold installed "
                f"packages, not mode {stat.S_IMODE(info.st_mode):04o} of uid {info.st_uid}"
            )
        self.writable = os.access(self.root, os.W_OK)
        if self.writable and info.st_uid == os.getuid() and info.st_mode & 0o711 != 0o711:
            self.root.chmod(stat.S_IMODE(info.st_mode) | 0o711)  # searchable: a root server's runs are other uids
        self.max_install_bytes = min(self.max_install_bytes, self.max_bytes)

    def scan(self) -> None:
        """Count what earlier servers installed against the cap, and remove what they left half done
        (an install or an eviction a killed server did not finish; never one a live server is doing).
        Blocking: for a thread."""
        for entry in sorted(self.root.iterdir()):
            name = entry.name
            if name.startswith((TEMPORARY_PREFIX, EVICTING_PREFIX)):
                if self.writable:
                    _remove_locked(self.root, entry)
            elif _INSTALLED.match(name) and entry.is_dir() and name not in self._installed:
                with contextlib.suppress(OSError):
                    self._installed[name] = _Installed(entry, _size(entry), entry.stat().st_mtime)
        self._evict()

    async def acquire(self, wanted: Iterable[Wanted]) -> list[Path]:
        """The directories of `wanted`, installed first where they are not yet, held until `release`."""
        held: list[str] = []
        try:
            for one in wanted:
                held.append(await self._ensure(one))
        except BaseException:
            self._release(held)
            raise
        await anyio.to_thread.run_sync(self._evict)  # removing directories: not on the event loop
        return [self._installed[key].path for key in held]

    def release(self, paths: Iterable[Path]) -> None:
        """A run that held these directories has ended. What is over the cap then goes at the next
        `acquire` (or `scan`), in a thread: removing directories is not for the event loop."""
        by_path = {installed.path: key for key, installed in self._installed.items()}
        self._release([by_path[path] for path in paths if path in by_path])

    @property
    def size(self) -> int:
        return sum(installed.size for installed in self._installed.values())

    def close(self) -> None:
        """Let go of every lock this server holds (its runs have ended)."""
        for installed in self._installed.values():
            if installed.held is not None:
                os.close(installed.held)
                installed.held = None

    def _release(self, keys: list[str]) -> None:
        now = time.time()
        for key in keys:
            installed = self._installed[key]
            installed.holders -= 1
            installed.used = now  # used until its run ended
            if installed.holders == 0 and installed.held is not None:
                with contextlib.suppress(OSError):
                    if self.writable:
                        os.utime(installed.held, (now, now))  # the order of use, for a later server
                os.close(installed.held)
                installed.held = None

    def _digest(self, wheel: Path) -> str:
        info = wheel.stat()
        known = self._digests.get(wheel)
        if known is not None and known[:2] == (info.st_size, info.st_mtime_ns):
            return known[2]
        digest = sha256_of(wheel)
        self._digests[wheel] = (info.st_size, info.st_mtime_ns, digest)
        return digest

    async def _ensure(self, wanted: Wanted) -> str:
        """Install `wanted` where it is not, and hold it: its key."""
        try:
            digest = await anyio.to_thread.run_sync(self._digest, wanted.wheel)
        except OSError as exc:
            raise InstallError(f"the wheel of {wanted.name} cannot be read: {exc}") from exc
        if digest not in wanted.hashes:
            raise InstallError(f"{wanted.wheel.name} does not have any of the lock's hashes for {wanted.name}")
        key = directory_name(wanted, digest)
        lock = self._locks.setdefault(key, anyio.Lock())
        async with lock:  # a second call for the same distribution waits for the first's install
            installed = self._installed.get(key)
            if installed is None or installed.holders == 0:
                self._installed[key] = await anyio.to_thread.run_sync(self._held, wanted, key)
            installed = self._installed[key]
            installed.holders += 1
            installed.used = time.time()
            return key

    def _held(self, wanted: Wanted, key: str) -> _Installed:
        """`key`'s directory share-locked, installed first if it is not there (or another server just
        removed it). Blocking: for a thread."""
        path = self.root / key
        for _ in range(3):
            fd = _locked(path, fcntl.LOCK_SH)
            if fd is not None and _same(fd, path):
                known = self._installed.get(key)
                size = known.size if known is not None else _size(path)
                return _Installed(path, size, time.time(), held=fd)
            if fd is not None:
                os.close(fd)
            self._install(wanted, key)
        raise InstallError(f"{key} was removed each time it was installed")

    def _install(self, wanted: Wanted, key: str) -> None:
        path = self.root / key
        if not self.writable:
            raise InstallError(f"{wanted.name} is not installed in {self.root}, which the server cannot write")
        scratch = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX, dir=self.root))
        fd = _locked(scratch, fcntl.LOCK_EX)  # a server starting meanwhile leaves it alone
        try:
            started = time.monotonic()
            install_wheel(wanted, scratch / key, self.max_install_bytes, self.max_install_seconds)
            if self.python:
                left = self.max_install_seconds - (time.monotonic() - started)
                compile_bytecode(self.python, scratch / key, wanted, left)
            try:
                os.rename(scratch / key, path)
            except OSError as exc:  # another server put the same there first: the same files
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise InstallError(f"{wanted.name} could not be put in place: {exc}") from exc
        finally:
            if fd is not None:
                os.close(fd)
            shutil.rmtree(scratch, ignore_errors=True)
        self.installs += 1

    def _evict(self) -> None:
        """Past the cap, the least recently used go first; never one a run holds, here or elsewhere."""
        if not self.writable:
            return
        idle = sorted((i.used, key) for key, i in self._installed.items() if i.holders == 0)
        for _, key in idle:
            if self.size <= self.max_bytes:
                break
            if _remove_locked(self.root, self._installed[key].path) or not self._installed[key].path.exists():
                del self._installed[key]
