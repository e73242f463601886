"""A kept network namespace, lent again only while nothing of an earlier run can be found in it. Stdlib only.

Loaded by the zygote (``zygote.py``) under ``-I -S``, like ``pidspaces.py``, never by the server.

A network namespace made for each run and torn down after it costs more CPU than anything else a run's
isolation does: about 1 ms of the machine's per run, half of it the kernel's teardown on its own threads
(docs/performance.md). So each kept PID namespace's init makes one network namespace with it, and its
runs are entered into that one. It is lent to the next run only if everything a run can read of it is as
it was when it was made (`Watch.as_made`): its sockets (``sockstat``'s count of every socket of any family
in the namespace, and its TCP time-waits; ``sockstat6``), the kernel's counters (``/proc/net/snmp``,
``snmp6``, ``netstat``, ``dev``) and its routes (``route``, ``ipv6_route``). A run that changed any of them
(a socket something still holds, a packet counted) leaves a namespace that is ended with its init instead;
the next run gets a new one. ``unix`` and ``netlink``, which list sockets, are not read: a socket they
list is one ``sockstat`` counts (also when passed to a process outside the namespace), an abstract name
lives only as long as its socket (a path's file only in the run's own tmpfs), and ``netlink`` walks every
netlink socket of the host to list a namespace's (its cost grows with the host's namespaces). Nothing
else in a network namespace is within a run's reach: it holds no capability, and its seccomp filter
refuses internet sockets.

`comparable` is pure over the bytes of one file (tested without processes); `Watch` holds the init's
open files, read again after each run (``lseek`` and ``read``: no path lookup).
"""

from __future__ import annotations

import os

# What a run can leave in its network namespace that a later run could read under /proc/net, and so what a
# later run must find as it was made; the sockets first, the likeliest trace (`Watch.as_made` stops at the
# first difference). A file the kernel does not have (no IPv6) is left out.
WATCHED = ("sockstat", "sockstat6", "snmp", "snmp6", "netstat", "dev", "route", "ipv6_route")
# sockstat's counts that are the host's, not the namespace's (orphaned TCP sockets, sockets allocated,
# pages of socket memory): they move with every other namespace's traffic and tell a run nothing of its own.
HOST_WIDE = frozenset((b"orphan", b"alloc", b"mem"))
# More than a namespace as made ever holds in one file (dev and the routes list every interface and
# route): read no further, and the namespace is not as made.
MAX_FILE_BYTES = 1 << 20


def comparable(name: str, text: bytes) -> bytes:
    """What of /proc/net/`name`'s `text` is its namespace's own: `text` itself, but for sockstat, whose
    host-wide counts (`HOST_WIDE`) are left out."""
    if name != "sockstat":
        return text
    lines = []
    for line in text.split(b"\n"):
        words = line.split(b" ")
        kept = words[:1]
        for at in range(1, len(words) - 1, 2):
            if words[at] not in HOST_WIDE:
                kept += words[at : at + 2]
        lines.append(b" ".join(kept))
    return b"\n".join(lines)


def read_whole(fd: int, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """The whole of an open /proc file, from its start (a seq_file makes it anew); None if over `limit`."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    size = 0
    while chunk := os.read(fd, 65536):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class Watch:
    """The /proc/net files of the caller's network namespace, open, and what they said when it was new.

    Made by the init right after it made the namespace, before any run is in it; the files stay bound to
    that namespace whatever the init does later (they were opened there), and need no privilege to read.
    """

    __slots__ = ("files", "made")

    def __init__(self) -> None:
        self.files: list[tuple[str, int]] = []
        for name in WATCHED:
            try:
                self.files.append((name, os.open(f"/proc/self/net/{name}", os.O_RDONLY | os.O_CLOEXEC)))
            except FileNotFoundError:
                continue
        self.made = [_said(name, fd) for name, fd in self.files]  # None for a file too large

    def as_made(self) -> bool:
        """True if nothing a run can read of the namespace differs from when it was made (read up to the
        first difference)."""
        try:
            return all(
                made is not None and _said(name, fd) == made
                for (name, fd), made in zip(self.files, self.made, strict=True)
            )
        except OSError:
            return False


def _said(name: str, fd: int) -> bytes | None:
    """What open /proc/net file `name` says now, as `comparable`; None if it is too large."""
    text = read_whole(fd)
    return None if text is None else comparable(name, text)


# <linux/sockios.h> and <net/if.h>: the loopback's flags, read and set by name.
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    """Bring this network namespace's loopback up (a new namespace's is down): where a run with egress
    finds the server's proxy. Needs CAP_NET_ADMIN over the namespace: the init that made it, before it
    drops its capabilities and before `Watch` reads the namespace as made."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(probe.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
