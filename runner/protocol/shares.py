"""Per-caller shares of the run slots, so that one HTTP client cannot hold every slot.

A caller is the name of the token its request came with. Each may have at most `share` runs in
progress or queued in the pool at once; further calls of the same caller wait in its own line (FIFO),
which is bounded like the pool's queue, so a caller flooding the server fills only its own line.
Calls without a caller (stdio, HTTP without tokens) are not held here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio


class CallerShares:
    """At most `share` calls per caller past this point; `max_waiting` more in its line (0: no bound)."""

    def __init__(self, share: int, max_waiting: int) -> None:
        self.share = share
        self._max_waiting = max_waiting
        self._slots: dict[str, anyio.Semaphore] = {}
        self._waiting: dict[str, int] = {}

    @asynccontextmanager
    async def admitted(self, caller: str | None) -> AsyncIterator[bool]:
        """Yield True once `caller` is within its share (at once without a caller or a share), or
        False at once when its line is full. Cancellation while waiting leaves nothing held."""
        if caller is None or not self.share:
            yield True
            return
        slots = self._slots.setdefault(caller, anyio.Semaphore(self.share))
        try:
            slots.acquire_nowait()
        except anyio.WouldBlock:
            waiting = self._waiting.get(caller, 0)
            if self._max_waiting and waiting >= self._max_waiting:
                yield False
                return
            self._waiting[caller] = waiting + 1
            try:
                await slots.acquire()
            finally:
                self._waiting[caller] -= 1
        try:
            yield True
        finally:
            slots.release()

    def waiting(self, caller: str) -> int:
        """Calls of `caller` waiting for its share."""
        return self._waiting.get(caller, 0)


def fair_share(max_concurrent: int, callers: int, configured: int) -> int:
    """Slots one caller may hold: `configured` if set, else the slots divided evenly among the callers
    (rounded up, so that together they can fill every slot); 0 (no limit) for fewer than two callers."""
    if configured:
        return min(configured, max_concurrent)
    if callers < 2:
        return 0
    return -(-max_concurrent // callers)
