"""`bounded_protocol` without the MCP server: uvicorn in this process, held to it, with a small ASGI app whose
paths each take their time in one way, and raw sockets, so that a test controls every byte and pause on
both sides. (tests/e2e/transports/test_http_slow_clients.py holds the real server to the same bounds.)"""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
import uvicorn

from runner.transports.connections import BoundedH11Protocol, ConnectionBounds, bounded_protocol

pytestmark = [pytest.mark.timeout(60)]

# Long enough that a loaded machine never closes a connection a test still writes to on time.
WAIT = 15.0
REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
HIGH_WATER = 64 * 1024  # asyncio's transport: past it, pause_writing
T = TypeVar("T")


class _App:
    """Answers `ok`. /late reads its body only after `late` seconds (the server's own pause); /early answers
    before reading its body (as a 401 or a 413 does); /stream answers a dot a second for four seconds (as an
    SSE stream does for minutes); /hold answers once `release` is set; /big?N answers N bytes in one message
    (as a kept output's `resources/read`)."""

    def __init__(self) -> None:
        self.late = 2.5
        self.release = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        path = scope["path"]
        if path == "/late":
            await asyncio.sleep(self.late)
        if path == "/hold":
            while not self.release.is_set():
                await asyncio.sleep(0.01)
        if path != "/early":
            more = True
            while more:
                more = (await receive()).get("more_body", False)
        if path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for _ in range(4):
                await send({"type": "http.response.body", "body": b".", "more_body": True})
                await asyncio.sleep(1)
            await send({"type": "http.response.body", "body": b"ok\n"})
            return
        body = b"ok\n"
        if path == "/big":
            body = b"x" * (int(scope["query_string"]) - 3) + body
        length = str(len(body)).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", length)]})
        await send({"type": "http.response.body", "body": body})


@dataclass
class _Served:
    """The server of `_servers`: its loop's state read in its loop (`look`)."""

    server: uvicorn.Server
    loop: asyncio.AbstractEventLoop

    def look(self, what: Callable[[list[BoundedH11Protocol]], T]) -> T:
        """`what` of the server's open connections, called in its loop."""

        async def looked() -> T:
            return what([c for c in self.server.server_state.connections if isinstance(c, BoundedH11Protocol)])

        return asyncio.run_coroutine_threadsafe(looked(), self.loop).result(WAIT)


@contextmanager
def _server(
    client_seconds: float, max_connections: int = 64, app: _App | None = None
) -> Iterator[tuple[tuple[str, int], list[str]]]:
    """uvicorn on a loopback port in a thread: (its address, the lines its bounds logged)."""
    with _servers(client_seconds, max_connections, app) as (address, logged, _):
        yield address, logged


@contextmanager
def _servers(
    client_seconds: float, max_connections: int = 64, app: _App | None = None
) -> Iterator[tuple[tuple[str, int], list[str], _Served]]:
    """`_server`, and a way to look at its connections from the test."""
    app = app or _App()
    logged: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    logger = logging.getLogger(f"test-connections-{id(logged)}")
    logger.addHandler(Lines())
    logger.propagate = False
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    bounds = ConnectionBounds(client_seconds, max_connections, logger)
    config = uvicorn.Config(app, log_config=None, lifespan="off", timeout_keep_alive=120, http=bounded_protocol(bounds))
    server = uvicorn.Server(config)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=lambda: loop.run_until_complete(server.serve(sockets=[sock])))
    thread.start()
    try:
        deadline = time.monotonic() + WAIT
        while not server.started:
            assert thread.is_alive(), "uvicorn did not start"
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        yield sock.getsockname(), logged, _Served(server, loop)
    finally:
        app.release.set()
        server.should_exit = True
        server.force_exit = True
        thread.join(WAIT)
        loop.close()
        sock.close()


def _closed(sock: socket.socket, within: float) -> bool:
    """Whether the server closes the connection within `within` seconds (whatever it sent before)."""
    end = time.monotonic() + within
    while (left := end - time.monotonic()) > 0:
        if not select.select([sock], [], [], left)[0]:
            return False
        try:
            if sock.recv(65536) == b"":
                return True
        except ConnectionResetError:
            return True
    return False


def _answer(sock: socket.socket) -> bytes:
    """What the server sends up to its `ok`."""
    got = b""
    while b"ok\n" not in got:
        chunk = sock.recv(65536)
        assert chunk, got
        got += chunk
    return got


def test_a_body_the_app_reads_late_is_not_the_clients_pause() -> None:
    """A body past uvicorn's high-water mark stops its reading until the app reads: 2.5 s here, with a
    deadline of 1 s. (Found by a review: no test failed without that check.)"""
    with _server(client_seconds=1) as (address, _), socket.create_connection(address) as sock:
        body = b"x" * (1 << 20)
        sock.sendall(b"POST /late HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        assert _answer(sock).startswith(b"HTTP/1.1 200 ")


def test_a_client_waiting_for_its_100_continue_is_not_cut() -> None:
    """uvicorn sends the 100 when the app first reads (2.5 s here): the wait is the server's (a review)."""
    with _server(client_seconds=1) as (address, _), socket.create_connection(address) as sock:
        sock.sendall(b"POST /late HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
        assert select.select([sock], [], [], WAIT)[0]
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 "), "closed while the client waited for its 100 Continue"
        sock.sendall(b"abc")
        assert b"HTTP/1.1 200 " in interim + _answer(sock)


def test_a_connection_idle_after_an_early_answer_is_kept_alive_not_cut() -> None:
    """Answered before its body came, then the body came: idle between requests, the keep-alive's (120 s).
    Found by a review: closed after the deadline as 'headers came too late'."""
    with _server(client_seconds=1) as (address, logged), socket.create_connection(address) as sock:
        sock.sendall(b"POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
        assert _answer(sock).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"0123456789")
        assert not _closed(sock, 3), "an idle kept-alive connection was closed by the request deadline"
        sock.sendall(REQUEST)
        assert _answer(sock).startswith(b"HTTP/1.1 200 ")
    assert logged == []


def test_a_pipelined_request_whose_headers_stop_has_the_deadline_from_its_turn() -> None:
    """Found by a review: its turn armed uvicorn's keep-alive (120 s), not the deadline."""
    with _server(client_seconds=1) as (address, logged), socket.create_connection(address) as sock:
        sock.sendall(REQUEST + b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        assert _answer(sock).startswith(b"HTTP/1.1 200 ")
        assert _closed(sock, WAIT), "a pipelined request whose headers never finish was held"
    assert logged == ["HTTP connection closed: its request's headers came too late"]


def test_a_client_that_never_reads_its_answers_is_closed_and_frees_its_place() -> None:
    """Requests pipelined without end, no answer read: the answers stall, and the connection (its task waiting
    to write) would be held for ever, the bound of 1 taken. Found by a review."""
    with _server(client_seconds=1, max_connections=1) as (address, logged):
        with socket.socket() as hog:
            hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            hog.connect(address)
            hog.setblocking(False)
            started = time.monotonic()
            while time.monotonic() - started < WAIT:
                try:
                    hog.send(REQUEST * 64)
                except BlockingIOError:
                    if not select.select([], [hog], [], 0.1)[1] and _closed(hog, 0):
                        break
                except (ConnectionResetError, BrokenPipeError):
                    break
            else:
                pytest.fail("a client reading nothing was held")
        with socket.create_connection(address) as sock:
            sock.sendall(REQUEST)
            assert _answer(sock).startswith(b"HTTP/1.1 200 ")
    assert "HTTP connection closed: its client did not take its answer" in logged


def test_a_long_answer_and_a_slow_http_1_0_body_are_the_servers_turn_and_the_clients() -> None:
    with _server(client_seconds=1) as (address, logged):
        with socket.create_connection(address) as sock:
            sock.sendall(b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
            assert _answer(sock).startswith(b"HTTP/1.1 200 ")
        with socket.create_connection(address) as sock:
            sock.sendall(b"POST / HTTP/1.0\r\nContent-Length: 6\r\n\r\nab")
            for piece in (b"cd", b"ef"):
                assert not _closed(sock, 0.6)
                sock.sendall(piece)
            assert _answer(sock).startswith(b"HTTP/1.1 200 ")
            assert _closed(sock, WAIT)  # HTTP/1.0: closed after its answer
    assert logged == []


def _kept(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address)
    sock.sendall(REQUEST)
    assert _answer(sock).startswith(b"HTTP/1.1 200 ")
    return sock


def test_at_the_bound_the_connection_idle_the_longest_is_closed_not_the_first_made() -> None:
    """The first connection is used again after the others, so the longest idle is the second."""
    with _server(client_seconds=30, max_connections=3) as (address, logged), ExitStack() as stack:
        first, second, third = (stack.enter_context(_kept(address)) for _ in range(3))
        first.sendall(REQUEST)
        assert _answer(first).startswith(b"HTTP/1.1 200 ")
        stack.enter_context(_kept(address))
        assert _closed(second, WAIT), "the connection idle the longest was left open past the bound"
        for sock in (first, third):
            sock.sendall(REQUEST)
            assert _answer(sock).startswith(b"HTTP/1.1 200 ")
    assert logged == []


def test_at_the_bound_with_none_idle_the_one_waiting_longest_for_its_headers_makes_room() -> None:
    """Connections that send nothing do not lock everyone out: a new one that sends its request is served,
    the oldest silent one closed (a review: each new connection was refused while they lasted)."""
    with _server(client_seconds=30, max_connections=3) as (address, logged), ExitStack() as stack:
        silent = [stack.enter_context(socket.create_connection(address)) for _ in range(3)]
        time.sleep(0.2)  # not a wait for an event: the server must have taken all three in, in order
        served = stack.enter_context(_kept(address))
        assert _closed(silent[0], WAIT), "the connection waiting longest was left open past the bound"
        assert not _closed(silent[1], 0.2)
        served.sendall(REQUEST)
        assert _answer(served).startswith(b"HTTP/1.1 200 ")
    assert logged == ["HTTP connection closed: as many open as allowed, for a new one"]


def test_at_the_bound_with_every_connection_busy_a_new_one_is_refused_and_the_others_answered() -> None:
    app = _App()
    with _server(client_seconds=30, max_connections=2, app=app) as (address, logged), ExitStack() as stack:
        busy = [stack.enter_context(socket.create_connection(address)) for _ in range(2)]
        for sock in busy:
            sock.sendall(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        assert not _closed(busy[1], 0.5)  # both requests in: both connections busy
        refused = stack.enter_context(socket.create_connection(address))
        assert _closed(refused, WAIT), "a connection past the bound was held"
        app.release.set()
        for sock in busy:
            assert _answer(sock).startswith(b"HTTP/1.1 200 ")
    assert logged == ["HTTP connection refused: as many open as allowed, none idle"]


def test_a_large_answer_taken_slowly_but_steadily_is_served_to_its_end() -> None:
    """8 MiB in one message, read 64 KiB each 25 ms (some 3.5 s), with a deadline of 2 s: the client takes
    some in each period. Found by a review: the deadline ran from the pause to the resume, so the whole
    answer had to be taken within it."""
    with _server(client_seconds=2) as (address, logged), socket.create_connection(address) as sock:
        size = 8 << 20
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n".replace(b"/big", b"/big?%d" % size))
        got = 0
        while got < size:
            chunk = sock.recv(64 * 1024)
            assert chunk, f"cut after {got:,} bytes"
            got += len(chunk)
            time.sleep(0.025)
    assert logged == []


def _unread(address: tuple[str, int]) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(address)
    return sock


def _waits(served: _Served, count: int) -> list[int]:
    """The bytes waiting to be written on each of the `count` open connections, once they stop changing."""
    seen: list[int] = []
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        now = served.look(lambda held: sorted(c.transport.get_write_buffer_size() for c in held))
        if len(now) == count and now == seen:
            return now
        seen = now
        time.sleep(0.1)
    pytest.fail(f"{count} connections with what waits on them settled: {seen}")


def _small_tail(served: _Served, address: tuple[str, int], close: bool) -> socket.socket:
    """A client that reads nothing, whose answer's tail waiting in the server is under the high-water mark
    (so no pause_writing tells of it), found by asking for what the kernel took of a larger one, plus 40 KB."""
    with _unread(address) as probe:
        probe.sendall(b"GET /big?%d HTTP/1.1\r\nHost: x\r\n\r\n" % (4 << 20))
        [unsent] = _waits(served, 1)
        taken = (4 << 20) - unsent
    size = taken + 40_000
    for _ in range(5):
        _waits(served, 0)
        sock = _unread(address)
        header = b"Connection: close\r\n" if close else b""
        sock.sendall(b"GET /big?%d HTTP/1.1\r\nHost: x\r\n%s\r\n" % (size, header))
        [unsent] = _waits(served, 1)
        if 0 < unsent < HIGH_WATER:
            return sock
        sock.close()
        size += 40_000 - unsent
    pytest.fail("no answer left a small tail unsent")


def test_a_closing_connection_whose_client_reads_nothing_is_let_go_however_small_its_tail() -> None:
    """Found by a review: a `Connection: close` answer whose unsent tail stayed under the high-water mark
    waited on its close for ever, counted, and at the bound every new connection was refused. (A deadline of
    3 s: the test looks at the tail before the server lets it go.)"""
    with (
        _servers(client_seconds=3, max_connections=4) as (address, logged, served),
        _small_tail(served, address, close=True),
    ):
        assert served.look(lambda held: [c.transport.is_closing() for c in held]) in ([True], [])
        deadline = time.monotonic() + WAIT
        while served.look(len) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert served.look(len) == 0, "a closing connection whose client reads nothing was held"
    assert "HTTP connection closed: its client did not take its answer" in logged


def test_an_idle_connection_made_room_for_whose_answer_still_waits_is_closed_at_once() -> None:
    """Found by a review: closed, it waited on its client to take its answer's tail, no longer counted,
    so that connections held could grow past the bound."""
    with _servers(client_seconds=30, max_connections=2) as (address, logged, served), ExitStack() as stack:
        stack.enter_context(_small_tail(served, address, close=False))  # idle, its tail unsent
        stack.enter_context(_kept(address))
        stack.enter_context(_kept(address))  # the third: room made by closing the first
        deadline = time.monotonic() + WAIT
        while served.look(len) > 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert served.look(lambda held: (len(held), type(held[0]).held.count)) == (2, 2)
    assert logged == []
