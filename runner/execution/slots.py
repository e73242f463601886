"""A slot of the pool for one call, one-shot or a session's, taken the one way: the caller's share and
the FIFO line (`Admission`, refusing with `busy` past its bounds), then, where runs share the file
system, no process of an earlier run left (`Teardowns.before_next_run`). Both kinds of call take it
here, so admission's bounds and messages hold for session calls by construction."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio

from runner.execution.admission import Admission
from runner.execution.teardown import Teardowns
from runner.logs import log_event
from runner.outcome import RunRequest, RunResult, Status


class Slot:
    """One call's slot, held: how long the call waited for it, and its leaving, which happens exactly
    once, with whatever the call holds for as long as its run lasts (`also`): at the call's end, or,
    handed on (`hand_on`), when its run's teardown after the answer is done."""

    def __init__(self, waited: float, leave: Callable[[], None]) -> None:
        self.waited = waited
        self._frees = [leave]
        self.handed_on = False

    def also(self, free: Callable[[], None]) -> None:
        """Free this too when the slot is left (first, before the slot itself)."""
        self._frees.insert(0, free)

    def hand_on(self) -> Callable[[], None]:
        """The slot's leaving, for whatever ends the run after the call has returned."""
        self.handed_on = True
        return self.leave

    def leave(self) -> None:
        """Free what the call held and the slot; later calls do nothing."""
        frees, self._frees = self._frees, []
        for free in frees:
            free()


class Slots:
    """The pool's slots, as calls take them (`held`)."""

    def __init__(self, admission: Admission, teardowns: Teardowns, logger: logging.Logger) -> None:
        self.admission = admission
        self._teardowns = teardowns
        self._log = logger

    @asynccontextmanager
    async def held(self, request: RunRequest) -> AsyncIterator[Slot | RunResult]:
        """A slot for `request` while the block runs, left at its end unless handed on; `busy` (and
        nothing held) if none comes."""
        queued = anyio.current_time()
        if not await self.admission.enter(request.caller):
            log_event(self._log, logging.WARNING, "call rejected", request.request_id, reason="busy")
            yield RunResult(request.request_id, Status.BUSY, self.admission.busy_message(request.caller))
            return
        slot = Slot(0.0, lambda: self.admission.leave(request.caller))
        try:
            await self._teardowns.before_next_run()
            slot.waited = anyio.current_time() - queued
            yield slot
        finally:
            if not slot.handed_on:
                slot.leave()
