"""The wheelhouse cache (RUNNER_WHEELHOUSE_CACHE): the distributions the server installs from the vetted
wheelhouse on a run's behalf, one directory per distribution, layered on the package environment.

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
- refuses a member outside the directory, a link, more than `MAX_MEMBERS` members or `max_install_bytes`
  in all, or an install that takes longer than `max_install_seconds`, and then leaves nothing behind;
- writes into a scratch directory beside the packages and renames it into place, so a half-done install
  is never found; two calls of one server that want the same distribution at once install it once;
- makes what it writes readable by all and writable by the server alone, whatever its umask: a root
  server's runs are other uids, and a sandboxed run sees the cache read-only anyway.

The cache (`root`) holds `packages/` (the installed directories, the one part runs see, read-only),
`locks/` (a lock file per directory) and `scratch/` (installs under way, directories being removed),
both mode 0700 and outside every run's view: a run that could lock what the server locks could stall
every other call's install. It has a size cap: past it, the distributions least recently used go
first, never one a run is using. Servers may share a cache (HTTP workers, replicas on one host, a
restart): a directory in use is held with a shared flock(2) on its lock file, and one is removed only
by a server that gets the exclusive lock without waiting, after renaming it out of the way; so no
server removes what another's run is importing. Two servers that install one distribution at once
both unpack it, and one's copy is kept. What a server finds at start is counted against its cap,
least recently used by its mtime, which every release touches. A cache the server cannot write (an
image's, installed at build time by `python -m runner --install-packages`) is used as it is: nothing
is installed into it, evicted from it or locked.

Pip is not used: the image's server has none, and what a target-directory install of a wheel does is
the few steps above, over the standard library's zipfile. Nor is pypa's `installer`, weighed for it:
it would take the wheel as an open ZipFile (so the hash would still be of the bytes unpacked), but it
installs into a scheme (scripts, headers, data, RECORD and INSTALLER written, entry points made) where
this wants purelib and platlib alone, and it has none of the bounds above (members, bytes, time, links),
which would be a destination class of ours around it: a runtime dependency of the server's for the
one loop `_unpack` is.
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
from typing import BinaryIO

import anyio

from runner.config import PROVIDED_DIRECTORY
from runner.processes.helpers import Helpers

CHUNK = 1 << 20
MAX_MEMBERS = 100_000
# The cache's parts besides its packages (config.PROVIDED_DIRECTORY), which no run sees.
LOCKS = "locks"
SCRATCH = "scratch"
TEMPORARY_PREFIX = "installing-"
EVICTING_PREFIX = "evicting-"
# How long a server waits for another's exclusive lock (held only while it renames a directory away).
LOCK_PATIENCE = 10.0
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
    with path.open("rb") as file:
        return _sha256(file)


def _sha256(file: BinaryIO) -> str:
    digest = hashlib.sha256()
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
    """Unpack `wanted`'s wheel into `destination` (which must not exist); the bytes written. The wheel
    is opened once: what is unpacked is what was hashed."""
    deadline = time.monotonic() + max_seconds
    try:
        wheel = wanted.wheel.open("rb")
    except OSError as exc:
        raise InstallError(f"the wheel of {wanted.name} cannot be read: {exc}") from exc
    with wheel:
        if _sha256(wheel) not in wanted.hashes:
            raise InstallError(f"{wanted.wheel.name} does not have any of the lock's hashes for {wanted.name}")
        wheel.seek(0)
        try:
            destination.mkdir()
            destination.chmod(DIRECTORY_MODE)
            return _unpack(wanted, wheel, destination, max_bytes, deadline, max_seconds)
        except (OSError, zipfile.BadZipFile, EOFError) as exc:
            shutil.rmtree(destination, ignore_errors=True)
            raise InstallError(f"{wanted.wheel.name} could not be installed: {exc}") from exc
        except BaseException:
            shutil.rmtree(destination, ignore_errors=True)
            raise


def _unpack(
    wanted: Wanted, wheel: BinaryIO, destination: Path, max_bytes: int, deadline: float, max_seconds: float
) -> int:
    written = 0
    with zipfile.ZipFile(wheel) as archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise InstallError(f"{wanted.wheel.name} has more than {MAX_MEMBERS:,} members")
        for info in members:
            if time.monotonic() > deadline:
                raise InstallError(f"{wanted.wheel.name} took more than {max_seconds:g} s to install")
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
    return written


# What compiles an installed distribution: the runs' own interpreter, for its bytecode's magic number;
# hash-checked bytecode, valid whatever the files' mtimes; readable by all as the rest is.
_COMPILE = (
    "import compileall, os, sys; os.umask(0o022); "
    "compileall.compile_dir(sys.argv[1], quiet=2, workers=0, "
    "invalidation_mode=compileall.py_compile.PycInvalidationMode.CHECKED_HASH)"
)


def compile_bytecode(python: str, directory: Path, wanted: Wanted, max_seconds: float, helpers: Helpers) -> None:
    """Compile `directory`'s modules to bytecode once, as `python` would at import: a run sees the
    directory read-only and could not write its own, and sympy compiled from source at every import
    took 2.8 s. Compiling runs no package code; a module that does not compile is left as it is
    (importing it fails the same either way). The compile is one of the server's `helpers`, which the
    stray sweep knows; one that does not end well (killed, say) fails the install, which is then not
    put in place: a half-compiled directory is never used as if whole."""
    try:
        status = helpers.run([python, "-I", "-S", "-c", _COMPILE, str(directory)], timeout=max(max_seconds, 1.0))
    except subprocess.TimeoutExpired as exc:
        raise InstallError(f"{wanted.wheel.name} took more than the install's time to compile") from exc
    except OSError as exc:
        raise InstallError(f"{wanted.wheel.name} could not be compiled by {python}: {exc}") from exc
    if status != 0:
        ended = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
        raise InstallError(f"{wanted.wheel.name} could not be compiled: the compile {ended}")


def directory_name(wanted: Wanted, digest: str) -> str:
    return f"{wanted.name.replace('-', '_')}-{wanted.version}-{digest[:16]}"


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _lock(path: Path, how: int, patience: float = 0.0) -> int | None:
    """An fd of the lock file (or directory) `path` holding flock `how`, waited for up to `patience`
    seconds; None where it is taken (or, a directory, gone)."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags | os.O_DIRECTORY) if path.is_dir() else os.open(path, flags | os.O_CREAT, 0o600)
    except OSError:
        return None
    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.01)
        except OSError:
            os.close(fd)
            raise


def _age(path: Path) -> float:
    try:
        return time.time() - path.lstat().st_mtime
    except OSError:
        return 0.0


@dataclass
class _Installed:
    path: Path
    size: int
    used: float  # when last handed out or given back (wall-clock: kept across servers as the mtime)
    holders: int = 0
    held: int | None = None  # its lock file's fd, share-locked while this server's runs hold it


@dataclass
class WheelhouseCache:
    """The installed distributions under `root`, at most `max_bytes` of them (the ones runs hold aside)."""

    root: Path
    max_bytes: int
    max_install_bytes: int = 1 << 30
    max_install_seconds: float = 120.0
    # The interpreter runs use, which compiles what is installed to bytecode ("": not compiled).
    python: str = ""
    # The server's helper processes, the compile among them (known to its stray sweep).
    helpers: Helpers = field(default_factory=Helpers)
    _installed: dict[str, _Installed] = field(default_factory=dict)
    _locks: dict[str, anyio.Lock] = field(default_factory=dict)
    _evicting: anyio.Lock = field(default_factory=anyio.Lock)
    # A wheel's SHA-256 by its path, size and mtime: read once, not on every call that wants it.
    _digests: dict[Path, tuple[int, int, str]] = field(default_factory=dict)
    installs: int = 0  # installs made by this server (a number for tests and the log)
    writable: bool = True

    def __post_init__(self) -> None:
        # A directory is trusted by its name: no one but the server (or root, for an image's) may write here.
        self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
        info = self.root.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid not in (os.getuid(), 0) or info.st_mode & 0o022:
            raise InstallError(
                f"{self.root} must be a directory of the server's own (or root's), writable by no one else, to hold "
                f"installed packages, not mode {stat.S_IMODE(info.st_mode):04o} of uid {info.st_uid}"
            )
        self.writable = os.access(self.root, os.W_OK)
        self.packages = self.root / PROVIDED_DIRECTORY
        self.max_install_bytes = min(self.max_install_bytes, self.max_bytes)
        if not self.writable:
            return
        self.packages.mkdir(exist_ok=True)
        if info.st_uid == os.getuid():
            # Readable by all (a root server's runs are other uids); locks and scratch by the server alone.
            for public in (self.root, self.packages):
                public.chmod(DIRECTORY_MODE)
        for private in (LOCKS, SCRATCH):
            (self.root / private).mkdir(mode=0o700, exist_ok=True)
            (self.root / private).chmod(0o700)

    async def scan(self) -> None:
        """Count what earlier servers installed against the cap, then evict past it; and remove what
        they left half done (an install or an eviction a killed server did not finish: old, and locked
        by no one)."""
        found = await anyio.to_thread.run_sync(self._found)
        for key, installed in found.items():
            self._installed.setdefault(key, installed)
        await self._evict()

    def _found(self) -> dict[str, _Installed]:
        if self.writable:
            stale_after = 2 * self.max_install_seconds + 60
            for entry in sorted((self.root / SCRATCH).iterdir()):
                if _age(entry) > stale_after:
                    fd = _lock(entry, fcntl.LOCK_EX)
                    if fd is not None:
                        shutil.rmtree(entry, ignore_errors=True)
                        os.close(fd)
        found = {}
        try:
            entries = sorted(self.packages.iterdir())
        except OSError:  # none yet, or not ours to list: nothing to count
            entries = []
        for entry in entries:
            if _INSTALLED.match(entry.name) and entry.is_dir():
                with contextlib.suppress(OSError):
                    found[entry.name] = _Installed(entry, _size(entry), entry.stat().st_mtime)
        return found

    async def acquire(self, wanted: Iterable[Wanted]) -> list[Path]:
        """The directories of `wanted`, installed first where they are not yet, held until `release`."""
        held: list[str] = []
        try:
            for one in wanted:
                held.append(await self._ensure(one))
            # Within the try: a cancel that lands in its lock's wait (after a shielded install, say) left
            # what this held held for the server's life, never evicted (found by a review).
            await self._evict()
        except BaseException:
            self._release(held)
            raise
        return [self._installed[key].path for key in held]

    async def missing(self, wanted: Iterable[Wanted]) -> list[str]:
        """The names of `wanted` not installed yet (as far as their lock's hashes tell)."""

        def there(one: Wanted) -> bool:
            return any((self.packages / directory_name(one, digest)).is_dir() for digest in one.hashes)

        wanted = [one for one in wanted if not any(directory_name(one, d) in self._installed for d in one.hashes)]
        if not wanted:  # all known to this server: no thread
            return []
        found = await anyio.to_thread.run_sync(lambda: [there(one) for one in wanted])
        return [one.name for one, installed in zip(wanted, found, strict=True) if not installed]

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
                    os.utime(installed.path, (now, now))  # the order of use, for a later server
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
                # Shielded: a thread cannot be stopped, and what it holds must be recorded to be let go.
                with anyio.CancelScope(shield=True):
                    self._installed[key] = await anyio.to_thread.run_sync(self._held, wanted, key)
            installed = self._installed[key]
            installed.holders += 1
            installed.used = time.time()
            return key

    def _held(self, wanted: Wanted, key: str) -> _Installed:
        """`key`'s directory share-locked (where the cache is writable: a read-only one is never
        evicted), installed first if it is not there. Blocking: for a thread."""
        path = self.packages / key
        fd = None
        if self.writable:
            fd = _lock(self.root / LOCKS / key, fcntl.LOCK_SH, LOCK_PATIENCE)
            if fd is None:
                raise InstallError(
                    f"{wanted.name} is being removed by another server, for more than {LOCK_PATIENCE:g} s"
                )
        try:
            if not path.is_dir():
                self._install(wanted, key)
            known = self._installed.get(key)
            size = known.size if known is not None else _size(path)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        return _Installed(path, size, time.time(), held=fd)

    def _install(self, wanted: Wanted, key: str) -> None:
        if not self.writable:
            raise InstallError(f"{wanted.name} is not installed in {self.root}, which the server cannot write")
        try:
            scratch = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX, dir=self.root / SCRATCH))
        except OSError as exc:
            raise InstallError(f"{wanted.name} could not be installed: {exc}") from exc
        fd = _lock(scratch, fcntl.LOCK_EX)  # while it is young no other server's scan removes it anyway
        try:
            started = time.monotonic()
            install_wheel(wanted, scratch / key, self.max_install_bytes, self.max_install_seconds)
            if self.python:
                left = self.max_install_seconds - (time.monotonic() - started)
                compile_bytecode(self.python, scratch / key, wanted, left, self.helpers)
            try:
                os.rename(scratch / key, self.packages / key)
            except OSError as exc:  # another server put the same there first: the same files
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise InstallError(f"{wanted.name} could not be put in place: {exc}") from exc
        finally:
            if fd is not None:
                os.close(fd)
            shutil.rmtree(scratch, ignore_errors=True)
        self.installs += 1

    async def _evict(self) -> None:
        """Past the cap, the least recently used go first; never one a run holds, here or elsewhere.
        The choice and the bookkeeping are made here, one eviction at a time; a thread only removes."""
        if not self.writable:
            return
        async with self._evicting:
            victims, size = [], self.size
            for _, key in sorted((i.used, key) for key, i in self._installed.items() if i.holders == 0):
                if size <= self.max_bytes:
                    break
                victim = self._installed.pop(key)
                victims.append((key, victim))
                size -= victim.size
            if not victims:
                return
            with anyio.CancelScope(shield=True):
                gone = await anyio.to_thread.run_sync(self._remove_all, [key for key, _ in victims])
            for (key, victim), removed in zip(victims, gone, strict=True):
                if not removed:  # held by another server's run: counted still, and tried again later
                    self._installed.setdefault(key, victim)

    def _remove_all(self, keys: list[str]) -> list[bool]:
        return [self._remove(key) for key in keys]

    def _remove(self, key: str) -> bool:
        """Remove `key`'s directory unless some server holds it; whether it is gone. Blocking."""
        path = self.packages / key
        fd = _lock(self.root / LOCKS / key, fcntl.LOCK_EX)
        if fd is None:
            return not path.exists()
        try:
            aside = Path(tempfile.mkdtemp(prefix=EVICTING_PREFIX, dir=self.root / SCRATCH))
        except OSError:
            os.close(fd)
            return False
        try:
            os.rename(path, aside / key)
            gone = True
        except FileNotFoundError:
            gone = True
        except OSError:
            gone = False
        finally:
            os.close(fd)
        shutil.rmtree(aside, ignore_errors=True)
        return gone
