"""End to end over Streamable HTTP: `python -m runner --transport http` as a real process on a loopback
port, driven by the official Python client (legacy and auto) and by raw HTTP requests; and the listening
socket it serves on."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import h11
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from runner.config import Config
from runner.execution.pool import Pool
from runner.outcome import Status
from runner.protocol.schemas import input_schema
from runner.transports.http import KEEP_ALIVE_SECONDS, listening
from tests.conftest import REPO
from tests.helpers import (
    MODES,
    SEED_PLAIN,
    check_structured,
    in_mode,
    living,
    run_dedented,
    settled_async,
)
from tests.http_server import HttpServer, answer_status, http_server, server_env

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-fedcba9876543210xyz"
JSON_AND_SSE = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def call(code: str, request_id: int = 2, **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "run_python", "arguments": {"code": code, **arguments}},
    }


@pytest.fixture
def tokens_file() -> Iterator[Path]:
    """Outside /tmp, which a sandbox replaces anyway: hiding the file itself is what is tested."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as directory:
        path = Path(directory) / "tokens"
        path.write_text(f"# the team's tokens\nalice:{ALICE}\n\nbob:{BOB}\n")
        # Readable by anyone: only the sandbox's cover may keep a run from it.
        os.chmod(directory, 0o755)
        os.chmod(path, 0o644)
        yield path


@pytest.fixture(params=["legacy", "auto"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def client_for(server: HttpServer, mode: str, token: str | None = None) -> Client:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60))
    return Client(streamable_http_client(server.url, http_client=http), mode=mode)  # type: ignore[arg-type]


def sse_messages(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")]


def post(server: HttpServer, message: dict[str, Any], token: str | None = None, **headers: str) -> httpx2.Response:
    sent = {**JSON_AND_SSE, **headers, **({"authorization": f"Bearer {token}"} if token else {})}
    return httpx2.post(server.url, json=message, headers=sent, timeout=60)


# --- the protocol ---------------------------------------------------------------------------------


async def test_the_python_client_lists_the_tool_and_runs_code_in_the_seed_format_over_http(
    work_dir: Path, tmp_path: Path, mode: str, tokens_file: Path, left_nothing: None
) -> None:
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    with http_server(work_dir, tmp_path / "log", RUNNER_AUTH_TOKENS_FILE=str(tokens_file)) as server:
        async with client_for(server, mode, ALICE) as client:
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
            [tool, _] = (await client.list_tools()).tools
            assert tool.input_schema == input_schema(Config.from_env({}))
            result = await client.call_tool("run_python", {"code": "print(sum(range(10)))"})
            [block] = result.content
            assert isinstance(block, types.TextContent)
            assert re.fullmatch(SEED_PLAIN, block.text)
            slow = await client.call_tool(
                "run_python", {"code": "import time; time.sleep(2.5); print('done')"}, progress_callback=on_progress
            )
            assert check_structured(slow.structured_content)["stdout"] == "done\n"
        assert server.stop() == 0
    assert progress, "progress notifications reached the client while the run ran"
    log = (tmp_path / "log").read_text()
    assert ALICE not in log, "no token in the log"
    assert BOB not in log
    assert re.search(r"request_id=\w{8} call received .*caller=alice", log), "the log names the token"


async def test_every_legacy_request_stands_alone_so_any_replica_can_answer_it(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    with http_server(work_dir, tmp_path / "log") as server:
        init = post(server, INITIALIZE)
        assert init.status_code == 200
        assert "mcp-session-id" not in init.headers, "stateless: no session"
        # A tools/call with no initialize before it on this connection, as a second replica sees it.
        answer = post(server, call("print(6 * 7)"), **{"mcp-protocol-version": "2025-06-18"})
        [message] = sse_messages(answer.text)
        assert message["result"]["structuredContent"]["stdout"] == "42\n"


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
async def test_every_handshake_era_version_is_echoed_and_served_over_http(
    work_dir: Path, tmp_path: Path, version: str, left_nothing: None
) -> None:
    with http_server(work_dir, tmp_path / "log") as server:
        init = {**INITIALIZE, "params": {**INITIALIZE["params"], "protocolVersion": version}}
        [answer] = sse_messages(post(server, init).text)
        assert answer["result"]["protocolVersion"] == version
        # 2024-11-05 had no MCP-Protocol-Version header; later versions send it on every request.
        headers = {} if version == "2024-11-05" else {"mcp-protocol-version": version}
        [result] = sse_messages(post(server, call("print(6 * 7)"), **headers).text)
        assert result["result"]["structuredContent"]["stdout"] == "42\n"


# --- authentication -------------------------------------------------------------------------------


async def test_tokens_are_required_checked_and_kept_out_of_urls(
    work_dir: Path, tmp_path: Path, tokens_file: Path, left_nothing: None
) -> None:
    env = {"RUNNER_AUTH_TOKENS_FILE": str(tokens_file), "RUNNER_LOG_FORMAT": "json"}
    with http_server(work_dir, tmp_path / "log", **env) as server:
        none = post(server, INITIALIZE)
        assert none.status_code == 401
        assert none.headers["www-authenticate"] == 'Bearer realm="python-runner-mcp"'
        wrong = post(server, INITIALIZE, token=ALICE[:-1] + "X")
        assert wrong.status_code == 401
        assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
        basic = post(server, INITIALIZE, authorization=f"Basic {ALICE}")
        assert basic.status_code == 401
        assert basic.headers["www-authenticate"] == 'Bearer realm="python-runner-mcp"', "asked for one, as with none"
        assert basic.text == "authentication required: send Authorization: Bearer <token>"
        in_url = httpx2.post(f"{server.url}?access_token={ALICE}", json=INITIALIZE, headers=JSON_AND_SSE)
        assert in_url.status_code == 400
        assert 'error="invalid_request"' in in_url.headers["www-authenticate"]
        # Wherever it is in the query, with a valid header beside it (found by an audit of the claims: a
        # check of the first parameter alone failed nothing).
        later = f"{server.url}?x=1&access_token={ALICE}"
        headers = JSON_AND_SSE | {"authorization": f"Bearer {ALICE}"}
        assert httpx2.post(later, json=INITIALIZE, headers=headers).status_code == 400
        assert post(server, INITIALIZE, token=ALICE).status_code == 200
        assert post(server, INITIALIZE, token=BOB).status_code == 200
        for path in ("/healthz", "/readyz", "/metrics"):
            assert httpx2.get(server.base + path).status_code in (200, 503), f"{path} needs no token"
        # No OAuth metadata, so that an OAuth client does not start a flow over a wrong token (found by a
        # first hour: a 401 there made the Inspector ask for interactive OAuth).
        for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-authorization-server/mcp"):
            metadata = httpx2.get(server.base + path)
            assert metadata.status_code == 404, path
            assert "static bearer tokens" in metadata.text
        assert post(server, call("print(1)"), token=BOB, **{"mcp-protocol-version": "2025-06-18"}).status_code == 200
    log = (tmp_path / "log").read_text()
    assert ALICE not in log
    assert BOB not in log
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    [received] = [event for event in events if event["event"] == "call received"]
    assert received["caller"] == "bob", "a JSON log line names the token"
    # How many were loaded, and their names, are said at start (found by a new user: 401s were a mystery).
    [loaded] = [event for event in events if event["event"] == "bearer tokens loaded"]
    assert (loaded["count"], loaded["names"]) == (2, "alice,bob")
    assert re.fullmatch(r"[0-9a-f]{8}", received["request_id"])
    # Found by a new user: 401s were not logged. The first is, with the client's address and why;
    # the burst after it is held (one line per interval, counting the refusals it stands for).
    refused = [event for event in events if event["event"] == "HTTP request refused: no valid bearer token"]
    assert len(refused) == 1, refused
    assert refused[0]["why"] == "no Authorization header"
    assert refused[0]["client"].startswith("127.0.0.1:")


def test_the_server_refuses_to_serve_a_public_address_without_tokens_and_says_why(work_dir: Path) -> None:
    env = server_env(work_dir, RUNNER_HTTP_HOST="0.0.0.0", RUNNER_HTTP_ALLOWED_HOSTS="runner.example:*")
    refused = subprocess.run(
        [sys.executable, "-m", "runner", "--transport", "http"], cwd=REPO, env=env, capture_output=True, timeout=60
    )
    assert refused.returncode == 2
    assert b"RUNNER_AUTH_TOKENS_FILE: required to serve HTTP on 0.0.0.0" in refused.stderr
    assert b"--insecure-no-auth" in refused.stderr
    no_hosts = {**env, "RUNNER_HTTP_ALLOWED_HOSTS": ""}
    refused = subprocess.run(
        [sys.executable, "-m", "runner", "--transport", "http"], cwd=REPO, env=no_hosts, capture_output=True, timeout=60
    )
    assert refused.returncode == 2
    assert b"RUNNER_HTTP_ALLOWED_HOSTS: required" in refused.stderr


async def test_insecure_no_auth_serves_a_public_address_with_a_warning(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    env = {"RUNNER_HTTP_HOST": "0.0.0.0", "RUNNER_HTTP_ALLOWED_HOSTS": "127.0.0.1:*"}
    with http_server(work_dir, tmp_path / "log", "--insecure-no-auth", **env) as server:
        url = server.url.replace("0.0.0.0", "127.0.0.1")
        answer = httpx2.post(url, json=INITIALIZE, headers=JSON_AND_SSE)
        assert answer.status_code == 200
        assert server.stop() == 0
    assert "HTTP without authentication" in (tmp_path / "log").read_text()


def test_without_a_sandbox_the_server_warns_that_runs_can_read_the_tokens(
    work_dir: Path, tmp_path: Path, tokens_file: Path
) -> None:
    with http_server(work_dir, tmp_path / "log", RUNNER_AUTH_TOKENS_FILE=str(tokens_file)) as server:
        assert server.stop() == 0
    assert "a run can read RUNNER_AUTH_TOKENS_FILE" in (tmp_path / "log").read_text()


async def test_the_endpoint_takes_post_only(work_dir: Path, tmp_path: Path, left_nothing: None) -> None:
    """Stateless: a GET stream would never carry a message, and would hold the shutdown's grace."""
    with http_server(work_dir, tmp_path / "log") as server:
        for method in ("GET", "DELETE", "PUT"):
            answer = httpx2.request(method, server.url, headers={"accept": "text/event-stream"}, timeout=10)
            assert answer.status_code == 405, method
            assert answer.headers["allow"] == "POST"
        assert server.stop() == 0


# --- DNS rebinding and bounds ---------------------------------------------------------------------


async def test_a_foreign_host_gets_421_and_a_foreign_origin_403(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    with http_server(work_dir, tmp_path / "log") as server:
        port = server.url.split(":")[2].split("/")[0]
        assert post(server, INITIALIZE, host="attacker.example").status_code == 421
        assert post(server, INITIALIZE, host=f"attacker.example:{port}").status_code == 421
        assert post(server, INITIALIZE, origin="http://attacker.example").status_code == 403
        assert post(server, INITIALIZE, origin=f"http://localhost:{port}").status_code == 200
        assert post(server, INITIALIZE, host=f"localhost:{port}").status_code == 200
        # The modern era goes through the same checks.
        modern = {**JSON_AND_SSE, "mcp-protocol-version": "2026-07-28", "host": "attacker.example"}
        assert httpx2.post(server.url, json=call("print(1)"), headers=modern).status_code == 421
        # Found by a new user: the answers named neither the value refused nor the variable.
        refused = post(server, INITIALIZE, host="attacker.example")
        assert refused.text == "Host 'attacker.example' is not in RUNNER_HTTP_ALLOWED_HOSTS\n"
        refused = post(server, INITIALIZE, origin="http://attacker.example")
        assert refused.text == "Origin 'http://attacker.example' is not in RUNNER_HTTP_ALLOWED_ORIGINS\n"
        # Found by a review: a 2026-07-28 POST that accepts no event stream got 406 and no body at all.
        narrow = {**modern, "host": f"127.0.0.1:{port}", "accept": "application/json", "mcp-method": "tools/call"}
        refused = httpx2.post(server.url, json=call("print(1)"), headers=narrow)
        assert refused.status_code == 406
        assert refused.text == (
            "Not Acceptable: Accept 'application/json' must name both application/json and text/event-stream\n"
        )
        assert refused.headers["content-type"] == "text/plain; charset=utf-8"
        assert server.stop() == 0
    # The log, not the answer, says what the variable holds.
    logged = [line for line in (tmp_path / "log").read_text().splitlines() if "'attacker.example' is not" in line]
    assert logged, "the refusals are logged"
    assert all("HTTP request refused" in line and "127.0.0.1:*" in line for line in logged), logged
    # Found by a new user: each refusal was logged three times, twice more by the SDK's own lines.
    # Found by a review: then once each, however many (500 in 0.4 s, 500 lines): now the first of a
    # status, the next at most once an interval, counting those it stands for.
    assert len(logged) == 1, logged
    assert "Invalid Host header" not in (tmp_path / "log").read_text()


# Refusals a client may cause without end, each logged (on its own) as it came.
FLOOD = 300


async def test_a_flood_of_refused_requests_logs_a_few_lines_and_the_server_keeps_serving(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    # Found by a review: 500 requests that are not HTTP gave 500 lines of uvicorn's in 0.4 s, with or
    # without tokens, and 500 with a foreign Host 500 lines of ours (421, 403 and 413 were not throttled
    # as 401 were). Without tokens (a loopback address), a Host or an Origin is refused to anyone.
    log = tmp_path / "log"
    with http_server(work_dir, log) as server:
        host, port = server.base.removeprefix("http://").split(":")
        lines_before = len(log.read_text().splitlines())
        for _ in range(FLOOD):
            with socket.create_connection((host, int(port))) as connection:
                connection.sendall(b"GARBAGE\x00 / HTTP/1.1\r\n\r\n")
                assert connection.recv(100).startswith(b"HTTP/1.1 400")
        with httpx2.Client() as client:
            for index in range(FLOOD):
                headers = {**JSON_AND_SSE, "host": f"evil{index}.example"}
                assert client.post(server.url, json=INITIALIZE, headers=headers).status_code == 421
            for index in range(FLOOD):
                headers = {**JSON_AND_SSE, "origin": f"http://evil{index}.example"}
                assert client.post(server.url, json=INITIALIZE, headers=headers).status_code == 403
        assert post(server, call("print(1)"), **{"mcp-protocol-version": "2025-06-18"}).status_code == 200
        assert server.stop() == 0
    lines = log.read_text().splitlines()[lines_before:]
    # The first of each kind, and a line an interval (10 s) after it at most, however slow the machine.
    assert 1 <= sum("Invalid HTTP request received." in line for line in lines) <= 4, lines
    assert 1 <= sum("status=421" in line for line in lines) <= 4, lines
    assert 1 <= sum("status=403" in line for line in lines) <= 4, lines
    assert len(lines) < 30, lines


async def test_a_host_allowed_without_its_port_is_refused_saying_it_needs_the_port_or_a_wildcard(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    with http_server(work_dir, tmp_path / "log", RUNNER_HTTP_ALLOWED_HOSTS="localhost") as server:
        port = server.url.split(":")[2].split("/")[0]
        refused = post(server, INITIALIZE, host=f"localhost:{port}")
        assert refused.status_code == 421
        assert f"'localhost' there matches no port: 'localhost:{port}' needs 'localhost:{port}' or 'localhost:*'" in (
            refused.text
        )
        assert server.stop() == 0


async def test_a_body_over_the_bound_is_refused_before_it_is_read(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    # The bound is the largest legal call: 6 x 160 KiB of code + 64 KiB is 1 MiB.
    small_calls = {"RUNNER_MAX_CODE_MB": "0.15625", "RUNNER_MAX_STDIN_MB": "0", "RUNNER_MAX_INPUT_MB": "0"}
    bound = Config.from_env({**small_calls, "RUNNER_TRANSPORT": "http"}).http.max_body_bytes
    assert bound == 1024 * 1024
    with http_server(work_dir, tmp_path / "log", **small_calls) as server:
        padding = "x" * (bound + 1 - len(json.dumps(call(""))))
        body = json.dumps(call(padding)).encode()
        assert len(body) == bound + 1
        refused = httpx2.post(server.url, content=body, headers=JSON_AND_SSE)
        assert refused.status_code == 413
        assert refused.text.startswith("Request body too large: over 1,048,576 bytes"), refused.text
        assert "RUNNER_MAX_CODE_MB" in refused.text

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            yield from (body[i : i + 65536] for i in range(0, len(body), 65536))

        assert httpx2.post(server.url, content=chunks(), headers=JSON_AND_SSE).status_code == 413
        # A declared length over the bound is refused at once, without waiting for the body.
        host, port = server.url.split("//")[1].split("/")[0].split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {10**9}\r\n\r\n{{}}".encode()
            )
            assert sock.recv(65536).startswith(b"HTTP/1.1 413")
        assert post(server, INITIALIZE).status_code == 200, "the server keeps serving"


# --- runs end with their requests and with the server ---------------------------------------------


async def test_a_client_that_drops_the_connection_mid_run_kills_the_run(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    marker = tmp_path / "pid"
    code = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"
    with http_server(work_dir, tmp_path / "log") as server:
        for version in ("2025-06-18", "2026-07-28"):
            marker.unlink(missing_ok=True)
            message = call(code, timeout=60)
            if version == "2026-07-28":
                meta = {
                    "io.modelcontextprotocol/protocolVersion": version,
                    "io.modelcontextprotocol/clientCapabilities": {},
                }
                message["params"]["_meta"] = meta
            host, port = server.url.split("//")[1].split("/")[0].split(":")
            body = json.dumps(message).encode()
            request = (
                f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {version}\r\n"
                "Mcp-Method: tools/call\r\nMcp-Name: run_python\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode() + body
            with socket.create_connection((host, int(port))) as sock:
                sock.sendall(request)
                pid = await _pid_written(marker)
            with anyio.fail_after(10):
                assert await settled_async(functools.partial(living, [pid]), timeout=10) == [], f"{version}: run dead"
        assert "status=cancelled" in server.log.read_text()
        assert post(server, INITIALIZE).status_code == 200, "the server keeps serving"


@pytest.mark.timeout(180)
async def test_a_dropped_connection_past_the_first_minute_of_a_2_minute_run_kills_the_run(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """A long run streams its progress over SSE (with the SDK's pings); dropping that stream once the
    run has gone on for more than a minute (the old cap on `timeout`) still kills it, as it always did."""
    marker = tmp_path / "pid"
    code = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)"
    with http_server(work_dir, tmp_path / "log") as server:
        message = call(code, timeout=150)
        message["params"]["_meta"] = {
            "progressToken": "long",
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        host, port = server.url.split("//")[1].split("/")[0].split(":")
        body = json.dumps(message).encode()
        request = (
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
            "Mcp-Method: tools/call\r\nMcp-Name: run_python\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        elapsed = 0.0
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(request)
            pid = await _pid_written(marker)
            stream = b""
            with anyio.fail_after(100):
                while elapsed <= 61:  # the run's own progress says how long it has been going
                    chunk = await anyio.to_thread.run_sync(sock.recv, 65536)
                    assert chunk, "the server closed the stream"
                    stream += chunk
                    said = re.findall(rb'"progress":\s*([0-9.]+)', stream)
                    elapsed = float(said[-1]) if said else 0.0
        with anyio.fail_after(10):
            assert await settled_async(functools.partial(living, [pid]), timeout=10) == [], "run dead"
        assert "status=cancelled" in server.log.read_text()
        assert post(server, INITIALIZE).status_code == 200, "the server keeps serving"
    assert elapsed > 60


async def test_a_posted_cancel_kills_the_run_of_its_own_client_only(
    work_dir: Path, tmp_path: Path, tokens_file: Path, left_nothing: None
) -> None:
    """Stateless HTTP: the cancel arrives as a POST of its own, beside the request it names."""
    marker = tmp_path / "pid"
    code = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"
    legacy = {"mcp-protocol-version": "2025-06-18"}
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "test"}}
    answers: list[httpx2.Response] = []
    with http_server(work_dir, tmp_path / "log", RUNNER_AUTH_TOKENS_FILE=str(tokens_file)) as server:

        async def alices_call() -> None:
            answers.append(
                await anyio.to_thread.run_sync(lambda: post(server, call(code, 7, timeout=60), ALICE, **legacy))
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(alices_call)
            pid = await _pid_written(marker)
            assert post(server, cancel, BOB, **legacy).status_code == 202
            # What the SDK refuses cannot cancel either: a web page's simple POST, a foreign Origin.
            as_text = {"content-type": "text/plain", "authorization": f"Bearer {ALICE}"}
            assert httpx2.post(server.url, content=json.dumps(cancel), headers=as_text).status_code == 400
            assert post(server, cancel, ALICE, origin="http://evil.example", **legacy).status_code == 403
            assert await settled_async(functools.partial(living, [pid]), timeout=1) == [pid], "still running"
            assert post(server, cancel, ALICE, **legacy).status_code == 202
            assert await settled_async(functools.partial(living, [pid]), timeout=10) == [], "alice can"
        [answer] = answers
        assert answer.status_code in (200, 204)
        assert sse_messages(answer.text) == [], "a cancelled request gets no JSON-RPC answer"
        assert "status=cancelled" in server.log.read_text()


@pytest.mark.parametrize(("host", "cancelled"), [("127.0.0.1", True), ("0.0.0.0", False)], ids=["loopback", "public"])
async def test_without_tokens_a_posted_cancel_acts_on_a_loopback_address_only(
    work_dir: Path, tmp_path: Path, left_nothing: None, host: str, cancelled: bool
) -> None:
    """Without tokens a client is its address; on a public address every client behind a proxy has the
    proxy's, so there a posted cancel acts on nothing. The cancel is decided before its 202, so the run,
    let go only after it, finishes exactly where the cancel did not act (found untested by a review of
    the claims)."""
    marker, go = tmp_path / "pid", tmp_path / "go"
    code = (
        f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\nprint('finished')"
    )
    legacy = {"mcp-protocol-version": "2025-06-18"}
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "test"}}
    env = {"RUNNER_HTTP_HOST": host, "RUNNER_HTTP_ALLOWED_HOSTS": "127.0.0.1:*"}
    answers: list[httpx2.Response] = []
    with http_server(work_dir, tmp_path / "log", *(() if cancelled else ("--insecure-no-auth",)), **env) as served:
        server = dataclasses.replace(served, url=served.url.replace("0.0.0.0", "127.0.0.1"))

        async def the_call() -> None:
            answers.append(await anyio.to_thread.run_sync(lambda: post(server, call(code, 7, timeout=60), **legacy)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(the_call)
            await _pid_written(marker)
            assert post(server, cancel, **legacy).status_code == 202
            go.touch()
    [answer] = answers
    messages = sse_messages(answer.text)
    if cancelled:
        assert messages == [], "a cancelled request gets no JSON-RPC answer"
    else:
        [message] = messages
        assert message["result"]["structuredContent"]["stdout"] == "finished\n", message


async def _pid_written(marker: Path) -> int:
    with anyio.fail_after(30):
        while not marker.exists() or not marker.read_text():
            await anyio.sleep(0.02)
    return int(marker.read_text())


async def test_sigterm_lets_runs_in_flight_finish_within_the_grace_then_kills_the_rest(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    marker = tmp_path / "pid"
    short = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(1.5)\nprint('finished')"
    with http_server(work_dir, tmp_path / "log", RUNNER_SHUTDOWN_GRACE="20") as server:
        answers: list[httpx2.Response] = []

        async def send() -> None:
            answers.append(await anyio.to_thread.run_sync(post, server, call(short, timeout=30)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            await _pid_written(marker)
            server.process.send_signal(signal.SIGTERM)
        [answer] = answers
        assert sse_messages(answer.text)[-1]["result"]["structuredContent"]["stdout"] == "finished\n"
        assert server.process.wait(30) == 0

    marker.unlink()
    endless = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)"
    with http_server(work_dir, tmp_path / "log2", RUNNER_SHUTDOWN_GRACE="1", RUNNER_MAX_TIMEOUT="600") as server:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, _post_quietly, server, call(endless, timeout=600))
            pid = await _pid_written(marker)
            server.process.send_signal(signal.SIGTERM)
            assert await anyio.to_thread.run_sync(server.process.wait, 30) == 0
        assert living([pid]) == []
    # A documented stop, said so: no error, no traceback (found by a review: uvicorn's error and one
    # traceback for each call still running).
    log = (tmp_path / "log2").read_text()
    assert "WARNING request_id=- the stop's grace is over: calls in flight are cancelled count=1" in log
    assert " ERROR " not in log
    assert "Traceback" not in log


def _post_quietly(server: HttpServer, message: dict[str, Any]) -> None:
    # The server may end the response unfinished, as it should after the grace.
    with contextlib.suppress(httpx2.HTTPError):
        post(server, message)


# --- operations -----------------------------------------------------------------------------------


async def test_metrics_count_the_calls_made_by_status_and_caller(
    work_dir: Path, tmp_path: Path, tokens_file: Path, left_nothing: None
) -> None:
    with http_server(work_dir, tmp_path / "log", RUNNER_AUTH_TOKENS_FILE=str(tokens_file)) as server:
        for code in ("print(1)", "print(2)", "raise SystemExit(3)"):
            assert post(server, call(code), token=ALICE, **{"mcp-protocol-version": "2025-06-18"}).status_code == 200
        post(server, call("print('x' * 100_000)", timeout=-1), token=BOB, **{"mcp-protocol-version": "2025-06-18"})
        post(server, call("print('x' * 30_000)"), token=BOB, **{"mcp-protocol-version": "2025-06-18"})
        scraped = httpx2.get(server.base + "/metrics")
        assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(scraped.text)
            for sample in family.samples
        }
    assert samples[("runner_calls_total", (("caller", "alice"), ("status", "ok")))] == 2
    assert samples[("runner_calls_total", (("caller", "alice"), ("status", "error")))] == 1
    assert samples[("runner_calls_total", (("caller", "bob"), ("status", "invalid_arguments")))] == 1
    assert samples[("runner_calls_total", (("caller", "bob"), ("status", "ok")))] == 1
    assert samples[("runner_run_duration_seconds_count", ())] == 4, "the rejected call never ran"
    assert samples[("runner_queue_wait_seconds_count", ())] == 4
    assert samples[("runner_output_dropped_bytes_total", ())] > 0, "30,000 characters are over the 20,000 cap"
    assert samples[("runner_runs_in_flight", ())] == 0
    assert samples[("runner_queue_depth", ())] == 0
    assert samples[("runner_zygote_restarts_total", ())] == 0
    assert samples[("runner_max_concurrent", ())] == 4


async def test_readyz_says_not_ready_while_the_queue_is_full(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    marker = tmp_path / "pid"
    hold = f"import os, time\nopen({str(marker)!r}, 'a').write(str(os.getpid()) + ' ')\ntime.sleep(60)"
    env = {"RUNNER_MAX_CONCURRENT": "1", "RUNNER_MAX_QUEUE": "1"}
    with http_server(work_dir, tmp_path / "log", **env) as server:
        assert httpx2.get(server.base + "/healthz").text == "ok\n"
        ready = await settled_async(lambda: httpx2.get(server.base + "/readyz").status_code, timeout=20)
        assert ready == 200
        async with anyio.create_task_group() as tg:
            for _ in range(2):  # one runs, one waits: the queue of 1 is full
                tg.start_soon(anyio.to_thread.run_sync, _post_quietly, server, call(hold, timeout=60))
            await _pid_written(marker)
            not_ready = await settled_async(lambda: httpx2.get(server.base + "/readyz").status_code != 503, timeout=20)
            assert not_ready is False
            assert httpx2.get(server.base + "/readyz").text == "not ready: the queue is full\n"
            assert httpx2.get(server.base + "/healthz").status_code == 200, "alive all the same"
            server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0


async def test_one_token_cannot_take_every_slot(
    work_dir: Path, tmp_path: Path, tokens_file: Path, left_nothing: None
) -> None:
    """Two tokens, two slots: a fair share is one slot each. Alice's second call waits for her first;
    Bob's runs at once beside it. Alice's runs wait for a file Bob's makes (not for a second: on a busy
    machine Bob's call could come before Alice's second, or after her first had ended): were her two
    calls to take both slots, Bob's would wait for them, and her first would not see his file."""
    made = tmp_path / "bob-ran"
    alice = (
        f"import os, time\nstart = time.time()\nfor _ in range(2000):\n"
        f"    if os.path.exists({str(made)!r}):\n        break\n    time.sleep(0.01)\n"
        f"print(start, time.time(), os.path.exists({str(made)!r}))"
    )
    bob = f"import time\nstart = time.time()\nopen({str(made)!r}, 'x').close()\nprint(start, time.time(), True)"
    intervals: dict[str, list[tuple[float, float, str]]] = {"alice": [], "bob": []}
    env = {"RUNNER_AUTH_TOKENS_FILE": str(tokens_file), "RUNNER_MAX_CONCURRENT": "2", "RUNNER_POOL_SIZE": "2"}
    with http_server(work_dir, tmp_path / "log", **env) as server:

        async def one(name: str, token: str, code: str) -> None:
            answer = await anyio.to_thread.run_sync(
                lambda: post(server, call(code, timeout=30), token=token, **{"mcp-protocol-version": "2025-06-18"})
            )
            start, end, saw = sse_messages(answer.text)[-1]["result"]["structuredContent"]["stdout"].split()
            intervals[name].append((float(start), float(end), saw))

        def alices_calls_to_come() -> bool:
            return len(re.findall(r"call received .*caller=alice", server.log.read_text())) < 2

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "alice", ALICE, alice)
            tg.start_soon(one, "alice", ALICE, alice)
            assert not await settled_async(alices_calls_to_come, timeout=30), "both of alice's calls came first"
            tg.start_soon(one, "bob", BOB, bob)
    (a1, a2), [b] = sorted(intervals["alice"]), intervals["bob"]
    assert a1[2] == "True", "bob's call ran while alice's first did"
    assert a2[0] >= a1[1] - 0.05, "alice's calls ran one after the other"
    assert b[0] < a1[1], "bob's call did not wait for alice's"


@pytest.mark.parametrize("mode", MODES)
async def test_a_sandboxed_run_sees_nothing_of_the_tokens_even_after_the_file_is_replaced(
    config: Config, mode: str, tokens_file: Path, no_leaks: None
) -> None:
    """In plain modes a run shares the server's uid and reads the file (the server warns at start, see
    above). In a sandbox the file's own directory, which holds nothing else, is covered by an empty one:
    a file put in its place after start (as editors save) is not seen either."""
    http = dataclasses.replace(config.http, tokens_file=str(tokens_file))
    sandboxed = in_mode(config, mode, transport="http", http=http)
    code = f"""
        import os
        try:
            print(repr(open({str(tokens_file)!r}).read()))
        except OSError as exc:
            print(type(exc).__name__)
        """
    async with Pool.open(sandboxed) as pool:
        before = await run_dedented(pool, code)
        replacement = tokens_file.with_name(".tokens.new")
        replacement.write_text(f"carol:{ALICE}-rotated\n")
        replacement.chmod(0o644)
        os.replace(replacement, tokens_file)
        after = await run_dedented(pool, code)
    for result in (before, after):
        assert result.status is Status.OK, result.stderr.text
        if mode in ("bwrap", "namespaces"):
            assert ALICE not in result.stdout.text, result.stdout.text
        else:
            assert ALICE in result.stdout.text


@pytest.mark.parametrize("sandbox", ["bwrap", "namespaces"])
async def test_a_tokens_file_alone_in_a_directory_runs_see_is_hidden_by_its_directory_even_once_replaced(
    config: Config, sandbox: str, work_dir: Path, tmp_path: Path
) -> None:
    """Found by a review of the claims: the test above keeps the file where no run looks (outside every
    directory a view binds), so it passed with no hiding at all. Here it is in the package environment,
    which every run's view binds: only the cover of its directory keeps it from a run, and a file put in
    its place after start (as editors save: a new file renamed over it) is under that cover too."""
    in_mode(config, sandbox)
    environment = tmp_path / "environment"
    (environment / "site-packages").mkdir(parents=True)
    (environment / "secrets").mkdir()
    tokens = environment / "secrets" / "tokens"
    tokens.write_text(f"alice:{ALICE}\n")
    for path, mode in ((environment, 0o755), (environment / "site-packages", 0o755), (environment / "secrets", 0o755)):
        path.chmod(mode)
    tokens.chmod(0o644)
    code = (
        "import os\n"
        f"print(os.path.isdir({str(environment / 'site-packages')!r}))\n"
        "try:\n"
        f"    print(open({str(tokens)!r}).read())\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    env = {"RUNNER_AUTH_TOKENS_FILE": str(tokens), "RUNNER_PACKAGES": str(environment), "RUNNER_SANDBOX": sandbox}
    with http_server(work_dir, tmp_path / "stderr.log", **env) as server:
        async with (
            httpx2.AsyncClient(headers={"authorization": f"Bearer {ALICE}"}, timeout=httpx2.Timeout(60)) as http,
            Client(streamable_http_client(server.url, http_client=http)) as client,  # type: ignore[arg-type]
        ):
            before = check_structured((await client.call_tool("run_python", {"code": code})).structured_content)
            replacement = tokens.with_name(".tokens.new")
            replacement.write_text(f"alice:{ALICE}\ncarol:{BOB}\n")
            replacement.chmod(0o644)
            os.replace(replacement, tokens)
            after = check_structured((await client.call_tool("run_python", {"code": code})).structured_content)
    for done in (before, after):
        assert done["status"] == "ok", done
        assert done["stdout"] == "True\nFileNotFoundError\n", done


@pytest.mark.parametrize("mode", ["bwrap", "namespaces"])
async def test_a_tokens_file_among_other_files_is_not_in_a_run_s_view_nor_is_its_directory(
    config: Config, mode: str, tokens_file: Path, no_leaks: None
) -> None:
    """Its directory holds more than the tokens. Neither is in a run's view: it holds nothing of the host
    but what runs need (`isolation.view_binds`), so no cover is needed at all."""
    (tokens_file.parent / "notes.txt").write_text("visible\n")
    (tokens_file.parent / "notes.txt").chmod(0o644)
    http = dataclasses.replace(config.http, tokens_file=str(tokens_file))
    sandboxed = in_mode(config, mode, transport="http", http=http)
    code = f"import os\nprint(os.path.lexists({str(tokens_file)!r}), os.path.lexists({str(tokens_file.parent)!r}))"
    async with Pool.open(sandboxed) as pool:
        result = await run_dedented(pool, code)
    assert result.status is Status.OK, result.stderr.text
    assert result.stdout.text == "False False\n"


@pytest.mark.anyio
@pytest.mark.parametrize("shared", [False, True], ids=["own socket", "a worker's inherited socket"])
async def test_connections_on_the_listening_socket_send_without_delay(shared: bool) -> None:
    """TCP_NODELAY on every accepted connection (asyncio sets it only for a socket that says IPPROTO_TCP):
    without it each answer on a kept-alive connection waited ~40 ms for the client's delayed ACK."""
    own = listening("127.0.0.1", 0)
    sock = socket.socket(fileno=os.dup(own.fileno())) if shared else own
    seen: list[int] = []

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    with own, sock:
        server = await asyncio.start_server(accepted, sock=sock)
        async with server:
            reader, writer = await asyncio.open_connection(*own.getsockname()[:2])
            await reader.read()
            writer.close()
    [nodelay] = seen
    assert nodelay != 0


def _exchange(sock: socket.socket, conn: h11.Connection, url: httpx2.URL, body: bytes) -> int:
    """POST `body` on the connection and read its whole answer; the answer's status."""
    headers = [("host", url.netloc.decode()), ("content-length", str(len(body))), *JSON_AND_SSE.items()]
    headers.append(("mcp-protocol-version", "2025-06-18"))
    sock.sendall(conn.send(h11.Request(method="POST", target=url.raw_path, headers=headers)) or b"")
    sock.sendall((conn.send(h11.Data(data=body)) or b"") + (conn.send(h11.EndOfMessage()) or b""))
    return answer_status(sock, conn)


def test_a_kept_alive_connection_idle_as_long_as_a_client_keeps_one_is_still_served(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """Found by a load hunt: uvicorn closed a connection idle 5 s, httpx's own expiry for reusing one, so on
    a busy machine a client's next POST met the close and got a reset (ReadError), its call unanswered."""
    client_keeps = httpx2.Limits().keepalive_expiry
    assert client_keeps is not None
    assert client_keeps + 1 < KEEP_ALIVE_SECONDS
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    with http_server(work_dir, tmp_path / "log") as server:
        url = httpx2.URL(server.url)
        with socket.create_connection((url.host, url.port)) as sock:
            conn = h11.Connection(h11.CLIENT)
            assert _exchange(sock, conn, url, body) == 200
            # Idle a second past the client's expiry; the server closing it would wake this at once.
            closed, _, _ = select.select([sock], [], [], client_keeps + 1)
            assert closed == [], "the server closed a connection a client may still reuse"
            assert _exchange(sock, conn, url, body) == 200
        assert server.stop() == 0
