"""One call's path, the same for a one-shot call and a session's: admitted (the caller's share and the
FIFO line, and a session's turn), its packages, an interpreter (a pooled one, or the session's call
forked ahead from its kept state), the one driver, one verdict step (a one-shot run's teardown, or a
session's keep or roll-back), the answer.

Where the two kinds differ, a `Host` says what to do: `OneShotHost` here, `SessionHost` in
`runner.execution.sessions`. The path itself, its order and its logging, is written once (`CallPath`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

import anyio

from runner.execution.driver import ProgressCallback, RunDriver
from runner.execution.hints import Hints
from runner.execution.provided import ProvidedPackages
from runner.execution.slots import Slot, Slots
from runner.execution.supply import Supplies, imported_packages
from runner.execution.sweep import StraySweeper
from runner.execution.teardown import Teardowns
from runner.logs import log_event
from runner.outcome import RunRequest, RunResult, Status
from runner.processes.child import Child


class Host(Protocol):
    """Where an admitted call runs, and what follows its run."""

    @property
    def packages(self) -> Mapping[str, Path]:
        """The package directories held already (a session's), by distribution: not provided again."""
        ...

    @property
    def reads_imports(self) -> bool:
        """Whether `take` chooses by the code's imports (a pooled interpreter of the lean or the
        preloading supply); the packages read them wherever there are any."""
        ...

    def hold_packages(self, request: RunRequest, provided: Mapping[str, Path]) -> RunResult | None:
        """Hold the directories provided for this call for as long as they are needed; or the answer
        if the call cannot go on (its session ended while they were installed)."""
        ...

    async def take(self, request: RunRequest, imports: frozenset[str]) -> Child | RunResult:
        """The interpreter the call runs in, ready for its job; or the answer if there is none."""
        ...

    def watching(self, child: Child) -> AbstractAsyncContextManager[None]:
        """What watches the call while it is driven, beside the driver (a session's OOMs)."""
        ...

    async def verdict(self, child: Child, request: RunRequest, result: RunResult) -> RunResult:
        """After the run: its interpreter ended (one-shot) or its state kept or rolled back (a
        session); the answer."""
        ...

    async def abandon(self, child: Child) -> None:
        """The call is cancelled or failed: its run is killed and ended (a session's rolled back).
        Called in a shielded scope."""
        ...


@dataclass(frozen=True, slots=True)
class Admitted:
    """A call let in: the slot it holds and where it runs."""

    slot: Slot
    host: Host


class OneShotHost:
    """A one-shot call: a pooled interpreter of the supply its imports choose; its verdict, the
    interpreter's end, after the answer where the run told its own end (the slot held until then)."""

    packages: Mapping[str, Path] = MappingProxyType({})  # it holds none: what it is given goes with its slot

    def __init__(self, slot: Slot, supplies: Supplies, teardowns: Teardowns, provided: ProvidedPackages | None) -> None:
        self._slot = slot
        self._supplies = supplies
        self._teardowns = teardowns
        self._provided = provided

    @property
    def reads_imports(self) -> bool:
        return self._supplies.routes

    def hold_packages(self, request: RunRequest, provided: Mapping[str, Path]) -> RunResult | None:
        if self._provided is not None and provided:
            given, held = self._provided, tuple(provided.values())
            self._slot.also(lambda: given.release(held))  # for as long as the run lasts
        return None

    async def take(self, request: RunRequest, imports: frozenset[str]) -> Child | RunResult:
        return await self._supplies.for_imports(imports).take()

    def watching(self, child: Child) -> AbstractAsyncContextManager[None]:
        return nullcontext()  # the driver watches all a one-shot run needs

    async def verdict(self, child: Child, request: RunRequest, result: RunResult) -> RunResult:
        await self._teardowns.end(child, self._slot.hand_on())
        return result

    async def abandon(self, child: Child) -> None:
        await self._teardowns.end(child)


class SessionCalls(Protocol):
    """What the path needs of the sessions: a session call let in (`runner.execution.sessions`)."""

    def admitted(self, request: RunRequest) -> AbstractAsyncContextManager[Admitted | RunResult]: ...


class CallPath:
    """Every call's path (the module's docstring), with the pool's parts."""

    def __init__(
        self,
        slots: Slots,
        supplies: Supplies,
        teardowns: Teardowns,
        sessions: SessionCalls,
        driver: RunDriver,
        provided: ProvidedPackages | None,
        sweeper: StraySweeper | None,
        notes: Hints,
        logger: logging.Logger,
    ) -> None:
        self._slots = slots
        self._supplies = supplies
        self._teardowns = teardowns
        self._sessions = sessions
        self._driver = driver
        self._provided = provided
        self._sweeper = sweeper
        self._notes = notes
        self._log = logger

    async def run(self, request: RunRequest, on_progress: ProgressCallback | None) -> RunResult:
        """Run one request to its end and return the outcome; raises only for cancellation and
        infrastructure faults."""
        admitted_to = self._sessions.admitted if request.session is not None else self._one_shot
        async with admitted_to(request) as admitted:
            if isinstance(admitted, RunResult):
                return admitted
            result = await self._run(request, admitted, on_progress)
        return self._notes.noted(result)

    @asynccontextmanager
    async def _one_shot(self, request: RunRequest) -> AsyncIterator[Admitted | RunResult]:
        async with self._slots.held(request) as slot:
            if isinstance(slot, RunResult):
                yield slot
            else:
                yield Admitted(slot, OneShotHost(slot, self._supplies, self._teardowns, self._provided))

    async def _run(self, request: RunRequest, admitted: Admitted, on_progress: ProgressCallback | None) -> RunResult:
        host = admitted.host
        # The code's imports, scanned once, and only where read: by the packages, or by the host's choice.
        scans = self._provided is not None or host.reads_imports
        imports = imported_packages(request.code) if scans else frozenset()
        paths: tuple[str, ...] = ()
        installed = ""  # what the result says of an install the call waited for
        if self._provided is not None:  # what the call needs beyond what its host holds
            provided = await self._provided.provide(request, imports, host.packages, on_progress)
            if isinstance(provided, RunResult):
                return provided
            refused = host.hold_packages(request, provided.paths)
            if refused is not None:
                return refused
            paths = tuple(str(path) for path in {**host.packages, **provided.paths}.values())
            installed = provided.note
        child = await host.take(request, imports)
        if isinstance(child, RunResult):
            return child
        finished = False  # its run's line logged: a cancel in the verdict is the protocol side's to log
        try:
            if self._sweeper is not None:
                await self._sweeper.settle()
            async with host.watching(child):
                result = await self._driver.drive(child, request, admitted.slot.waited, on_progress, paths)
            _log_finished(self._log, request, result)
            finished = True
            answered = await host.verdict(child, request, result)
            if installed:
                answered = dataclasses.replace(answered, note="; ".join(filter(None, (installed, answered.note))))
            return answered
        except BaseException as exc:
            if not finished and isinstance(exc, anyio.get_cancelled_exc_class()):
                log_event(self._log, logging.INFO, "run finished", request.request_id, status=Status.CANCELLED.value)
            with anyio.CancelScope(shield=True):
                await host.abandon(child)
            raise


def _log_finished(log: logging.Logger, request: RunRequest, result: RunResult) -> None:
    log_event(
        log,
        logging.INFO,
        "run finished",
        request.request_id,
        status=result.status.value,
        exit_code=result.exit_code,
        duration=result.duration,
        cpu=result.cpu_seconds,
        peak_memory=result.peak_memory_bytes,
        stdout_bytes=result.stdout.total_bytes,
        stderr_bytes=result.stderr.total_bytes,
    )
