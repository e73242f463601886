"""What a dead server left in RUNNER_WORK_DIR, removed at the next start: its directories, and the plain
runs' processes that still name them.

A server killed with SIGKILL cleans up nothing: its `python-runner-*` directories stay, and in plain
mode its runs' processes and whatever they started live on (a sandboxed run's die with its namespaces).
So each such directory is made held (`HeldDirectory`): named so, and locked with flock(2) by the server
for as long as it lives, the kernel dropping the lock with its last fd (close-on-exec, never passed to
a run). A held directory whose lock can be taken is a dead server's: `remove_dead` kills the processes
whose HOME or TMPDIR lie in it (every plain run's, the zygote's, and what they started without
changing them) and removes it. A directory not named held (an older server's) and one whose lock is
held are left alone, as is every process of another uid.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import tempfile
import time
from collections.abc import Iterator

from runner.config.disk import HELD_VARIABLE
from runner.processes.trees import remove_tree

LEFTOVER_PREFIX = "python-runner-"
# In a held directory's name (`{prefix}held-{random}`; mkdtemp's random part has no "-", so no name of
# an older server has it): locked while its server lives, with no lock it is a dead server's.
HELD = "held-"
MAKE_TRIES = 10
# The variables a run (`spawn.minimal_environment`, the zygote) and what it starts carry its directory in,
# and a tool server and what it starts the server's.
MARKING_VARIABLES = (b"HOME=", b"TMPDIR=", HELD_VARIABLE.encode() + b"=")
# A process forking as it is killed has a child the next look finds: rounds, each after the kills land.
ROUNDS = 20
ROUND_WAIT = 0.02


class HeldDirectory:
    """A new directory (mkdtemp's, mode 0700) under `parent`, named `{prefix}held-{random}`, locked until
    `release`. Another start may lock it before we do (it found it unlocked): then it removes it, and
    a new one is made, so we never hold one that is being removed."""

    def __init__(self, prefix: str, parent: str) -> None:
        for _ in range(MAKE_TRIES):
            path = tempfile.mkdtemp(prefix=prefix + HELD, dir=parent)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue  # taken and removed already by another start
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another start took it: it removes it
                os.close(fd)
                continue
            except OSError:
                # A file system that cannot lock a directory (NFS without local_lock=flock): used unheld,
                # which no start can take for a dead server's either (found by a review: the start
                # failed, "other starts keep taking it", leaving ten directories each time).
                os.close(fd)
                self.path, self._fd = path, -1
                return
            if os.fstat(fd).st_nlink:  # not removed by whoever had it between mkdtemp and flock
                self.path, self._fd = path, fd
                return
            os.close(fd)
        raise OSError(errno.EAGAIN, f"cannot hold a directory of our own in {parent}: other starts keep taking it")

    @property
    def fd(self) -> int:
        """The locked fd (close-on-exec), -1 where the file system cannot lock: a copy of it handed to
        another process (a worker) holds the lock too, for as long as either keeps it open."""
        return self._fd

    def release(self) -> None:
        """Drop the lock (the directory is its owner's to remove first); safe to call more than once."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@contextlib.contextmanager
def held_directory(prefix: str, parent: str) -> Iterator[str]:
    """A `HeldDirectory`'s path while in it, the directory removed (empty) and released on the way out."""
    held = HeldDirectory(prefix, parent)
    try:
        yield held.path
    finally:
        try:
            os.rmdir(held.path)  # first: a released one is a dead server's to whoever starts next
        finally:
            held.release()


def remove_dead(work_dir: str) -> tuple[list[str], int]:
    """Remove every held directory in `work_dir` whose server is gone, after killing the processes that
    name it: (the directories removed, the processes killed). Blocking: call it from a thread."""
    dead: dict[str, int] = {}
    try:
        names = os.listdir(work_dir)
    except OSError:
        return [], 0
    for name in names:
        path = os.path.join(work_dir, name)
        if name.startswith(LEFTOVER_PREFIX) and f"-{HELD}" in name and (fd := _dead_lock(path)) is not None:
            dead[path] = fd
    if not dead:
        return [], 0
    try:
        killed = kill_marked(tuple(dead))
        for path in dead:
            remove_tree(path)
    finally:
        for fd in dead.values():
            os.close(fd)
    return sorted(dead), killed


def _dead_lock(path: str) -> int | None:
    """The directory's fd, locked by us, if it is ours (our uid) and its holder is gone; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: its server lives
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def kill_marked(directories: tuple[str, ...]) -> int:
    """SIGKILL every process of our uid whose HOME or TMPDIR is one of `directories` or under it, until
    none is left (or `ROUNDS` looks); how many were killed. Each is pinned by a pidfd before it is read,
    so a pid reused in between is never signalled for what another process's environment said."""
    wanted = tuple(os.fsencode(directory) for directory in directories)
    killed: set[int] = set()
    for _ in range(ROUNDS):
        found = [pid for pid in _pids() if _kill_if_marked(pid, wanted)]
        killed.update(found)
        if not found:
            break
        time.sleep(ROUND_WAIT)  # a process killed exits a moment later; until then it is found again
    return len(killed)


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and int(entry) != os.getpid()]


def _kill_if_marked(pid: int, wanted: tuple[bytes, ...]) -> bool:
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False  # gone, or not ours to open
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.geteuid():
            return False
        with open(f"/proc/{pid}/environ", "rb") as environ:  # empty once it has exited
            entries = environ.read().split(b"\0")
        if not any(marks(entry, wanted) for entry in entries):
            return False
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(pidfd)


def marks(entry: bytes, wanted: tuple[bytes, ...]) -> bool:
    """Whether one environment entry puts HOME or TMPDIR in one of the `wanted` directories."""
    for variable in MARKING_VARIABLES:
        if entry.startswith(variable):
            value = entry[len(variable) :]
            return any(value == directory or value.startswith(directory + b"/") for directory in wanted)
    return False
