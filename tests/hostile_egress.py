"""The floods of a run's egress that tests/e2e/egress/test_hostile_runs.py counts against the proxy's
pace, and bench/harness/egress.py times (the server's CPU they cost, which is the machine's), with the
listed hosts they push against: real sockets on a loopback address other than the proxy's. Stdlib only:
`make bench` has no test tools installed."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator

UPSTREAM_HOST = "127.0.0.2"  # where every egress test's listed hosts listen (tests.egress has it from here)
FLOODS = ("refused", "kept_alive", "trickled", "many_lines", "folded_lines")  # FLOOD's kinds


@contextlib.contextmanager
def upstream(each: Callable[[socket.socket, threading.Event], None]) -> Iterator[int]:
    """A listed host that serves each connection it accepts with `each` (in a thread of its own, told by
    the event when the test is done): its port."""
    stop = threading.Event()
    listener = socket.socket()
    listener.bind((UPSTREAM_HOST, 0))
    listener.listen(64)
    listener.settimeout(0.2)

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                threading.Thread(target=each, args=(listener.accept()[0], stop), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(10)
        listener.close()


def sink(taken: list[int] | None = None) -> contextlib.AbstractContextManager[int]:
    """A listed host that reads whatever it is sent and drops it; the b"z" bytes of each read are added
    to `taken` (CHUNKS's body is made of them, which no head or chunk size holds: what the proxy sent on)."""

    def drain(connection: socket.socket, stop: threading.Event) -> None:
        with connection, contextlib.suppress(OSError):
            connection.settimeout(0.2)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    if not (got := connection.recv(1 << 16)):
                        return
                    if taken is not None:
                        taken.append(got.count(b"z"))

    return upstream(drain)


def dribbles() -> contextlib.AbstractContextManager[int]:
    """A listed host that writes each connection a byte at a time, as fast as it is taken, from the
    moment it is accepted (a host that speaks first, through a tunnel)."""

    def dribble(connection: socket.socket, stop: threading.Event) -> None:
        with connection, contextlib.suppress(OSError):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection.settimeout(0.2)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    connection.send(b"x")

    return upstream(dribble)


# Four tunnels (as HTTPS goes) to the listed host on {port}, each told 200 by the proxy: `conns`.
TUNNELS = """
import selectors, socket, time
conns = []
for _ in range(4):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\n\\r\\n")
    answer = b""
    while not answer.endswith(b"\\r\\n\\r\\n"):
        answer += s.recv(1)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    conns.append(s)
"""

# Four tunnels to a host that writes a byte at a time, each read as fast as it comes for 3 s: what came.
DRIBBLED = (
    TUNNELS
    + """
sel = selectors.DefaultSelector()
for s in conns:
    sel.register(s, selectors.EVENT_READ)
got, end = 0, time.monotonic() + 3
while time.monotonic() < end:
    for key, _ in sel.select(0.1):
        got += len(key.fileobj.recv(1 << 16))
print(got)
"""
)


# Four connections, each a chunked body of 1-byte chunks, sent as fast as the proxy takes it for `seconds`.
CHUNKS = """
import socket, time
head = b"POST http://{host}:{port}/up HTTP/1.1\\r\\nHost: {host}:{port}\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"
block = b"1\\r\\nz\\r\\n" * 20000
sent, end, conns = 0, time.monotonic() + {seconds}, []
for _ in range(4):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.settimeout(0.1)
    s.sendall(head)
    conns.append(s)
while time.monotonic() < end:
    for s in conns:
        try:
            sent += s.send(block)
        except OSError:
            pass
print(sent // 6)
"""


# Four tunnels to a host that drains them, each written a byte at a time for 3 s: what was sent.
TRICKLE = (
    TUNNELS
    + """
for s in conns:
    s.settimeout(0.1)
sent, end = 0, time.monotonic() + 3
while time.monotonic() < end:
    for s in conns:
        try:
            sent += s.send(b"x")
        except OSError:
            pass
print(sent)
"""
)


def answers(answered: list[int] | None = None) -> contextlib.AbstractContextManager[int]:
    """A listed host that answers each request's head with a 2-byte body, and closes (as each request
    sent on by the proxy asks); a 1 added to `answered` for each."""

    def answer(connection: socket.socket, stop: threading.Event) -> None:
        with connection, contextlib.suppress(OSError):
            connection.settimeout(0.2)
            head = b""
            while not stop.is_set() and b"\r\n\r\n" not in head:
                with contextlib.suppress(TimeoutError):
                    if not (got := connection.recv(1 << 16)):
                        return
                    head += got
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            if answered is not None:
                answered.append(1)

    return upstream(answer)


# Eight processes of one run, each for 3 s: what the proxy costs however little each ask carries. It
# prints how many asks were done (an answer read: a 403, or the listed host's "ok"; a trickled head never ends).
FLOOD = """
import os, socket, time
end = time.monotonic() + 3
listed = b"GET http://{host}:{port}/f HTTP/1.1\\r\\nHost: {host}:{port}\\r\\n\\r\\n"
unlisted = b"GET http://{host}:{closed}/f HTTP/1.1\\r\\nHost: {host}:{closed}\\r\\n\\r\\n"
def refused():  # a connection, a host not listed, its 403 read
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(unlisted)
    s.recv(200)
    s.close()
def kept_alive(s=[]):  # a request to the listed host on one kept-alive connection, its answer read
    if not s:
        s.append(socket.create_connection(("127.0.0.1", 3128), timeout=5))
    s[0].sendall(listed)
    got = b""
    while not got.endswith(b"ok"):
        got += s[0].recv(1000)
many = unlisted[:-2] + b"a:\\r\\n" * 4000 + b"\\r\\n"
folded = unlisted[:-2] + b"a: x\\r\\n" + b" y\\r\\n" * 4000 + b"\\r\\n"
def many_lines(head=many):  # a head of 4,000 empty header lines, a host not listed, its 403 read
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(head)
    s.recv(200)
    s.close()
def folded_lines():  # one header folded over 4,000 lines: h11 parses each
    many_lines(folded)
def trickled():  # a head that never ends, a byte a write
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with s:
        for byte in listed[:-2] + b"X: " + b"a" * 15000:
            s.send(bytes((byte,)))
            if time.monotonic() > end:
                return
counts, children = os.pipe(), []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        done = 0
        while time.monotonic() < end:
            try:
                {flood}()
                done += 1
            except OSError:
                pass
        os.write(counts[1], b"%d\\n" % done)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
os.close(counts[1])
print(sum(int(line) for line in os.read(counts[0], 1000).split()))
"""
