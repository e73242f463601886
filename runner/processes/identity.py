"""Which host uids a root server's sandboxed runs are given: a block of RUNNER_SANDBOX_UIDS of the
pool's own, one uid per run at a time.

A run of a root server would otherwise be uid 0 on the host, where RLIMIT_NPROC does not hold and
per-uid kernel state (the process count, inotify and keyring quotas) is shared with the server and
every other run. With a uid of its own, RUNNER_MAX_PROCESSES bounds its whole tree, as isolate's
per-box uids do. The zygote (namespaced) or the spawning source (bwrap) lends each run one uid of the
block, and takes it back only once every process of that run is gone.

Servers on one host may share the range: each pool takes the first block no other pool holds, under
an exclusive lock (flock, released by the kernel if the server dies), so no two pools lend one uid.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass

from runner.config import Config
from runner.errors import Unavailable
from runner.processes.isolation import IsolationPlan

# Where pools' locks go, for every server of the host to see; the work directory where it is not writable.
LOCK_DIR = "/run/lock"
LOCK_PREFIX = ".python-runner-uids-"


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
    directory = LOCK_DIR if os.access(LOCK_DIR, os.W_OK | os.X_OK) else config.work_dir
    for first in range(uids.start, uids.stop - needed + 1, needed):
        lock = _lock(os.path.join(directory, f"{LOCK_PREFIX}{first}.lock"))
        if lock is None:
            continue
        path, fd = lock
        try:
            yield RunUids(first, needed)
        finally:
            # Unlinked while still held: a pool that opened the file since finds it gone and retries.
            with contextlib.suppress(OSError):
                os.unlink(path)
            os.close(fd)
        return
    raise Unavailable("RUNNER_SANDBOX_UIDS", f"every block of {needed} uids in {config.sandbox_uids} is taken")


def _lock(path: str) -> tuple[str, int] | None:
    """The held lock at `path` (the path, its fd), or None if another pool holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return None
            raise
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return path, fd
        os.close(fd)  # unlinked by the pool that held it, between our open and our lock: again


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
