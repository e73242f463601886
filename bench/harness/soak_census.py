"""What the soak (bench/soak.py) counts of a server at one moment, beyond its own fds and memory: the
kept PID namespaces of each zygote (whose number may grow up to a bound, `kept_bound`), the zygotes'
fds and mounts (their shared view), and the mounts of the host's mount namespace (a leaked mount of a
sandbox would be there).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

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


def network_namespace_fds(pid: int) -> int:
    """How many of `pid`'s fds are network namespaces (a zygote holds one for each kept PID namespace
    whose runs have an isolated network: `pidspaces.Space.network`)."""
    count = 0
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    for name in names:
        try:
            count += os.readlink(f"/proc/{pid}/fd/{name}").startswith("net:[")
        except OSError:
            continue
    return count


@dataclass
class Census:
    """One look at a server: its zygotes' kept inits, fds and mounts, and the host's mounts."""

    inits: dict[int, list[int]] = field(default_factory=dict)  # zygote -> its kept namespaces' inits
    zygote_fds: dict[int, int | None] = field(default_factory=dict)
    zygote_networks: dict[int, int] = field(default_factory=dict)
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
            census.zygote_networks[zygote] = network_namespace_fds(zygote)
            census.zygote_mounts[zygote] = count_lines(f"/proc/{zygote}/mountinfo")
        return census

    @property
    def all_inits(self) -> set[int]:
        return {pid for inits in self.inits.values() for pid in inits}

    @property
    def most_inits(self) -> int:
        return max((len(inits) for inits in self.inits.values()), default=0)

    def fds_beyond_inits(self, zygote: int) -> int | None:
        """The zygote's fds but the three it holds for each kept namespace (its fd, the pipe and the
        socket to its init: `pidspaces.Space`) and, where runs have an isolated network, the fourth:
        its network namespace (one for each at most: one more is counted, as a leak would be)."""
        count = self.zygote_fds.get(zygote)
        if count is None:
            return None
        inits = len(self.inits.get(zygote, []))
        return count - 3 * inits - min(inits, self.zygote_networks.get(zygote, 0))


def kept_bound(pool_size: int, max_concurrent: int, max_sessions: int) -> int:
    """The kept PID namespaces a zygote may have (runner/processes/isolation.py, kept_pid_namespaces)."""
    return pool_size + max_concurrent + max_sessions
