"""Sessions over Streamable HTTP, against `python -m runner --transport http` as a real process: a
handle belongs to the token that made it, the official Python client mirrors `session` into an
`Mcp-Param-Session` header (SEP-2243) that the server checks against the body, and several workers
behind one port refuse sessions with the reason."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.extension import ClientExtension
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import check_structured
from tests.http_server import HttpServer, http_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-fedcba9876543210xyz"


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(f"alice:{ALICE}\nbob:{BOB}\n")
    return path


@contextlib.asynccontextmanager
async def client_for(
    server: HttpServer,
    token: str | None,
    sent: list[httpx2.Request] | None = None,
    extensions: list[ClientExtension] | None = None,
) -> AsyncIterator[Client]:
    """The official client in auto mode (2026-07-28 against this server), with `extensions`; `sent`
    gathers its requests."""

    async def record(request: httpx2.Request) -> None:
        if sent is not None:
            sent.append(request)

    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60), event_hooks={"request": [record]}) as http,
        Client(
            streamable_http_client(server.url, http_client=http),  # type: ignore[arg-type]
            mode="auto",
            extensions=extensions,
        ) as client,
    ):
        yield client


async def run(client: Client, code: str, session: str) -> dict[str, Any]:
    result = await client.call_tool("run_python", {"code": code, "session": session})
    return check_structured(result.structured_content)


async def test_a_handle_belongs_to_the_token_that_made_it_and_is_unknown_to_another(
    work_dir: Path, tmp_path: Path, tokens_file: Path, left_nothing: None
) -> None:
    with http_server(work_dir, tmp_path / "log", RUNNER_AUTH_TOKENS_FILE=str(tokens_file)) as server:
        async with client_for(server, ALICE) as alice, client_for(server, BOB) as bob:
            handle = (await run(alice, "secret = 'alice'", "new"))["session"]
            stolen = await run(bob, "print(secret)", handle)
            assert stolen["status"] == "invalid_arguments"
            assert stolen["message"].startswith("unknown session")
            assert stolen["stdout"] == "", "nothing ran"
            closed = await bob.call_tool("close_session", {"session": handle})
            assert closed.is_error, "another token cannot close it either"
            assert (await run(alice, "print(secret)", handle))["stdout"] == "alice\n"
        assert server.stop() == 0


async def test_the_python_client_mirrors_session_into_an_mcp_param_session_header(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    sent: list[httpx2.Request] = []
    with http_server(work_dir, tmp_path / "log") as server:
        async with client_for(server, None, sent) as client:
            assert client.protocol_version == "2026-07-28"
            await client.list_tools()  # where the client learns which arguments go into headers
            handle = (await run(client, "x = 1", "new"))["session"]
            assert (await run(client, "print(x)", handle))["stdout"] == "1\n"
            await client.call_tool("close_session", {"session": handle})
        assert server.stop() == 0
    calls = [r for r in sent if r.headers.get("mcp-method") == "tools/call"]
    assert [r.headers.get("mcp-param-session") for r in calls] == ["new", handle, handle]
    assert [r.headers.get("mcp-name") for r in calls] == ["run_python", "run_python", "close_session"]
    assert all(json.loads(r.content)["params"]["arguments"]["session"] == r.headers["mcp-param-session"] for r in calls)


async def test_a_header_that_disagrees_with_the_body_is_refused_before_anything_runs(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    with http_server(work_dir, tmp_path / "log") as server:
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "run_python",
                "arguments": {"code": "print(1)", "session": "new"},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": "run_python",
        }
        wrong = httpx2.post(server.url, json=message, headers={**headers, "mcp-param-session": "s-else"}, timeout=30)
        missing = httpx2.post(server.url, json=message, headers=headers, timeout=30)
        assert server.stop() == 0
    for answer in (wrong, missing):
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == -32020, answer.text
    assert "run started" not in (tmp_path / "log").read_text()


async def test_several_workers_behind_one_port_refuse_sessions_and_say_why(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    with http_server(work_dir, tmp_path / "log", RUNNER_HTTP_WORKERS="2") as server:
        async with client_for(server, None) as client:
            refused = await run(client, "x = 1", "new")
            assert refused["status"] == "invalid_arguments", "for good: not busy, which says to retry"
            assert "RUNNER_HTTP_WORKERS=2" in refused["message"]
            assert "Mcp-Param-Session" in refused["message"]
            assert [t.name for t in (await client.list_tools()).tools] == ["run_python"]
            one_shot = await client.call_tool("run_python", {"code": "print(2)"})
            assert check_structured(one_shot.structured_content)["stdout"] == "2\n"
        assert server.stop() == 0


def scrape(server: HttpServer) -> dict[str, float]:
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx2.get(server.base + "/metrics", timeout=30).text):
        for sample in family.samples:
            if sample.name.startswith("runner_sessions_"):
                samples[sample.name] = sample.value
    return samples


async def test_metrics_count_sessions_open_created_expired_closed_and_rolled_back_and_their_memory(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    with http_server(work_dir, tmp_path / "log", RUNNER_SESSION_IDLE_SECONDS="2") as server:
        async with client_for(server, None) as client:
            kept = (await run(client, "data = bytearray(32 * 2**20)", "new"))["session"]
            await run(client, "raise ValueError", kept)
            short = (await run(client, "pass", "new"))["session"]
            await client.call_tool("close_session", {"session": short})
            during = scrape(server)
            assert during["runner_sessions_open"] == 1
            assert during["runner_sessions_created_total"] == 2
            assert during["runner_sessions_closed_total"] == 1
            assert during["runner_sessions_rolled_back_total"] == 1
            assert during["runner_sessions_memory_bytes"] >= 32 * 2**20, "the kept bytearray is the session's own"
            deadline = anyio.current_time() + 20
            while scrape(server)["runner_sessions_expired_total"] < 1:
                assert anyio.current_time() < deadline, "the idle session did not expire"
                await anyio.sleep(0.2)
            ended = scrape(server)
            assert (ended["runner_sessions_open"], ended["runner_sessions_memory_bytes"]) == (0, 0)
            expired = await run(client, "print(data)", kept)
            assert expired["message"].startswith("unknown session")
            assert "unused for 2 s" in expired["message"]
        assert server.stop() == 0


async def test_sessions_die_with_their_server_and_a_new_server_knows_no_handle_of_the_old(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    with http_server(work_dir, tmp_path / "first.log") as server:
        async with client_for(server, None) as client:
            handle = (await run(client, "secret = 'old'", "new"))["session"]
        assert server.stop() == 0, "a graceful stop ends every session"
    assert "session ended" in (tmp_path / "first.log").read_text()
    with http_server(work_dir, tmp_path / "second.log") as server:
        async with client_for(server, None) as client:
            after = await run(client, "print(secret)", handle)
            assert after["status"] == "invalid_arguments"
            assert after["message"].startswith("unknown session")
            assert after["stdout"] == ""
        assert server.stop() == 0
