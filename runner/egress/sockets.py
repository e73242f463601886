"""The proxy's TCP sockets, both the run's connections and the upstreams' (`Socket`), read only when the
relay asks: what neither side has been asked for stays in the kernel, whose window then holds the
sender back.

Why not anyio's streams: on asyncio, `anyio.connect_tcp` and `SocketListener` read each socket into a
deque of their own whenever bytes arrive, pausing only once a receive() had waited and found more than
its buffer. A run that sent faster than an upstream took, or asked for a response it never read, had
it all held in the server's memory, uncounted (found by a review: 2.5 GiB in 5 s from one run with a
100 MB budget). Here a read is one ``recv`` of at most what the relay asks for, when it asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import anyio
import anyio.lowlevel


class Socket:
    """A connected non-blocking TCP socket, read only when `receive` is awaited. A wait for bytes is the
    event loop's own reader callback, kept registered while the relay keeps asking (anyio's
    `wait_readable` adds and removes it at every wait: two epoll_ctl calls a read); found ready while no
    one asks, it is left with the kernel until the next `receive`."""

    __slots__ = ("_loop", "_sock", "_waiter", "_wanted", "_watched")

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        with contextlib.suppress(OSError):  # as anyio did: a small write (a head, a 100) goes at once
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        # The server runs on asyncio (`anyio.run`'s default backend), whose loop takes readers.
        self._loop = asyncio.get_running_loop()
        self._watched = False
        self._waiter: asyncio.Future[bytes] | None = None
        self._wanted = 0

    async def receive(self, most: int) -> bytes:
        """What the socket holds, up to `most` bytes, once it holds some; b"" at its end. A reset raises
        its OSError."""
        if self._sock.fileno() < 0:
            raise anyio.ClosedResourceError
        try:
            data = self._sock.recv(most)
        except BlockingIOError:
            pass
        else:
            # Bytes were there already (a download's next chunk): the other tasks get their turn, and a
            # cancellation its chance, as they would at a wait.
            await anyio.lowlevel.checkpoint()
            return data
        waiter: asyncio.Future[bytes] = self._loop.create_future()
        self._waiter, self._wanted = waiter, most
        if not self._watched:
            self._loop.add_reader(self._sock.fileno(), self._ready)
            self._watched = True
        return await waiter

    def _ready(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            self._unwatch()  # no one asks: the next `receive` watches again
            return
        try:
            waiter.set_result(self._sock.recv(self._wanted))
        except BlockingIOError:
            self._waiter = waiter
        except OSError as exc:
            waiter.set_exception(exc)

    def _unwatch(self) -> None:
        if self._watched and self._sock.fileno() >= 0:
            self._loop.remove_reader(self._sock.fileno())
        self._watched = False

    async def send(self, data: bytes | bytearray | memoryview) -> None:
        """All of `data`, waiting whenever the socket's buffer is full (the peer not reading): nothing
        more is read for it meanwhile."""
        view = memoryview(data)
        while view:
            try:
                sent = self._sock.send(view)
            except BlockingIOError:
                await anyio.wait_writable(self._sock)
                continue
            view = view[sent:]

    def close(self) -> None:
        """Closed once, a wait for bytes woken (its reader removed before the fd number can be another's)."""
        if self._sock.fileno() >= 0:
            self._unwatch()
            waiter, self._waiter = self._waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_exception(anyio.ClosedResourceError())
            self._sock.close()


async def accept(listener: socket.socket) -> Socket:
    """The next connection on a non-blocking listening socket."""
    connection, _ = await asyncio.get_running_loop().sock_accept(listener)
    return Socket(connection)


async def connect(address: str, port: int) -> Socket:
    """A connection to an IP address (no name: the proxy resolves names itself, `runner.egress.resolver`)."""
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (address, port))
    except BaseException:
        sock.close()
        raise
    return Socket(sock)
