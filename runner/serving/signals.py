"""The one way a signal stops the server: SIGTERM or SIGINT, heard from the very start.

`catch_early` is installed before anything else can take a while (the SDK's import, the pool's start):
a stop asked for then is kept, not lost, and not the default action (which would end the process
before its runs and zygotes are cleaned up). `stops_heard` listens from before the start's slow parts
(the tool servers' listing, the pool): a stop then cancels the start. `stop_on_signals` hands each
signal, the early one first, to what the transport does to stop once it serves: stdio cancels its
session, HTTP stops accepting and gives the calls in flight their grace (a second signal: at once).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc

from runner.logs import get_logger, log_event

STOPPING = (signal.SIGTERM, signal.SIGINT)


def catch_early() -> list[int]:
    """Keep the signals that come before `stop_on_signals` listens; the list it reads them from."""
    early: list[int] = []
    for sig in STOPPING:
        signal.signal(sig, lambda signum, frame: early.append(signum))
    return early


async def stop_on_signals(
    stop: Callable[[], None], early: list[int], message: str, *, task_status: anyio.abc.TaskStatus[None]
) -> None:
    """Call `stop` for every stopping signal, logging `message`, from the moment this has started."""
    with anyio.open_signal_receiver(*STOPPING) as signals:
        task_status.started()
        if early:  # a signal that came before this receiver did
            log_event(get_logger(), logging.INFO, "signal received at start; stopping", signal=early[0])
            stop()
        async for signum in signals:
            log_event(get_logger(), logging.INFO, message, signal=signal.Signals(signum).name)
            stop()


class Stopping:
    """Where a stopping signal goes: the start's cancel until `serving` names the transport's stop."""

    def __init__(self, starting: anyio.CancelScope) -> None:
        self._stop: Callable[[], None] = starting.cancel

    def serving(self, stop: Callable[[], None]) -> None:
        """From now on a signal calls `stop`."""
        self._stop = stop

    def __call__(self) -> None:
        self._stop()


@asynccontextmanager
async def stops_heard(early: list[int], message: str) -> AsyncIterator[Stopping]:
    """Signals heard for as long as this lasts (`stop_on_signals`, logging `message`): until `serving`,
    a stop cancels what runs inside it. Found by a review: they were heard only once serving began, and
    a SIGTERM while a downstream server was slow to start waited out its 35 s, past a container's grace."""
    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as starting:
            stopping = Stopping(starting)
            await tg.start(stop_on_signals, stopping, early, message)
            yield stopping
        tg.cancel_scope.cancel()
