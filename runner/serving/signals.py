"""The one way a signal stops the server: SIGTERM or SIGINT, heard from the very start.

`catch_early` is installed before anything else can take a while (the SDK's import, the pool's start):
a stop asked for then is kept, not lost, and not the default action (which would end the process
before its runs and zygotes are cleaned up). `stop_on_signals` then hands each signal, the early one
first, to what the transport does to stop: stdio cancels its session, HTTP stops accepting and gives
the calls in flight their grace (a second signal: at once).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable

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
