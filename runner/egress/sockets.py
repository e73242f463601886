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
import ipaddress
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
    """Whether `address` is one of this host's own, in the server's network namespace: loopback, the
    unspecified address, or one the kernel routes as local (`/proc/net/fib_trie`'s ``host LOCAL``, and
    `/proc/net/if_inet6`). Not by whether a bind to it works: with ``ip_nonlocal_bind`` every bind does
    (found by a second look: 8.8.8.8 was this host's)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback or ip.is_unspecified:
        return True
    networks = _local_networks()
    if networks is None:
        # No routing table to read (a sandboxed kernel's procfs may have none): a bind tells, where
        # ip_nonlocal_bind does not make every one work (found by a second look: else an interface's
        # address was not this host's).
        return _binds(str(ip))
    return any(ip in network for network in networks if network.version == ip.version)


def _binds(address: str) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def _local_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network] | None:
    """This host's own networks as the kernel routes them, or None where its routing table cannot be read."""
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    try:
        trie = open("/proc/net/fib_trie", encoding="ascii", errors="replace")  # noqa: SIM115
    except OSError:
        return None
    with trie:
        address = ""
        for line in trie:
            text = line.strip()
            if text.startswith("|-- "):
                address = text[4:]
            elif text.endswith(" host LOCAL") and address:
                with contextlib.suppress(ValueError):
                    networks.append(ipaddress.ip_network(f"{address}{text.split()[0]}", strict=False))
    with contextlib.suppress(OSError), open("/proc/net/if_inet6", encoding="ascii", errors="replace") as inet6:
        for line in inet6:
            with contextlib.suppress(ValueError, IndexError):
                networks.append(ipaddress.ip_network(ipaddress.IPv6Address(int(line.split()[0], 16))))
    return networks
