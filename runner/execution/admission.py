"""Admission: at most `max_concurrent` runs at once, the next `max_queue` waiting in FIFO order, and
`busy` at once for any call beyond that. Knows nothing of what a run is."""

from __future__ import annotations

import anyio


class Admission:
    """The concurrency bound and its queue. `enter` before a run, `leave` after it, exactly once each."""

    def __init__(self, max_concurrent: int, max_queue: int) -> None:
        self.max_concurrent = max_concurrent
        self.max_queue = max_queue  # 0: no bound
        self._slots = anyio.Semaphore(max_concurrent)
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Calls queued for a free slot."""
        return self._waiting

    @property
    def queue_full(self) -> bool:
        """True when one more call would have to be turned away."""
        return bool(self.max_queue) and self._waiting >= self.max_queue

    async def enter(self) -> bool:
        """Take a slot, waiting in line for one if all are taken; False (at once) if the line is full.

        Cancellation while waiting leaves the line as it was: no slot is held then.
        """
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            if self.queue_full:
                return False
            self._waiting += 1
            try:
                # anyio hands a released slot straight to the longest waiter: FIFO.
                await self._slots.acquire()
            finally:
                self._waiting -= 1
        return True

    def leave(self) -> None:
        """Give the slot back; the longest waiter, if any, gets it."""
        self._slots.release()
