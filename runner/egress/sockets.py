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

from runner.fdio import AskedReads


class Socket:
    """A connected non-blocking TCP socket, read only when `receive` is awaited (`AskedReads`)."""

    __slots__ = ("_reads", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        with contextlib.suppress(OSError):  # as anyio did: a small write (a head, a 100) goes at once
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._reads = AskedReads(sock.fileno(), sock.recv, sock.close)

    async def receive(self, most: int) -> bytes:
        """What the socket holds, up to `most` bytes, once it holds some; b"" at its end. A reset raises
        its OSError."""
        return await self._reads.read(most)

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
        self._reads.close()


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


def this_host(address: str) -> bool:
    """Whether `address` is one of this host's own, in the server's network (a bind to it works):
    loopback, an interface's, the unspecified one."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True
