"""Moving bytes through non-blocking file descriptors in the event loop (pipes, the stdio wire, sockets)."""

from __future__ import annotations

import asyncio
import os
import select
from collections.abc import Callable

import anyio
import anyio.lowlevel


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


class AskedReads:
    """Reads of a non-blocking fd made only when asked (`read`), so that what no one has asked for stays
    with the kernel, whose buffer then holds its writer back (asyncio's transports read whatever comes,
    paced or not: a byte at a time, or gigabytes a peer would not take). What a wait finds is read in
    the event loop's own callback, and the fd stays with the loop while its reader keeps asking (anyio's
    `wait_readable` adds and removes it each time: two epoll_ctl calls a read); found ready while no one
    asks, it is left alone until the next `read`. `read_some(most)` is the fd's own read (`os.read`,
    `socket.recv`), `close_fd` its close, called once by `close`, after a wait is woken and the fd taken
    from the loop (its number may be another file's after)."""

    __slots__ = ("_close_fd", "_fd", "_loop", "_most", "_read_some", "_waiter", "_watched")

    def __init__(self, fd: int, read_some: Callable[[int], bytes], close_fd: Callable[[], None]) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd
        self._read_some, self._close_fd = read_some, close_fd
        # The server runs on asyncio (`anyio.run`'s default backend), whose loop takes readers.
        self._loop = asyncio.get_running_loop()
        self._watched = False
        self._waiter: asyncio.Future[bytes] | None = None
        self._most = 0

    async def read(self, most: int) -> bytes:
        """What the fd holds, up to `most` bytes, once it holds some; b"" at its end. An error of the
        read raises its OSError; a read after `close`, or a wait it ends, ClosedResourceError."""
        if self._fd is None:
            raise anyio.ClosedResourceError
        try:
            data = self._read_some(most)
        except BlockingIOError:
            pass
        else:
            # Bytes were there already (a download's next chunk): the other tasks get their turn, and a
            # cancellation its chance, as they would at a wait.
            await anyio.lowlevel.checkpoint()
            return data
        waiter: asyncio.Future[bytes] = self._loop.create_future()
        self._waiter, self._most = waiter, most
        if not self._watched:
            self._loop.add_reader(self._fd, self._ready)
            self._watched = True
        return await waiter

    def _ready(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done() or self._fd is None:
            self._unwatch()  # no one asks: the next `read` watches again
            return
        try:
            waiter.set_result(self._read_some(self._most))
        except BlockingIOError:
            self._waiter = waiter
        except OSError as exc:
            waiter.set_exception(exc)

    def interrupt(self, error: BaseException) -> None:
        """The read waiting now, if one is, raises `error`; the fd stays open (the next `read` waits anew)."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def _unwatch(self) -> None:
        if self._watched and self._fd is not None:
            self._loop.remove_reader(self._fd)
        self._watched = False

    def close(self) -> None:
        if self._fd is not None:
            self._unwatch()
            waiter, self._waiter = self._waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_exception(anyio.ClosedResourceError())
            self._fd = None
            self._close_fd()
