"""Which host uids a root server's sandboxed runs are given: a block of RUNNER_SANDBOX_UIDS of the
pool's own, one uid per run at a time.

A run of a root server would otherwise be uid 0 on the host, where RLIMIT_NPROC does not hold and
per-uid kernel state (the process count, inotify and keyring quotas) is shared with the server and
every other run. With a uid of its own, RUNNER_MAX_PROCESSES bounds its whole tree, as isolate's
per-box uids do. The zygote (namespaced) or the spawning source (bwrap) lends each run one uid of the
block, and takes it back only once every process of that run is gone.

Servers on one host may share the range: each pool takes the first uids that no other pool holds, as
many as it needs, by a lock on those uids' bytes of one file all servers use (an open file
description's write lock, `F_OFD_SETLK`, released by the kernel if the server dies), so no two pools
lend one uid whatever each one's block size (found by a first hour: one lock file per block, at
multiples of each server's own size, let a server of 2 uids a block take 60002-60003 beside one that
held 60000-60055, and both lent 60002).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from runner.config import Config
from runner.errors import Unavailable
from runner.processes.isolation import IsolationPlan

# Where the pools' lock file is, for every server of the host to see: a directory of root's alone (not
# /run/lock, which every user may write: found by a review, a symlink planted there ended the start in a
# traceback, and a file made there first could hold every uid); the work directory where /run is not
# writable. One file, never removed: its bytes at the uids' offsets are locked, it holds none.
LOCK_DIR = "/run/python-runner-mcp"
LOCK_NAME = "uids.lock"
# Where servers before this lock held their blocks, one file each (`.python-runner-uids-FIRST.lock`): one
# still running lends uids this lock does not show.
OLD_LOCK_DIR = "/run/lock"
OLD_LOCK_PREFIX = ".python-runner-uids-"
# `struct flock` of 64-bit Linux: l_type, l_whence, l_start, l_len, l_pid (0 for an OFD lock), padded.
_FLOCK = struct.Struct("hhqqi4x")


@dataclass(frozen=True, slots=True)
class RunUids:
    """A block of host uids, `first` to `first + count - 1`."""

    first: int
    count: int

    def __str__(self) -> str:
        return f"{self.first}-{self.first + self.count - 1}"

    def uids(self) -> range:
        return range(self.first, self.first + self.count)

    def split(self, parts: int) -> list[RunUids]:
        """The block in `parts` equal blocks, one per source (zygote) that lends uids on its own."""
        size = self.count // parts
        return [RunUids(self.first + i * size, size) for i in range(parts)]

    def token(self) -> str:
        """How the zygote is told its block (`namespaces.Isolation`)."""
        return f"uids={self}"


@contextlib.contextmanager
def claimed_uids(config: Config, plan: IsolationPlan) -> Iterator[RunUids | None]:
    """The block of uids this pool lends its runs while it is open, or None where runs keep the
    server's uid (`IsolationPlan.uid_per_run`); `Unavailable` if other pools hold every block. The
    range and the block's size were checked when the configuration was opened (`runner.config.disk`)."""
    if not plan.uid_per_run:
        yield None
        return
    needed = config.uids_per_pool
    uids = config.run_uid_range
    _refuse_beside_old_servers(uids)
    fd = _lock_file(LOCK_DIR if os.access(os.path.dirname(LOCK_DIR), os.W_OK | os.X_OK) else config.work_dir)
    try:
        try:
            first = _first_free(fd, uids, needed)
        except OSError as exc:  # no open file description locks (a kernel before 3.15), say
            raise Unavailable("RUNNER_SANDBOX_UIDS", f"cannot lock its uids: {exc.strerror}") from None
        if first is None:
            raise Unavailable("RUNNER_SANDBOX_UIDS", f"every block of {needed} uids in {config.sandbox_uids} is taken")
        yield RunUids(first, needed)
    finally:
        os.close(fd)  # the lock goes with the file's last descriptor


def _lock_file(directory: str) -> int:
    """The lock file in `directory` (made, as the directory, where missing), open; `Unavailable` where the
    directory is not this user's alone or the file cannot be had."""
    path = os.path.join(directory, LOCK_NAME)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            held = os.fstat(dir_fd)
            if held.st_uid != os.geteuid() or held.st_mode & 0o022:
                raise Unavailable("RUNNER_SANDBOX_UIDS", f"{directory} is not this server's user's alone")
            return os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise Unavailable("RUNNER_SANDBOX_UIDS", f"cannot open {path}: {exc.strerror}") from None


def _refuse_beside_old_servers(uids: range) -> None:
    """`Unavailable` while a server of before this lock (one lock file per block) holds a block that may
    overlap `uids`: its block's size is not known, only where it starts (found by a review: old and new
    servers side by side lent the same uids)."""
    try:
        with os.scandir(OLD_LOCK_DIR) as found:
            entries = [entry for entry in found if entry.name.startswith(OLD_LOCK_PREFIX)]
    except OSError:
        return
    for entry in entries:
        first = entry.name.removeprefix(OLD_LOCK_PREFIX).removesuffix(".lock")
        if not first.isdigit() or int(first) >= uids.stop:
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            # Only root's own (no other user can make one for it) and held (a stale one is let be).
            if os.fstat(fd).st_uid != os.geteuid():
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                raise Unavailable(
                    "RUNNER_SANDBOX_UIDS",
                    f"an older python-runner-mcp lends uids from {first} ({entry.path}): stop it, or give "
                    "this server a range apart from its",
                ) from None
        finally:
            os.close(fd)


def _first_free(fd: int, uids: range, needed: int) -> int | None:
    """The first of `needed` uids in `uids` that no pool holds, now locked on `fd`; None if there are none."""
    first = uids.start
    while first + needed <= uids.stop:
        wanted = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, first, needed, 0)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, wanted)
            return first
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        kind, _, start, length, _ = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_OFD_GETLK, wanted))
        if kind != fcntl.F_UNLCK:  # past the pool that holds some of them (else: let go since; again)
            first = start + length if length else uids.stop
    return None


class UidLender:
    """A spawning source's uids: one lent to each interpreter, taken back once it is reaped."""

    __slots__ = ("_free",)

    def __init__(self, block: RunUids) -> None:
        self._free = list(reversed(block.uids()))

    def lend(self) -> int:
        """A uid no live process of this pool's has; OSError if all are lent."""
        if not self._free:
            raise OSError(errno.EAGAIN, "every uid of this pool's block is lent (RUNNER_SANDBOX_UIDS)")
        return self._free.pop()

    def give_back(self, uid: int) -> None:
        self._free.append(uid)
