"""The egress proxy over real sockets, without a run: a listener like the one a run hands over, served by
`RunProxy`, real upstream servers on 127.0.0.2 (HTTP, and HTTPS with a CA the test makes), and urllib
going through the proxy as a run's code does. What is allowed gets through and is counted; everything
else is refused with its reason, and nothing is left open."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.config import EgressConfig
from runner.egress.proxy import MAX_CONNECTIONS, EgressProxy, RunProxy
from runner.egress.resolver import LOOKUPS_PER_RUN
from runner.outcome import NetworkUse
from tests.egress import BIG, UPSTREAM_HOST, Authority, fetch, make_authority, upstream

pytestmark = pytest.mark.anyio


class Counted:
    def __init__(self) -> None:
        self.refused: list[str] = []
        self.bytes: dict[str, int] = {"in": 0, "out": 0}

    def on_refused(self, kind: str) -> None:
        self.refused.append(kind)

    def on_bytes(self, direction: str, amount: int) -> None:
        self.bytes[direction] += amount


class Served:
    """A run's proxy serving a listener on 127.0.0.1 in a task group: `url` is what HTTP_PROXY would say."""

    def __init__(self, run: RunProxy, port: int, counted: Counted) -> None:
        self.run = run
        self.url = f"http://127.0.0.1:{port}"
        self.port = port
        self.counted = counted

    async def fetch(self, url: str, ca_file: Path | None = None, data: bytes | None = None) -> tuple[int, bytes]:
        return await anyio.to_thread.run_sync(fetch, self.url, url, ca_file, data)

    def reached(self, allowed: bool = True) -> list[NetworkUse]:
        return [use for use in self.run.reached() if use.allowed is allowed]


@pytest.fixture
def authority(tmp_path: Path) -> Authority:
    return make_authority(tmp_path)


@pytest.fixture
async def serve(caplog: pytest.LogCaptureFixture) -> AsyncIterator[Callable[..., Any]]:
    caplog.set_level(logging.INFO, logger="runner")
    async with anyio.create_task_group() as tg:

        async def start(*allow: str, max_mb: int = 100) -> Served:
            counted = Counted()
            proxy = EgressProxy(
                EgressConfig(egress_allow=allow, max_egress_mb=max_mb),
                logging.getLogger("runner"),
                counted.on_refused,
                counted.on_bytes,
            )
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.bind(("127.0.0.1", 0))
            listener.listen(64)
            port = listener.getsockname()[1]
            run = proxy.for_run("req-egress")
            tg.start_soon(run.serve, listener)
            return Served(run, port, counted)

        yield start
        tg.cancel_scope.cancel()


async def test_an_allowed_address_is_reached_over_http_and_counted_both_ways(serve: Any) -> None:
    with upstream() as port:
        served = await serve(f"{UPSTREAM_HOST}:{port}")
        status, body = await served.fetch(f"http://{UPSTREAM_HOST}:{port}/hello?x=1")
    assert (status, body) == (200, f"hello from /hello?x=1 via {UPSTREAM_HOST}:{port}".encode())
    [use] = served.reached()
    assert (use.host, use.port, use.allowed) == (UPSTREAM_HOST, port, True)
    assert use.bytes_in > len(body)
    assert use.bytes_out > 0
    assert served.counted.bytes == {"in": use.bytes_in, "out": use.bytes_out}


async def test_an_allowed_address_is_reached_over_https_through_connect_unterminated(
    serve: Any, authority: Authority
) -> None:
    with upstream(authority) as port:
        served = await serve(f"{UPSTREAM_HOST}:{port}")
        status, body = await served.fetch(f"https://{UPSTREAM_HOST}:{port}/secure", authority.ca_file)
    assert (status, body) == (200, f"hello from /secure via {UPSTREAM_HOST}:{port}".encode())
    [use] = served.reached()
    # The TLS handshake went through the tunnel: the run's bytes are the TLS records, more than the body.
    assert use.bytes_in > len(body) + 500


async def test_request_bodies_go_through_whole_with_a_length_and_chunked(serve: Any) -> None:
    with upstream() as port:
        served = await serve(f"{UPSTREAM_HOST}:{port}")
        assert await served.fetch(f"http://{UPSTREAM_HOST}:{port}/p", data=b"abc" * 1000) == (
            200,
            b"echo " + b"abc" * 1000,
        )
        chunked = await anyio.to_thread.run_sync(_chunked_post, served.port, port)
    assert chunked.endswith(b"echo hello, chunked")


def _chunked_post(proxy_port: int, port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=10) as sock:
        sock.sendall(
            f"POST http://{UPSTREAM_HOST}:{port}/c HTTP/1.1\r\nHost: {UPSTREAM_HOST}:{port}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n7\r\nhello, \r\n7\r\nchunked\r\n0\r\n\r\n".encode()
        )
        return _read_response(sock)


def _read_response(sock: socket.socket, buffer: bytearray | None = None) -> bytes:
    """One response (its head, and its body by Content-Length); what came after it stays in `buffer` for
    the next call: two responses can arrive in one recv."""
    data = buffer if buffer is not None else bytearray()
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or b"\r\n\r\n"
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    length = len(body)
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
            while len(body) < length:
                body += sock.recv(65536) or b"!" * 10**9
    data[:] = body[length:]
    return head + b"\r\n\r\n" + body[:length]


async def test_a_name_not_on_the_list_is_refused_with_a_403_naming_it_and_the_variable(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    served = await serve("pypi.org")
    status, body = await served.fetch("http://example.com/x")
    assert status == 403
    assert body == b"python-runner-mcp: example.com:80 is not on RUNNER_EGRESS_ALLOW\n"
    assert served.reached(allowed=False) == [NetworkUse("example.com", 80, 0, 0, False)]
    assert served.counted.refused == ["not_listed"]
    [line] = [r for r in caplog.records if r.getMessage() == "egress refused"]
    assert line.levelno == logging.WARNING
    assert line.request_id == "req-egress"  # type: ignore[attr-defined]


async def test_a_connect_to_a_name_not_on_the_list_is_refused_before_any_byte_leaves(serve: Any) -> None:
    served = await serve("pypi.org")
    status, said = await served.fetch("https://example.com/")
    assert status == 0
    assert b"403" in said
    assert served.reached(allowed=False) == [NetworkUse("example.com", 443, 0, 0, False)]


async def test_a_port_not_on_the_list_is_refused(serve: Any) -> None:
    with upstream() as port:
        served = await serve(f"{UPSTREAM_HOST}:{port + 1}")
        status, body = await served.fetch(f"http://{UPSTREAM_HOST}:{port}/")
    assert status == 403
    assert f"{UPSTREAM_HOST}:{port} is not on RUNNER_EGRESS_ALLOW".encode() in body


async def test_a_wildcard_allows_subdomains_and_not_the_bare_domain(serve: Any) -> None:
    served = await serve("*.localhost:*")
    status, body = await served.fetch("http://localhost:9/")
    assert status == 403
    assert b"localhost:9 is not on RUNNER_EGRESS_ALLOW" in body


async def test_a_listed_name_that_resolves_to_loopback_is_refused_unless_its_address_is_listed(serve: Any) -> None:
    with upstream() as port:
        served = await serve("localhost:*")
        status, body = await served.fetch(f"http://localhost:{port}/")
        assert status == 403
        assert b"localhost resolves to a loopback address" in body
        assert b"which RUNNER_EGRESS_ALLOW does not list" in body
        assert served.counted.refused == ["address"]
        assert served.reached() == []
        assert served.reached(allowed=False)[0].host == "localhost"
    # Its address listed as well, the same name is reached there.
    with upstream(host="127.0.0.1") as port:
        again = await serve("localhost:*", "127.0.0.1:*")
        assert await again.fetch(f"http://localhost:{port}/") == (200, f"hello from / via localhost:{port}".encode())


async def test_a_host_header_other_than_the_urls_is_a_400(serve: Any) -> None:
    with upstream() as port:
        served = await serve(f"{UPSTREAM_HOST}:{port}")
        answer = await anyio.to_thread.run_sync(
            _raw, served.port, f"GET http://{UPSTREAM_HOST}:{port}/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n"
        )
    assert answer.startswith(b"HTTP/1.1 400")
    assert b"the Host header does not name the URL's host and port" in answer


def _raw(proxy_port: int, request: str) -> bytes:
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=10) as sock:
        sock.sendall(request.encode())
        return _read_response(sock)


async def test_the_byte_budget_closes_the_runs_connections_and_each_new_one_at_once(serve: Any) -> None:
    with upstream() as port:
        served = await serve(f"{UPSTREAM_HOST}:{port}", max_mb=1)
        status, body = await served.fetch(f"http://{UPSTREAM_HOST}:{port}/big")
        assert status == -1
        assert len(body) < BIG
        [use] = served.reached()
        assert 1024 * 1024 < use.bytes_in < 1024 * 1024 + 200_000
        assert "budget" in served.counted.refused
        # Past it, a new connection is closed at once, unanswered.
        late = await anyio.connect_tcp("127.0.0.1", served.port)
        async with late:
            await late.send(
                f"GET http://{UPSTREAM_HOST}:{port}/a HTTP/1.1\r\nHost: {UPSTREAM_HOST}:{port}\r\n\r\n".encode()
            )
            with anyio.fail_after(10), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                await late.receive()


async def test_connections_past_the_limit_at_once_get_a_503(serve: Any) -> None:
    served = await serve("pypi.org")
    held = [await anyio.connect_tcp("127.0.0.1", served.port) for _ in range(MAX_CONNECTIONS)]
    try:
        with anyio.fail_after(10):
            while True:  # the proxy has accepted them all once one more is answered 503
                extra = await anyio.connect_tcp("127.0.0.1", served.port)
                answer = await extra.receive()
                await extra.aclose()
                if answer.startswith(b"HTTP/1.1 503"):
                    break
        assert "busy" in served.counted.refused
    finally:
        for stream in held:
            await stream.aclose()


async def test_a_connection_past_the_limit_waits_for_one_to_end_and_is_then_served(serve: Any) -> None:
    # Found by a second look: 16 threads each fetching one URL after another were told 503, a thread's last
    # connection closed on its side but not yet ended in the proxy.
    with upstream() as port:
        served = await serve(f"{UPSTREAM_HOST}:{port}")
        held = [await anyio.connect_tcp("127.0.0.1", served.port) for _ in range(MAX_CONNECTIONS)]
        try:
            with anyio.fail_after(10):
                while served.run._open < MAX_CONNECTIONS:
                    await anyio.sleep(0.01)
            fetched = anyio.Event()
            got: list[tuple[int, bytes]] = []

            async def fetch() -> None:
                got.append(await served.fetch(f"http://{UPSTREAM_HOST}:{port}/late"))
                fetched.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(fetch)
                with anyio.fail_after(10):
                    while not served.run._queued:
                        await anyio.sleep(0.01)
                await held.pop().aclose()  # one ends: the one in line takes its place
                with anyio.fail_after(10):
                    await fetched.wait()
            assert got == [(200, f"hello from /late via {UPSTREAM_HOST}:{port}".encode())]
            assert "busy" not in served.counted.refused
        finally:
            for stream in held:
                await stream.aclose()


async def test_a_tunnel_open_when_the_run_ends_is_closed_with_it(authority: Authority) -> None:
    proxy = EgressProxy(
        EgressConfig(egress_allow=(f"{UPSTREAM_HOST}:*",), max_egress_mb=100), logging.getLogger("runner")
    )
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    with upstream(authority) as port:
        async with anyio.create_task_group() as run:
            run.start_soon(proxy.for_run("req-ending").serve, listener)
            client = await anyio.connect_tcp(*listener.getsockname())
            async with client:
                await client.send(f"CONNECT {UPSTREAM_HOST}:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                assert (await client.receive()).startswith(b"HTTP/1.1 200")
                run.cancel_scope.cancel()  # the run ends
                await anyio.sleep(0)
        with anyio.fail_after(10), pytest.raises((anyio.EndOfStream, anyio.ClosedResourceError, OSError)):
            await client.receive()
    assert listener.fileno() == -1  # taken over, and closed


async def test_two_runs_count_apart(serve: Any) -> None:
    with upstream() as port:
        one = await serve(f"{UPSTREAM_HOST}:{port}")
        two = await serve(f"{UPSTREAM_HOST}:{port}")
        await one.fetch(f"http://{UPSTREAM_HOST}:{port}/a")
        await one.fetch(f"http://{UPSTREAM_HOST}:{port}/b")
        await two.fetch(f"http://{UPSTREAM_HOST}:{port}/c")
    [first], [second] = one.reached(), two.reached()
    assert first.bytes_in > second.bytes_in > 0


async def test_a_run_closing_mid_answer_ends_that_connection_alone(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with upstream() as port:
        served = await serve(f"{UPSTREAM_HOST}:{port}")
        for _ in range(3):  # each cut short: the proxy's task group and its other connections go on
            client = await anyio.connect_tcp("127.0.0.1", served.port)
            await client.send(
                f"GET http://{UPSTREAM_HOST}:{port}/big HTTP/1.1\r\nHost: {UPSTREAM_HOST}:{port}\r\n\r\n".encode()
            )
            await client.receive(1000)
            await client.aclose()
        assert await served.fetch(f"http://{UPSTREAM_HOST}:{port}/after") == (
            200,
            f"hello from /after via {UPSTREAM_HOST}:{port}".encode(),
        )
    assert not [r for r in caplog.records if r.getMessage() == "egress connection failed"]


async def test_a_request_h11_refuses_is_answered_400_and_counted(serve: Any) -> None:
    served = await serve("pypi.org")
    answer = await anyio.to_thread.run_sync(_raw, served.port, "GET http://pypi.org/ HTTP/1.1\r\n\r\n")  # no Host
    assert answer.startswith(b"HTTP/1.1 400 Bad Request")
    assert b"not an HTTP request a proxy takes" in answer
    assert served.counted.refused == ["malformed"]


async def test_a_body_h11_refuses_after_its_head_went_on_is_answered_400(serve: Any) -> None:
    # Found by a review: the connection closed unanswered (a bad chunk extension), though a request h11
    # cannot read is a 400.
    with upstream() as port:
        served = await serve(f"{UPSTREAM_HOST}:{port}")
        request = (
            f"POST http://{UPSTREAM_HOST}:{port}/p HTTP/1.1\r\nHost: {UPSTREAM_HOST}:{port}\r\n"
            'Transfer-Encoding: chunked\r\n\r\n5;ext="a\r\nb"\r\nhello\r\n0\r\n\r\n'
        )
        answer = await anyio.to_thread.run_sync(_raw, served.port, request)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request"), answer
    assert b"the request's body is not HTTP a proxy takes" in answer
    assert served.counted.refused == ["malformed"]
    assert [(use.host, use.allowed) for use in served.run.reached()] == [(UPSTREAM_HOST, True)], "listed once"


async def test_a_head_not_whole_in_time_is_answered_408(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("runner.egress.relay.HEAD_SECONDS", 0.5)
    served = await serve("pypi.org")
    answer = await anyio.to_thread.run_sync(_raw, served.port, "GET http://pypi.org/ HTTP/1.1\r\nHost: pyp")
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout: no whole request within 0.5 s"), answer
    assert served.counted.refused == ["malformed"]


async def test_past_20_refusals_a_run_s_are_counted_not_logged(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    served = await serve("pypi.org")
    request = "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n"
    for _ in range(25):
        answer = await anyio.to_thread.run_sync(_raw, served.port, request)
        assert answer.startswith(b"HTTP/1.1 403")
    logged = [record.getMessage() for record in caplog.records]
    assert logged.count("egress refused") == 20
    assert logged.count("egress refusals: no more logged for this run") == 1
    assert served.counted.refused == ["not_listed"] * 25


async def test_connection_may_not_name_the_host_or_the_framing_away(serve: Any) -> None:
    with upstream() as port:
        served = await serve(f"{UPSTREAM_HOST}:{port}")
        request = (
            f"POST http://{UPSTREAM_HOST}:{port}/p HTTP/1.1\r\nHost: {UPSTREAM_HOST}:{port}\r\n"
            "Connection: host, content-length\r\nContent-Length: 5\r\n\r\nhello"
        )
        answer = await anyio.to_thread.run_sync(_raw, served.port, request)
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"echo hello")


async def test_expect_100_continue_is_answered_by_the_proxy(serve: Any) -> None:
    with upstream() as port:
        served = await serve(f"{UPSTREAM_HOST}:{port}")

        def post() -> tuple[bytes, bytes]:
            with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
                sock.sendall(
                    f"POST http://{UPSTREAM_HOST}:{port}/e HTTP/1.1\r\nHost: {UPSTREAM_HOST}:{port}\r\n"
                    "Expect: 100-continue\r\nContent-Length: 4\r\n\r\n".encode()
                )
                interim = sock.recv(100)  # within the 10 s timeout, or the test fails
                sock.sendall(b"body")
                return interim, _read_response(sock)

        interim, answer = await anyio.to_thread.run_sync(post)
    assert interim.startswith(b"HTTP/1.1 100")
    assert answer.endswith(b"echo body")


async def test_an_idle_connection_is_closed(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("runner.egress.relay.IDLE_SECONDS", 0.5)
    served = await serve("pypi.org")
    client = await anyio.connect_tcp("127.0.0.1", served.port)
    async with client:
        with anyio.fail_after(10), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await client.receive()


async def test_a_closed_connection_gives_its_slot_back(serve: Any) -> None:
    with upstream() as port:
        served = await serve(f"{UPSTREAM_HOST}:{port}")
        for _ in range(2):
            held = [await anyio.connect_tcp("127.0.0.1", served.port) for _ in range(MAX_CONNECTIONS)]
            for stream in held:
                await stream.aclose()
            with anyio.fail_after(10):
                while served.run._open:
                    await anyio.sleep(0.01)
        assert await served.fetch(f"http://{UPSTREAM_HOST}:{port}/x") == (
            200,
            f"hello from /x via {UPSTREAM_HOST}:{port}".encode(),
        )
    assert "busy" not in served.counted.refused


@pytest.mark.parametrize(
    "url", ["http://0.0.0.0:{port}/", "http://127.0.0.1:{port}/", "http://[::ffff:127.0.0.1]:{port}/"]
)
async def test_a_list_of_everything_reaches_no_address_off_the_public_internet(serve: Any, url: str) -> None:
    with upstream(host="127.0.0.1") as port:
        served = await serve("0.0.0.0/0:*", "[::/0]:*")
        status, body = await served.fetch(url.format(port=port))
    assert status == 403
    assert b"RUNNER_EGRESS_ALLOW does not list on its own" in body


async def test_a_connect_to_a_name_that_resolves_to_loopback_is_refused(serve: Any) -> None:
    with upstream(host="127.0.0.1") as port:
        served = await serve("localhost:*")
        answer = await anyio.to_thread.run_sync(
            _raw, served.port, f"CONNECT localhost:{port} HTTP/1.1\r\nHost: x\r\n\r\n"
        )
    assert answer.startswith(b"HTTP/1.1 403 Forbidden")
    assert b"localhost resolves to a loopback address" in answer


async def test_each_request_of_a_kept_alive_connection_is_checked_on_its_own(serve: Any) -> None:
    with upstream() as port:
        served = await serve(f"{UPSTREAM_HOST}:{port}")

        def two() -> bytes:
            with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
                sock.sendall(
                    f"GET http://{UPSTREAM_HOST}:{port}/a HTTP/1.1\r\nHost: {UPSTREAM_HOST}:{port}\r\n\r\n"
                    "GET http://example.com/b HTTP/1.1\r\nHost: example.com\r\n\r\n".encode()
                )
                # Both answers may come in one recv: the second is read from what the first left.
                buffer = bytearray()
                first = _read_response(sock, buffer)
                return first + b"||" + _read_response(sock, buffer)

        both = await anyio.to_thread.run_sync(two)
    first, second = both.split(b"||")
    assert first.endswith(f"hello from /a via {UPSTREAM_HOST}:{port}".encode())
    assert second.startswith(b"HTTP/1.1 403")
    assert b"example.com:80 is not on RUNNER_EGRESS_ALLOW" in second


async def test_one_runs_stalled_name_lookups_leave_another_runs_lookup_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Found by a review: every run's lookups shared asyncio's default executor (6 threads on 2 CPUs);
    # 16 lookups of names that stalled, from one run, made another run's CONNECT wait 9.5 s instead of
    # 4 ms. Two such runs here: 32 lookups fill that executor on any machine. The system's resolver
    # is stood in for in `socket.getaddrinfo`: the host's own is not touched.
    real = socket.getaddrinfo
    released = threading.Event()
    stalled: list[str] = []
    most = [0]

    def lookup(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        if str(host).endswith(".slow.test"):
            stalled.append(host)
            most[0] = max(most[0], len(stalled))
            try:
                released.wait(60)
                raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
            finally:
                stalled.remove(host)
        return real(UPSTREAM_HOST if host == "victim.test" else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    monkeypatch.setattr("runner.egress.relay.CONNECT_SECONDS", 3.0)  # a starved lookup: a 504 after this
    proxy = EgressProxy(
        EgressConfig(egress_allow=("*.slow.test:*", "victim.test:*", f"{UPSTREAM_HOST}:*"), max_egress_mb=100),
        logging.getLogger("runner"),
    )
    listeners = []
    for _ in range(3):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listeners.append(listener)
    ports = [listener.getsockname()[1] for listener in listeners]
    try:
        with upstream() as port:
            async with anyio.create_task_group() as tg:
                for n, listener in enumerate(listeners):
                    tg.start_soon(proxy.for_run(f"req-{n}").serve, listener)
                hostile = []
                for run_port in ports[:2]:
                    for n in range(MAX_CONNECTIONS):
                        stream = await anyio.connect_tcp("127.0.0.1", run_port)
                        name = f"a{n}.p{run_port}.slow.test"
                        await stream.send(f"CONNECT {name}:443 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                        hostile.append(stream)
                # As many as will be taken at once are in their threads (every one of them, on a shared
                # executor with threads to spare).
                with anyio.move_on_after(2):
                    while len(stalled) < 2 * MAX_CONNECTIONS:
                        await anyio.sleep(0.01)
                answer = await anyio.to_thread.run_sync(
                    _raw, ports[2], f"CONNECT victim.test:{port} HTTP/1.1\r\nHost: x\r\n\r\n"
                )
                released.set()
                for stream in hostile:
                    await stream.aclose()
                tg.cancel_scope.cancel()
    finally:
        released.set()
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert most[0] <= 2 * LOOKUPS_PER_RUN, f"{most[0]} of two runs' lookups in threads at once"
