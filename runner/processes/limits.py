"""The rlimits one run gets, derived from the configuration."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

from runner.config import LimitsConfig, PoolConfig
from runner.inrun.bootstrap import lowered, wanted_limits
from runner.processes.isolation import IsolationPlan

# Threads the server itself may hold beyond what was counted at start (anyio workers, stdio readers).
SERVER_THREAD_HEADROOM = 48


@dataclass(frozen=True, slots=True)
class Limits:
    """The values the bootstrap hands to setrlimit, in the units setrlimit takes."""

    cpu_seconds: int
    address_space_bytes: int
    nproc: int
    file_size_bytes: int

    def argv(self) -> list[str]:
        """The bootstrap's positional arguments after the working directory."""
        return [str(self.cpu_seconds), str(self.address_space_bytes), str(self.nproc), str(self.file_size_bytes)]

    def impose_on(self, pid: int) -> None:
        """Hold another process to the same limits as the bootstrap sets on a run (prlimit(2), Linux).

        For a sandbox's own init: a run can ptrace it (same uid, same namespace), and without this
        it would be a process inside the sandbox that no limit of the run bounds. Raises OSError if
        the kernel refuses; a process that is already gone is fine.
        """
        try:
            for name, soft, hard in wanted_limits(
                self.cpu_seconds, self.address_space_bytes, self.nproc, self.file_size_bytes
            ):
                which = getattr(resource, name)
                resource.prlimit(pid, which, lowered(soft, hard, resource.prlimit(pid, which)[1]))
        except ProcessLookupError:
            pass  # gone: its sandbox has ended, and the run with it


def limits_for(limits: LimitsConfig, pool: PoolConfig, tasks_of_uid_at_start: int, plan: IsolationPlan) -> Limits:
    """The limits of every run.

    RLIMIT_NPROC counts every process and thread of the real uid, not of the run: the server, the
    pool and every concurrent run share it. It is sized so that each concurrent run can have
    RUNNER_MAX_PROCESSES of its own on top of what the uid already held at start-up, and the plan's
    helpers next to every interpreter (`IsolationPlan.helpers_per_run`), with one pool of ready
    interpreters per zygote (two with a preloading zygote).

    Where each run is lent a host uid of its own (`IsolationPlan.uid_per_run`), the uid is the run's
    alone: RLIMIT_NPROC is then RUNNER_MAX_PROCESSES, every process and thread of the run counted,
    and nothing else (its namespace's init and bubblewrap stay root).
    """
    if plan.uid_per_run:
        return Limits(limits.max_cpu_seconds, limits.memory_bytes, limits.max_processes, limits.file_size_bytes)
    pools = plan.supplies
    interpreters = pools * pool.pool_size + pool.max_concurrent
    nproc = (
        tasks_of_uid_at_start
        + SERVER_THREAD_HEADROOM
        + pools * pool.pool_size
        + pool.max_concurrent * limits.max_processes
        + interpreters * plan.helpers_per_run
    )
    return Limits(
        cpu_seconds=limits.max_cpu_seconds,
        address_space_bytes=limits.memory_bytes,
        nproc=nproc,
        file_size_bytes=limits.file_size_bytes,
    )


def count_tasks_of_uid(uid: int | None = None, proc: str = "/proc") -> int:
    """Processes and threads whose real uid is `uid` (Linux); 0 where /proc cannot tell."""
    uid = os.getuid() if uid is None else uid
    total = 0
    try:
        entries = os.listdir(proc)
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/status", encoding="ascii", errors="replace") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue  # the process ended while we looked
        real_uid = fields.get("Uid", "").split()
        if real_uid and real_uid[0] == str(uid):
            total += int(fields.get("Threads", "1").strip() or 1)
    return total
