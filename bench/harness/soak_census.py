"""What the soak (bench/soak.py) counts of a server at one moment, beyond its own fds and memory: the
kept PID namespaces of each zygote (whose number may grow up to a bound, `kept_bound`), the zygotes'
fds and mounts (their shared view), and the mounts of the host's mount namespace (a leaked mount of a
sandbox would be there).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

# A server's parent cgroups' names begin so (runner/inrun/cgroups.py's PARENT_PREFIX; the soak does not
# import the server's code).
PARENT_PREFIX = "python-runner-"

# A zygote's children whose NSpid has this many entries and ends in 1 are kept PID namespaces' inits
# (host, the namespace runs' are made in, their own: runner/inrun/pidspaces.py).
INIT_DEPTH = 3


def parents() -> dict[int, int]:
    """pid -> parent pid of every live process (zombies left out)."""
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] not in (b"Z", b"X"):
                found[int(entry)] = int(fields[1])
    return found


def zygotes(server: int, parent_of: dict[int, int]) -> list[int]:
    """The server's fork servers: its children running runner/inrun/zygote.py."""
    found = []
    for pid, parent in parent_of.items():
        if parent == server:
            try:
                if b"zygote.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue
    return sorted(found)


def is_kept_init(pid: int) -> bool:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                nspid = line.split()[1:]
                return len(nspid) == INIT_DEPTH and nspid[-1] == "1"
    except OSError:
        pass
    return False


def count_lines(path: str) -> int | None:
    try:
        with open(path, "rb") as lines:
            return sum(1 for _ in lines)
    except OSError:
        return None


def fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def kept_fds(pid: int) -> int:
    """How many of zygote `pid`'s fds it holds for its kept namespaces beyond the three of each
    (`pidspaces.Space`): their network namespaces, and their cgroups' (`cgroups.RunCgroup`: in each
    hierarchy the cgroup's directory, its ``tasks`` file and a dup of its parent's fd; v1's OOM eventfd)."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    targets = []
    for name in names:
        with contextlib.suppress(OSError):
            targets.append(os.readlink(f"/proc/{pid}/fd/{name}"))
    mark = f"/run-{pid}-"
    parents = [target for target in targets if os.path.basename(target).startswith(PARENT_PREFIX)]
    return (
        sum(target.startswith("net:[") or target == "anon_inode:[eventfd]" or mark in target for target in targets)
        + len(parents)
        - len(set(parents))  # the zygote's own fd of each parent is not a kept cgroup's
    )


def kept_cgroups(paths: list[str], zygotes: list[int]) -> set[str]:
    """The names of the run cgroups among `paths` that `zygotes` keep with their kept namespaces."""
    marks = tuple(f"run-{zygote}-" for zygote in zygotes)
    return {os.path.basename(path) for path in paths if os.path.basename(path).startswith(marks)}


# What a zygote holds for one kept namespace beyond its three fds, at most: its network namespace, and
# its cgroup's directory, tasks file and parent's dup in each of two hierarchies, and an OOM eventfd.
KEPT_FDS_EACH = 8


@dataclass
class Census:
    """One look at a server: its zygotes' kept inits, fds and mounts, and the host's mounts."""

    inits: dict[int, list[int]] = field(default_factory=dict)  # zygote -> its kept namespaces' inits
    zygote_fds: dict[int, int | None] = field(default_factory=dict)
    zygote_kept_fds: dict[int, int] = field(default_factory=dict)
    zygote_mounts: dict[int, int | None] = field(default_factory=dict)
    host_mounts: int | None = None

    @classmethod
    def of(cls, server: int) -> Census:
        parent_of = parents()
        census = cls(host_mounts=count_lines("/proc/self/mountinfo"))
        for zygote in zygotes(server, parent_of):
            children = [pid for pid, parent in parent_of.items() if parent == zygote]
            census.inits[zygote] = sorted(pid for pid in children if is_kept_init(pid))
            census.zygote_fds[zygote] = fds(zygote)
            census.zygote_kept_fds[zygote] = kept_fds(zygote)
            census.zygote_mounts[zygote] = count_lines(f"/proc/{zygote}/mountinfo")
        return census

    @property
    def all_inits(self) -> set[int]:
        return {pid for inits in self.inits.values() for pid in inits}

    @property
    def most_inits(self) -> int:
        return max((len(inits) for inits in self.inits.values()), default=0)

    def fds_beyond_inits(self, zygote: int) -> int | None:
        """The zygote's fds but those it holds for each kept namespace: three (its fd, the pipe and the
        socket to its init: `pidspaces.Space`) and, at most `KEPT_FDS_EACH` more (`kept_fds`): more than
        that is counted, as a leak would be."""
        count = self.zygote_fds.get(zygote)
        if count is None:
            return None
        inits = len(self.inits.get(zygote, []))
        return count - 3 * inits - min(KEPT_FDS_EACH * inits, self.zygote_kept_fds.get(zygote, 0))


def kept_bound(pool_size: int, max_concurrent: int, max_sessions: int) -> int:
    """The kept PID namespaces a zygote may have (runner/processes/isolation.py, kept_pid_namespaces)."""
    return pool_size + max_concurrent + max_sessions
