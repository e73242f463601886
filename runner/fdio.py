"""Moving bytes through non-blocking file descriptors in the event loop (pipes, the stdio wire)."""

from __future__ import annotations

import os
import select

import anyio


def readable_now(fd: int) -> bool:
    """Whether `fd` can be read (or is at its end) now, without waiting. poll, not select: select's fd
    sets take no fd above 1023, and a server with hundreds of runs' pipes holds more."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


async def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to a non-blocking fd, waiting whenever it is full."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            await anyio.wait_writable(fd)
            continue
        view = view[written:]
