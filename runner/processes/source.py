"""Where interpreters come from, chosen once at start: one `posix_spawn` each, or forked by a zygote.

The pool sees either only through `InterpreterSource`, so it never branches on the spawn mode.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from runner.config import Config
from runner.processes.child import Child
from runner.processes.forkserver import ForkServer
from runner.processes.limits import Limits
from runner.processes.sandbox import Sandbox
from runner.processes.spawn import SpawnSource


class InterpreterSource(Protocol):
    """Starts interpreters; the caller waits for each one's ready line and owns it from then on."""

    @property
    def kind(self) -> str:
        """The spawn mode's name, as `RUNNER_SPAWN_MODE` spells it."""
        ...

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


def uses_fork_server(config: Config, sandbox: Sandbox) -> bool:
    """Forked runs, in namespaces of their own or plain, unless bubblewrap (one interpreter per run)
    or RUNNER_SPAWN_MODE=posix-spawn says otherwise."""
    if sandbox.kind != "none":
        return sandbox.kind == "namespaces"
    return config.spawn_mode != "posix-spawn"


@contextlib.asynccontextmanager
async def opened_source(
    config: Config, base_dir: str, limits: Limits, sandbox: Sandbox, logger: logging.Logger
) -> AsyncIterator[InterpreterSource]:
    """The source the configuration asks for; on exit, whatever it runs itself (a zygote) is gone."""
    if uses_fork_server(config, sandbox):
        async with ForkServer.running(config, base_dir, limits, logger, sandbox) as server:
            yield server
    else:
        yield SpawnSource(config, base_dir, limits, sandbox)


def uses_preloading(config: Config, sandbox: Sandbox) -> bool:
    """A second zygote that preloads RUNNER_PRELOAD: only where runs are forked at all."""
    return bool(config.preload) and uses_fork_server(config, sandbox)


@contextlib.asynccontextmanager
async def opened_preloading_source(
    config: Config, base_dir: str, limits: Limits, sandbox: Sandbox, logger: logging.Logger
) -> AsyncIterator[InterpreterSource | None]:
    """The preloading zygote's source, if the configuration has one (`uses_preloading`)."""
    if not uses_preloading(config, sandbox):
        yield None
        return
    async with ForkServer.running(config, base_dir, limits, logger, sandbox, config.preload) as server:
        yield server
