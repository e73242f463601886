"""Token buckets for what a downstream server or a run's egress sends us: a count of messages or lines that are dropped
past it (`Rate`, on the event loop's clock), and bytes or lines read that are owed past it, their
reader waiting (`Pace`: sans-IO, its caller says when and waits)."""

from __future__ import annotations

import anyio


class Rate:
    """A token bucket: `burst` at once, then `per_second`; what it refused, `dropped`."""

    __slots__ = ("_at", "_burst", "_per_second", "_tokens", "dropped")

    def __init__(self, burst: int, per_second: float) -> None:
        self._burst, self._per_second = burst, per_second
        self._tokens, self._at = float(burst), anyio.current_time()
        self.dropped = 0

    def take(self) -> bool:
        now = anyio.current_time()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._per_second)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self.dropped += 1
        return False


class Pace:
    """Sans-IO: a token bucket of what a reader reads (bytes, or lines), `burst` at once, then
    `per_second`; a read past it owes the time it must wait (`spend`). What it took in all, `taken`, and
    how many reads owed time, `held`: what a reader logs of how hard it was pushed."""

    __slots__ = ("_at", "_burst", "_per_second", "_tokens", "held", "taken")

    def __init__(self, burst: int, per_second: float, now: float) -> None:
        self._burst, self._per_second = burst, per_second
        self._tokens, self._at = float(burst), now
        self.taken = self.held = 0

    def spend(self, size: int, now: float) -> float:
        """Take `size` (bytes, or lines) at `now`: the seconds to wait before the next read (0 if none)."""
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._per_second) - size
        self._at = now
        self.taken += size
        if self._tokens < 0:
            self.held += 1
            return -self._tokens / self._per_second
        return 0.0
