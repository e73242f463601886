"""Slow and idle clients over HTTP: a request's headers have a deadline, its body's pauses too, and the
connections one server process holds are bounded (`runner.transports.connections`). Raw sockets against a
real server, so that a test controls every byte and every pause."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import h11
import httpx2
import pytest

from tests.http_server import HttpServer, answer_status, http_server

pytestmark = [pytest.mark.timeout(120)]

# Long enough that a loaded machine never closes a connection a test still writes to on time.
WAIT = 15.0


def _connect(server: HttpServer) -> socket.socket:
    url = httpx2.URL(server.url)
    return socket.create_connection((url.host, url.port))


def _get_healthz(sock: socket.socket, conn: h11.Connection, server: HttpServer) -> int:
    """GET /healthz on the connection, its whole answer read; the answer's status."""
    host = httpx2.URL(server.url).netloc.decode()
    sock.sendall(conn.send(h11.Request(method="GET", target="/healthz", headers=[("host", host)])) or b"")
    sock.sendall(conn.send(h11.EndOfMessage()) or b"")
    return answer_status(sock, conn)


def _closed(sock: socket.socket, within: float) -> bool:
    """Whether the server closes the connection within `within` seconds (without answering)."""
    readable, _, _ = select.select([sock], [], [], within)
    if not readable:
        return False
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


@contextmanager
def _served(work_dir: Path, tmp_path: Path, **env: str) -> Iterator[HttpServer]:
    with http_server(work_dir, tmp_path / "log", **env) as server:
        yield server
        assert httpx2.get(server.base + "/healthz").status_code == 200, "the server stopped serving"
        assert server.stop() == 0
        logged = server.log.read_text()
        assert " ERROR " not in logged, logged
        assert "Traceback" not in logged, logged


def test_a_connection_that_sends_nothing_is_closed_after_the_read_deadline_and_the_server_serves_on(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    with _served(work_dir, tmp_path, RUNNER_HTTP_CLIENT_SECONDS="1") as server, _connect(server) as sock:
        assert _closed(sock, WAIT), "a connection with no request was held past its deadline"
    assert "its request's headers came too late" in server.log.read_text()


def test_headers_trickling_in_do_not_extend_their_deadline(work_dir: Path, tmp_path: Path, left_nothing: None) -> None:
    """A slowloris client: a byte of its headers every 0.2 s would hold the connection for ever if each byte
    counted as progress."""
    with _served(work_dir, tmp_path, RUNNER_HTTP_CLIENT_SECONDS="2") as server, _connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        started = time.monotonic()
        while time.monotonic() - started < 6 * WAIT:
            if _closed(sock, 0.2):
                break
            try:
                sock.sendall(b"a")
            except (BrokenPipeError, ConnectionResetError):
                break
        else:
            pytest.fail("the trickle held the connection")
        assert time.monotonic() - started < WAIT


def test_a_body_that_stops_halfway_is_closed_and_the_server_serves_on(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "x" * 1000}}).encode()
    with _served(work_dir, tmp_path, RUNNER_HTTP_CLIENT_SECONDS="1") as server, _connect(server) as sock:
        url = httpx2.URL(server.url)
        head = (
            f"POST {url.raw_path.decode()} HTTP/1.1\r\nHost: {url.netloc.decode()}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"MCP-Protocol-Version: 2025-06-18\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body[:100])
        assert _closed(sock, WAIT), "a body that stopped held its connection"
    logged = server.log.read_text()
    assert "its request's body paused too long" in logged
    # The SDK's read of the body ended: its error line with a traceback is one line at INFO.
    assert "INFO    request_id=- HTTP request ended: its client left before its body was all in" in logged


def test_a_pipelined_request_whose_body_stops_is_closed_too(work_dir: Path, tmp_path: Path, left_nothing: None) -> None:
    """Its headers and part of its body came behind a whole request, so no read of the socket begins it:
    the deadline starts when its turn does."""
    with _served(work_dir, tmp_path, RUNNER_HTTP_CLIENT_SECONDS="1") as server, _connect(server) as sock:
        host = httpx2.URL(server.url).netloc.decode()
        sock.sendall(
            f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n"
            f"POST /healthz HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100\r\n\r\n0123456789".encode()
        )
        answered, closed = b"", False
        while not closed and select.select([sock], [], [], WAIT)[0]:
            chunk = sock.recv(65536)
            answered, closed = answered + chunk, not chunk
        assert answered.startswith(b"HTTP/1.1 200 "), answered
        assert closed, "a pipelined body that stopped held its connection"
    # Answered before its body came (a POST to /healthz): the rest of it is awaited only so long.
    assert "its request's body was not all in within its deadline after its answer" in server.log.read_text()


def test_a_body_that_keeps_coming_is_read_whole_however_long_it_takes_in_all(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """The body's deadline is on each pause, not on the whole: ten pieces 0.4 s apart (4 s in all) with a
    deadline of 2 s are answered."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "x" * 1000}}).encode()
    with _served(work_dir, tmp_path, RUNNER_HTTP_CLIENT_SECONDS="2") as server, _connect(server) as sock:
        url = httpx2.URL(server.url)
        conn = h11.Connection(h11.CLIENT)
        headers = [
            ("host", url.netloc.decode()),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2025-06-18"),
            ("content-length", str(len(body))),
        ]
        sock.sendall(conn.send(h11.Request(method="POST", target=url.raw_path, headers=headers)) or b"")
        piece = len(body) // 10 + 1
        for at in range(0, len(body), piece):
            assert not _closed(sock, 0.4), "a body still coming was cut"
            sock.sendall(conn.send(h11.Data(data=body[at : at + piece])) or b"")
        sock.sendall(conn.send(h11.EndOfMessage()) or b"")
        while not isinstance(event := conn.next_event(), h11.Response):
            assert event is h11.NEED_DATA, event
            conn.receive_data(sock.recv(65536))
        assert event.status_code == 200


def _tokens(tmp_path: Path) -> str:
    path = tmp_path / "tokens"
    path.write_text("alice:alice-token-0123456789abcdefxyz\n")
    path.chmod(0o600)
    return str(path)


def _answered_body_still_coming(sock: socket.socket, server: HttpServer) -> bytes:
    """POST a body of 1 MB to the MCP endpoint with no token, 100 bytes of it: the 401 that answers it."""
    url = httpx2.URL(server.url)
    head = (
        f"POST {url.raw_path.decode()} HTTP/1.1\r\nHost: {url.netloc.decode()}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        "Content-Length: 1000000\r\n\r\n"
    )
    sock.sendall(head.encode() + b"x" * 100)
    answered = b""
    while b"\r\n\r\n" not in answered and select.select([sock], [], [], WAIT)[0]:
        answered += sock.recv(65536)
    return answered


def test_an_answered_request_whose_body_keeps_trickling_in_is_closed_at_its_deadline(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """Found by a review: the rest of a body answered already (a 401) was read on, each byte starting its
    pause again; 512 connections sending one byte every 20 s, with no token, held every slot."""
    tokens = _tokens(tmp_path)
    with (
        _served(work_dir, tmp_path, RUNNER_HTTP_CLIENT_SECONDS="2", RUNNER_AUTH_TOKENS_FILE=tokens) as server,
        _connect(server) as sock,
    ):
        assert _answered_body_still_coming(sock, server).startswith(b"HTTP/1.1 401 ")
        started, closed = time.monotonic(), False
        while not closed and time.monotonic() - started < 4 * WAIT:
            closed = _closed(sock, 0.2)
            if not closed:
                try:
                    sock.sendall(b"x")
                except OSError:
                    closed = True
        assert closed, "a body trickling in after its answer held its connection"
    assert "its request's body was not all in within its deadline after its answer" in server.log.read_text()


def test_at_the_connection_bound_an_answered_connection_whose_body_still_comes_makes_room(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    tokens = _tokens(tmp_path)
    with (
        _served(work_dir, tmp_path, RUNNER_HTTP_MAX_CONNECTIONS="2", RUNNER_AUTH_TOKENS_FILE=tokens) as server,
        ExitStack() as stack,
    ):
        lingering = [stack.enter_context(_connect(server)) for _ in range(2)]
        for sock in lingering:
            assert _answered_body_still_coming(sock, server).startswith(b"HTTP/1.1 401 ")
        newest = stack.enter_context(_connect(server))
        assert _get_healthz(newest, h11.Connection(h11.CLIENT), server) == 200
        left, deadline = lingering[0], time.monotonic() + WAIT
        while not (closed := _closed(left, 0.1)) and time.monotonic() < deadline:
            pass  # the rest of its 401, read
        assert closed, "the connection lingering longest was left open past the bound"


def test_a_kept_alive_connection_idle_past_the_read_deadline_is_still_served(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """Idle between requests is the keep-alive's to end (120 s), not the request's deadline."""
    with _served(work_dir, tmp_path, RUNNER_HTTP_CLIENT_SECONDS="1") as server, _connect(server) as sock:
        conn = h11.Connection(h11.CLIENT)
        assert _get_healthz(sock, conn, server) == 200
        assert not _closed(sock, 3), "an idle kept-alive connection was closed by the request deadline"
        assert _get_healthz(sock, conn, server) == 200


def test_at_the_connection_bound_a_new_connection_closes_the_one_idle_the_longest(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    with _served(work_dir, tmp_path, RUNNER_HTTP_MAX_CONNECTIONS="3") as server, ExitStack() as stack:
        kept = []
        for _ in range(3):
            sock = stack.enter_context(_connect(server))
            conn = h11.Connection(h11.CLIENT)
            assert _get_healthz(sock, conn, server) == 200
            kept.append((sock, conn))
        newest = stack.enter_context(_connect(server))
        assert _get_healthz(newest, h11.Connection(h11.CLIENT), server) == 200
        assert _closed(kept[0][0], WAIT), "the connection idle the longest was left open past the bound"
        for sock, conn in kept[1:]:
            assert _get_healthz(sock, conn, server) == 200


def test_at_the_connection_bound_with_none_idle_the_one_waiting_longest_for_its_headers_makes_room(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """Connections that send nothing (or their headers slowly) do not lock out a client that sends its
    request at once (tests/unit/transports/test_connections.py has the refusal when every one is busy)."""
    with _served(work_dir, tmp_path, RUNNER_HTTP_MAX_CONNECTIONS="2") as server, ExitStack() as stack:
        started = []
        for _ in range(2):
            sock = stack.enter_context(_connect(server))
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # a request begun, its headers not all in
            started.append(sock)
            assert not _closed(sock, 0.3)  # taken in, in this order
        newest = stack.enter_context(_connect(server))
        assert _get_healthz(newest, h11.Connection(h11.CLIENT), server) == 200
        assert _closed(started[0], WAIT), "the connection waiting longest was left open past the bound"
        host = httpx2.URL(server.url).netloc.decode()
        started[1].sendall(f"Host: {host}\r\n\r\n".encode())  # the other begun request is served
        answer = started[1].recv(65536)
        assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert "HTTP connection closed: as many open as allowed, for a new one" in server.log.read_text()
