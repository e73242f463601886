"""The pool's supplies of ready interpreters: the lean one every configuration has, and the
preloading zygote's where there is one (RUNNER_PRELOAD), with the choice between them per call.

Each supply keeps its own interpreters ready (`InterpreterSupply`); the pool sees them as one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.abc

from runner.config import Config
from runner.execution.routing import wants_preloaded
from runner.execution.supply import InterpreterSupply
from runner.processes.child import Child
from runner.processes.limits import Limits
from runner.processes.sandbox import Sandbox
from runner.processes.source import InterpreterSource, opened_preloading_source, opened_source


class Supplies:
    """The lean supply, and the preloading one if configured; `for_code` picks one per call."""

    def __init__(
        self,
        lean: tuple[InterpreterSupply, InterpreterSource],
        preloaded: tuple[InterpreterSupply, InterpreterSource] | None,
        preload: tuple[str, ...],
    ) -> None:
        self._lean = lean
        self._preloaded = preloaded
        self._preload = preload

    @classmethod
    @asynccontextmanager
    async def opened(
        cls, config: Config, base_dir: str, limits: Limits, sandbox: Sandbox, logger: logging.Logger
    ) -> AsyncIterator[Supplies]:
        """Both sources opened (a zygote each, where runs are forked); on exit they are gone."""
        async with (
            opened_source(config, base_dir, limits, sandbox, logger) as source,
            opened_preloading_source(config, base_dir, limits, sandbox, logger) as preloading,
        ):
            lean = (InterpreterSupply(config, limits, source, logger), source)
            preloaded = (
                None if preloading is None else (InterpreterSupply(config, limits, preloading, logger), preloading)
            )
            yield cls(lean, preloaded, config.preload)

    @property
    def all(self) -> list[InterpreterSupply]:
        """Every supply, lean first."""
        return [self._lean[0]] + ([self._preloaded[0]] if self._preloaded else [])

    def for_code(self, code: str) -> InterpreterSupply:
        """The preloading supply for code that imports what it preloaded (or any package), else the lean one."""
        if self._preloaded is not None and wants_preloaded(code, self._preload):
            return self._preloaded[0]
        return self._lean[0]

    def known_pids(self) -> set[int]:
        """Every supply's interpreters and zygotes (`InterpreterSupply.known_pids`)."""
        return set().union(*(supply.known_pids() for supply in self.all))

    @property
    def ready(self) -> int:
        """Interpreters started ahead, in all supplies."""
        return sum(supply.ready for supply in self.all)

    @property
    def in_use(self) -> int:
        """Runs in progress, in all supplies."""
        return sum(supply.in_use for supply in self.all)

    @property
    def restarts(self) -> int:
        """Zygotes started again, in all sources."""
        return sum(source.restarts for _, source in filter(None, (self._lean, self._preloaded)))

    def start_refilling(self, tg: anyio.abc.TaskGroup) -> None:
        """Keep every supply's interpreters ready, in the background."""
        for supply in self.all:
            tg.start_soon(supply.refill_forever)

    async def unresponsive(self, child: Child) -> None:
        """`child` did not end after SIGKILL: its source deals with it."""
        for supply, source in filter(None, (self._lean, self._preloaded)):
            if supply.holds(child):
                await source.unresponsive(child)
                return
        await self._lean[1].unresponsive(child)

    async def shutdown(self) -> None:
        """Every supply's interpreters gone (`InterpreterSupply.shutdown`)."""
        for supply in self.all:
            await supply.shutdown()
