"""Where interpreters come from, as the isolation plan says: one `posix_spawn` each, or forked by a zygote.

The pool sees either only through `InterpreterSource`, so it never branches on the plan's mode.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from runner.config import Config
from runner.logs import log_event
from runner.processes.cgroups import Parent
from runner.processes.child import Child
from runner.processes.forkserver import ForkServer
from runner.processes.identity import claimed_uids
from runner.processes.isolation import IsolationPlan
from runner.processes.limits import Limits
from runner.processes.spawn import SpawnSource


class InterpreterSource(Protocol):
    """Starts interpreters; the caller waits for each one's ready line and owns it from then on."""

    @property
    def helper_pid(self) -> int | None:
        """A process of the source's own among the server's children (the zygote), never a run."""
        ...

    @property
    def restarts(self) -> int:
        """Helpers (zygotes) started again after one died or stopped answering."""
        ...

    @property
    def forks_delay_runs(self) -> bool:
        """Whether starting an interpreter while a run is in progress delays that run's end."""
        ...

    async def start(self) -> Child:
        """A new interpreter, not yet ready. Raises `SpawnError` if none can be started."""
        ...

    async def unresponsive(self, child: Child) -> None:
        """`child` did not end after SIGKILL: recover if the source can, else raise `SpawnError`."""
        ...

    def mark_anchor(self, child: Child) -> None:
        """`child` is a session's anchor now: an OOM in its cgroup must end the call running in it,
        not the whole run (`Child.note_oom` says where the source watches it)."""
        ...

    async def oom_told(self, child: Child) -> None:
        """After a session's call whose processes are all gone: every OOM in `child`'s cgroup so far
        has been told, so none comes late into the next call."""
        ...


@contextlib.asynccontextmanager
async def opened_sources(
    config: Config, plan: IsolationPlan, base_dir: str, limits: Limits, logger: logging.Logger
) -> AsyncIterator[list[InterpreterSource]]:
    """The plan's sources, lean first: a zygote, and a second one that preloads `plan.preload` if it
    has any, where runs are forked; one `posix_spawn` per run otherwise. On exit, whatever they run
    themselves (the zygotes) is gone. A root server's sources lend their runs uids of a block this
    pool holds while they are open (`identity.claimed_uids`), each source a part of its own."""
    with claimed_uids(config, plan) as block:
        if block is not None:
            log_event(logger, logging.INFO, "runs get host uids of their own", uids=str(block))
        if not plan.forked:
            # bubblewrap's runs: each in a cgroup of its own, made by the server under this parent.
            parent = Parent(plan.cgroups) if plan.cgroups is not None and plan.sandboxed else None
            try:
                yield [SpawnSource(config, base_dir, limits, plan, block, parent)]
            finally:
                if parent is not None:
                    parent.remove()
            return
        async with contextlib.AsyncExitStack() as stack:
            sources: list[InterpreterSource] = []
            parts = block.split(plan.supplies) if block is not None else [None] * plan.supplies
            for preload, part in zip(((), plan.preload)[: plan.supplies], parts, strict=True):
                args = plan.zygote_args + ((part.token(),) if part is not None else ())
                server = ForkServer.running(config, base_dir, limits, logger, args, preload, plan.cgroups)
                sources.append(await stack.enter_async_context(server))
            yield sources
