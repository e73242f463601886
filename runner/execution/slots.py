"""A slot of the pool for one call, one-shot or a session's, taken the one way: the caller's share and
the FIFO line (`Admission`, refusing with `busy` past its bounds), then, where runs share the file
system, no process of an earlier run left (`Teardowns.before_next_run`). Both kinds of call take it
here, so admission's bounds and messages hold for session calls by construction."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from runner.execution.admission import Admission
from runner.execution.teardown import Teardowns
from runner.logs import log_event
from runner.outcome import RunRequest, RunResult, Status


class Slots:
    """The pool's slots, as calls take them: `enter` then `leave` (exactly once each), or `held`."""

    def __init__(self, admission: Admission, teardowns: Teardowns, logger: logging.Logger) -> None:
        self.admission = admission
        self._teardowns = teardowns
        self._log = logger

    async def enter(self, request: RunRequest) -> float | RunResult:
        """A slot for `request`: the seconds it waited for one, or `busy` (then nothing is held)."""
        queued = anyio.current_time()
        if not await self.admission.enter(request.caller):
            log_event(self._log, logging.WARNING, "call rejected", request.request_id, reason="busy")
            return RunResult(request.request_id, Status.BUSY, self.admission.busy_message(request.caller))
        try:
            await self._teardowns.before_next_run()
        except BaseException:
            self.admission.leave(request.caller)
            raise
        return anyio.current_time() - queued

    def leave(self, request: RunRequest) -> None:
        """The slot `enter` gave `request` is free again."""
        self.admission.leave(request.caller)

    async def held(self, request: RunRequest, run: Callable[[float], Awaitable[RunResult]]) -> RunResult:
        """`run(seconds waited)` holding a slot for `request`; `busy` if none comes."""
        waited = await self.enter(request)
        if isinstance(waited, RunResult):
            return waited
        try:
            return await run(waited)
        finally:
            self.leave(request)
