"""How much memory the server can hold, and the share of it open sessions may keep (their budget).

A session keeps its state in memory between calls, for as long as it lasts; many sessions together
could hold more than the machine, or the server's container, has, and the kernel's OOM killer would
then take the largest process, which may be the server itself. So every open session's kept state
together has a budget (`RUNNER_SESSIONS_MEMORY_MB`): decided once, when the configuration is opened
(`Config.sessions_budget_bytes`), from the machine's memory and the server's cgroup's limit, and a call
whose state would pass it is rolled back (`runner.execution.sessions`).
"""

from __future__ import annotations

import os

from runner.config.settings import MIB
from runner.config.values import Config
from runner.errors import ConfigError

# The share of what the server can hold that sessions may keep by default: the rest is for the calls
# that run (RUNNER_MAX_CONCURRENT of them, each up to RUNNER_MAX_MEMORY_MB), the pool's ready
# interpreters, the zygotes and the server.
DEFAULT_SHARE = 0.5
# A cgroup v1 memory.limit_in_bytes this large or larger says "no limit" (it is rounded to pages).
UNLIMITED = 1 << 62


def sessions_budget(config: Config, available: int | None = None) -> int:
    """The bytes every open session's kept state may hold together: RUNNER_SESSIONS_MEMORY_MB where set
    (`ConfigError` if that is more than the server can hold), else half of what it can hold, and never
    more than RUNNER_MAX_SESSIONS sessions of RUNNER_MAX_MEMORY_MB each."""
    available = memory_available() if available is None else available
    if config.sessions_memory_mb:
        budget = config.sessions_memory_mb * MIB
        if budget > available:
            raise ConfigError(
                "RUNNER_SESSIONS_MEMORY_MB",
                f"{config.sessions_memory_mb} MiB is more than the {available // MIB} MiB this server can hold "
                "(the machine's memory, or its cgroup's limit where lower)",
            )
        return budget
    return min(int(available * DEFAULT_SHARE), config.max_sessions * config.max_memory_mb * MIB)


def memory_available() -> int:
    """The bytes of memory this server's processes can hold: the machine's, or its cgroup's limit where
    lower (a container's ``--memory``, a Kubernetes pod's limit)."""
    texts = {}
    for path in ("/proc/meminfo", "/proc/self/cgroup"):
        try:
            with open(path) as file:
                texts[path] = file.read()
        except OSError:
            texts[path] = ""
    limits = []
    for path in cgroup_limit_files(texts["/proc/self/cgroup"]):
        try:
            with open(path) as file:
                limits.append(file.read())
        except OSError:
            continue
    return available_bytes(texts["/proc/meminfo"], limits)


def cgroup_limit_files(proc_self_cgroup: str) -> list[str]:
    """Where the memory limit of the cgroup that /proc/self/cgroup names is (v2's memory.max, v1's
    memory.limit_in_bytes), at its path and at the root (a container sees its own cgroup there)."""
    files = []
    for line in proc_self_cgroup.splitlines():
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if controllers == "" and path:
            files += [os.path.join("/sys/fs/cgroup", path.lstrip("/"), "memory.max"), "/sys/fs/cgroup/memory.max"]
        elif "memory" in controllers.split(","):
            base = "/sys/fs/cgroup/memory"
            files += [os.path.join(base, path.lstrip("/"), "memory.limit_in_bytes"), f"{base}/memory.limit_in_bytes"]
    return files


def available_bytes(meminfo: str, limits: list[str]) -> int:
    """The least of MemTotal (from /proc/meminfo's text) and every cgroup limit in `limits` (the texts of
    memory.max or memory.limit_in_bytes; "max" and v1's near-2**63 say there is none)."""
    total = UNLIMITED
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) * 1024
    for text in limits:
        value = text.strip()
        if value.isdigit() and 0 < int(value) < UNLIMITED:
            total = min(total, int(value))
    return total
