"""The server's event loop: asyncio's, which polls for a moment before it sleeps while code mode's tool
calls are in flight.

A brokered tool call crosses three processes (the run, the server, the downstream server) where a direct
client's call crosses two, and on a virtual machine each hand-over to a process whose CPU has gone idle
costs a wake of that CPU (some 35-40 us each here, twice a call: `docs/performance.md`). So while a run's
tool call is in flight (`held`) and for a moment after a run was answered (`linger`: its next call is
usually some 60 us away), the loop, about to sleep in its selector, first polls its fds for up to
RUNNER_TOOLS_SPIN_US, yielding the CPU between polls to any other process that can run (on one CPU, a
poll that did not yield held back the very downstream server it waited for: 1.75x a direct call ->
2.02x). The spin is bounded at each sleep: a loop with no event in sight sleeps as before, and a loop
with no tool call in flight never spins. A server without code mode makes the stock loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import time
from collections.abc import Callable, Iterator


class _PollingSelector(selectors.EpollSelector):
    """The loop's selector: an epoll whose wait, while `holds` or before `until`, polls first (`spin`)."""

    def __init__(self, spin: float) -> None:
        super().__init__()
        self.spin = spin
        self.holds = 0  # tool calls in flight
        self.until = 0.0  # a lingering poll's end (the loop's clock, `time.monotonic`)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return super().select(timeout)
        start = time.monotonic()
        end = start + self.spin if self.holds else min(self.until, start + self.spin)
        if timeout is not None:
            end = min(end, start + timeout)  # a timer due sooner is not made late
        if end <= start:
            return super().select(timeout)
        while True:
            ready = super().select(0)
            if ready:
                return ready
            os.sched_yield()
            now = time.monotonic()
            if now >= end:
                break
        return super().select(None if timeout is None else max(0.0, timeout - (now - start)))


class PollingLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop on a `_PollingSelector`; `hold`, `release` and `linger` say when to poll."""

    def __init__(self, spin: float) -> None:
        self._polling = _PollingSelector(spin)
        super().__init__(self._polling)

    def hold(self) -> None:
        """A tool call is in flight: each sleep polls first until it is `release`d."""
        self._polling.holds += 1

    def release(self) -> None:
        self._polling.holds -= 1

    def linger(self) -> None:
        """A run was answered: sleeps poll until one spin from now."""
        self._polling.until = time.monotonic() + self._polling.spin


def backend_options(spin_us: int) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """`anyio.run`'s backend options for a server whose tool calls poll for up to `spin_us`
    microseconds before its loop sleeps: a `PollingLoop`'s factory, or none (the stock loop) for 0."""
    if spin_us <= 0:
        return {}
    spin = spin_us / 1_000_000
    return {"loop_factory": lambda: PollingLoop(spin)}


@contextlib.contextmanager
def held(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """The loop polls before each sleep while this is entered (a tool call in flight), if it is a
    `PollingLoop`; any other loop is left as it is."""
    if not isinstance(loop, PollingLoop):
        yield
        return
    loop.hold()
    try:
        yield
    finally:
        loop.release()


def linger(loop: asyncio.AbstractEventLoop) -> None:
    """A run was just answered: a `PollingLoop` polls before it sleeps for one spin more."""
    if isinstance(loop, PollingLoop):
        loop.linger()
