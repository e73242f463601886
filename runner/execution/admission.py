"""Admission: at most `max_concurrent` runs at once, the next `max_queue` waiting in FIFO order, and
`busy` at once for any call beyond that; and, where callers are known, a share of the slots per caller.

A caller is the name of the token its request came with (`RunRequest.caller`). With a share, each
caller may have at most `share` calls past its own line at once (running, or waiting for a slot);
further calls of the same caller wait in that line (FIFO), which is bounded like the queue, so a
caller flooding the server fills only its own line. Calls without a caller (stdio, HTTP without
tokens) have no line of their own. A call that must wait for something else before it may enter
(`wait_counted`: a session's call for that session's previous call) waits counted the same way, so
RUNNER_MAX_QUEUE bounds every waiting call. Knows nothing of what a run is, nor of what is waited for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio


class Admission:
    """The concurrency bound, its queue and the callers' shares. `enter` before a run and `leave`
    after it, exactly once each, with the same caller; `busy_message` says why `enter` refused."""

    def __init__(self, max_concurrent: int, max_queue: int, share: int = 0) -> None:
        self.max_concurrent = max_concurrent
        self.max_queue = max_queue  # 0: no bound
        self.share = share  # 0: callers have no share of their own
        self._slots = anyio.Semaphore(max_concurrent)
        self._waiting = 0
        self._callers: dict[str, anyio.Semaphore] = {}
        self._callers_waiting: dict[str, int] = {}

    @property
    def waiting(self) -> int:
        """Calls waiting in the queue: for a free slot, or (`wait_counted`) for something else first."""
        return self._waiting

    @property
    def queue_full(self) -> bool:
        """True when one more call would have to be turned away."""
        return self._full(self._waiting)

    def caller_waiting(self, caller: str) -> int:
        """Calls of `caller` waiting in its own line: for its share, or (`wait_counted`) for something else."""
        return self._callers_waiting.get(caller, 0)

    async def enter(self, caller: str | None = None) -> bool:
        """Take the caller's share and a slot, waiting in line for each if all are taken; False (at
        once) if a line is full. Cancellation while waiting leaves everything as it was."""
        share = self._share_of(caller)
        if share is not None and not await self._acquire(share, caller):
            return False
        try:
            admitted = await self._acquire(self._slots, None)
        except BaseException:
            if share is not None:
                share.release()
            raise
        if not admitted and share is not None:
            share.release()
        return admitted

    async def wait_counted(self, caller: str | None, wait: Callable[[], Awaitable[None]]) -> bool:
        """Await `wait()` counted as a waiting call, for a call that must wait for something else before
        it may `enter`; False (at once, `wait` not called) if its line is full. Its line is the caller's
        own wherever the caller has a share, whether or not the share is used up: a caller piling calls
        onto something of its own fills only its own line, never the queue the others wait in. Without a
        share it is the queue. Cancellation while waiting leaves every count as it was."""
        line = caller if caller is not None and self.share else None
        if self._full(self._waiting_in(line)):
            return False
        self._count(line, +1)
        try:
            await wait()
        finally:
            self._count(line, -1)
        return True

    def leave(self, caller: str | None = None) -> None:
        """Give the slot and the caller's share back; the longest waiter of each, if any, gets it."""
        self._slots.release()
        share = self._share_of(caller)
        if share is not None:
            share.release()

    def busy_message(self, caller: str | None = None) -> str:
        """Why a call was turned away, for the caller: the one BUSY message."""
        if caller is not None and self.share and self._full(self.caller_waiting(caller)):
            held = f"{_runs(self.share)} of this client in progress and {self.caller_waiting(caller)} waiting"
            setting = "RUNNER_HTTP_MAX_CONCURRENT_PER_TOKEN"
        else:
            held = f"{_runs(self.max_concurrent)} in progress and {self._waiting} waiting"
            setting = f"RUNNER_MAX_QUEUE={self.max_queue}"
        return f"server busy: {held} ({setting}); retry later"

    def _share_of(self, caller: str | None) -> anyio.Semaphore | None:
        if caller is None or not self.share:
            return None
        return self._callers.setdefault(caller, anyio.Semaphore(self.share))

    def _full(self, waiting: int) -> bool:
        return bool(self.max_queue) and waiting >= self.max_queue

    async def _acquire(self, slots: anyio.Semaphore, caller: str | None) -> bool:
        """Take one of `slots`, waiting in the line of `caller` (None: the queue) unless it is full."""
        try:
            slots.acquire_nowait()
            return True
        except anyio.WouldBlock:
            pass
        if self._full(self._waiting_in(caller)):
            return False
        self._count(caller, +1)
        try:
            # anyio hands a released slot straight to the longest waiter: FIFO.
            await slots.acquire()
        finally:
            self._count(caller, -1)
        return True

    def _waiting_in(self, caller: str | None) -> int:
        """Calls waiting in the line of `caller` (None: the queue)."""
        return self.caller_waiting(caller) if caller is not None else self._waiting

    def _count(self, caller: str | None, change: int) -> None:
        if caller is None:
            self._waiting += change
        else:
            self._callers_waiting[caller] = self._callers_waiting.get(caller, 0) + change


def fair_share(max_concurrent: int, callers: int, configured: int) -> int:
    """Slots one caller may hold: `configured` if set, else the slots divided evenly among the callers
    (rounded up, so that together they can fill every slot); 0 (no limit) for fewer than two callers."""
    if configured:
        return min(configured, max_concurrent)
    if callers < 2:
        return 0
    return -(-max_concurrent // callers)


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"
