"""Moving bytes through non-blocking file descriptors in the event loop (pipes, the stdio wire)."""

from __future__ import annotations

import os

import anyio


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
