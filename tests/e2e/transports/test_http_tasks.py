"""The tasks extension over Streamable HTTP, against `python -m runner --transport http` as a real process,
with the official Python client: a task belongs to the token that made it, tasks/* need `Mcp-Name` to be
the task id (SEP-2663's routing header), the extension is advertised, and several workers offer none."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError

from tests.code_mode import peak_memory
from tests.e2e.transports.test_http_hostile_requests import head_of, unread_post
from tests.e2e.transports.test_http_sessions import ALICE, BOB, client_for
from tests.helpers import check_structured
from tests.http_server import HttpServer, http_server
from tests.tasks_client import EXTENSION, TasksExtension, cancel_task, get_task, update_task, wait_for_task

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

FOREVER = "import time\nprint('started', flush=True)\ntime.sleep(60)"


def tasks_client(server: HttpServer, token: str | None) -> contextlib.AbstractAsyncContextManager[Client]:
    """The official client, declaring the tasks extension (tests/tasks_client.py)."""
    return client_for(server, token, extensions=[TasksExtension()])


def posted(
    server: HttpServer, method: str, params: dict[str, Any], *, declared: bool = True, **headers: str
) -> httpx2.Response:
    """One 2026-07-28 request written by hand, declaring the tasks extension unless told not to."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {
            **params,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}} if declared else {},
            },
        },
    }
    base = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": method,
    }
    return httpx2.post(server.url, json=message, headers={**base, **headers}, timeout=30)


async def test_a_task_is_its_tokens_and_unknown_to_another_for_every_method_and_its_result_comes_back_whole(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice:{ALICE}\nbob:{BOB}\n")
    with http_server(work_dir, tmp_path / "log", RUNNER_AUTH_TOKENS_FILE=str(tokens)) as server:
        async with tasks_client(server, ALICE) as alice, tasks_client(server, BOB) as bob:
            discovered = alice.session.server_capabilities
            created = await alice.session.call_tool("run_python", {"code": FOREVER, "timeout": 120}, allow_claimed=True)
            mine = await get_task(alice.session, created.task_id)
            with pytest.raises(MCPError) as foreign_get:
                await get_task(bob.session, created.task_id)
            with pytest.raises(MCPError) as foreign_cancel:
                await cancel_task(bob.session, created.task_id)
            with pytest.raises(MCPError) as foreign_update:
                await update_task(bob.session, created.task_id, {})
            still = await get_task(alice.session, created.task_id)
            await cancel_task(alice.session, created.task_id)
            ended = await wait_for_task(alice.session, created.task_id)
            resolved = await alice.call_tool("run_python", {"code": "import time\ntime.sleep(1.5)\nprint('whole')"})
        assert server.stop() == 0
    assert discovered is not None
    assert discovered.extensions == {EXTENSION: {}, "io.modelcontextprotocol/ui": {}}  # tasks, and the app view
    assert mine["status"] == still["status"] == "working"
    for refused in (foreign_get.value, foreign_cancel.value, foreign_update.value):
        assert refused.code == -32602
        assert refused.message.startswith("task not found: ")  # as for an id never made
    assert ended["status"] == "cancelled"
    assert check_structured(resolved.structured_content)["stdout"] == "whole\n"


async def test_tasks_methods_need_mcp_name_to_be_the_task_id(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """Stands for tasks-request-headers's sep-2663-routing-headers-accepted-on-tasks-get and
    sep-2663-server-rejects-mismatched-mcp-name-on-tasks-get."""
    with http_server(work_dir, tmp_path / "log") as server:
        async with tasks_client(server, None) as client:
            created = await client.session.call_tool(
                "run_python", {"code": FOREVER, "timeout": 120}, allow_claimed=True
            )
            task_id = created.task_id
            matched = posted(server, "tasks/get", {"taskId": task_id}, **{"mcp-name": task_id})
            wrong = posted(server, "tasks/get", {"taskId": task_id}, **{"mcp-name": "t-else"})
            missing = posted(server, "tasks/cancel", {"taskId": task_id})
            still = await get_task(client.session, task_id)
            await cancel_task(client.session, task_id)
            await wait_for_task(client.session, task_id)
        assert server.stop() == 0
    assert matched.status_code == 200, matched.text
    assert "working" in matched.text
    for refused in (wrong, missing):
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == -32020, refused.text
    assert still["status"] == "working"  # the refused cancel did nothing


async def test_several_workers_behind_one_port_offer_no_tasks_and_keep_no_output(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """The kernel, not Mcp-Name, picks a worker: a task or a link made on one would be unknown on the
    other most of the time, so neither is offered."""
    with http_server(work_dir, tmp_path / "log", RUNNER_HTTP_WORKERS="2") as server:
        async with tasks_client(server, None) as client:
            capabilities = client.session.server_capabilities
            result = await client.session.call_tool(
                "run_python", {"code": "import sys, time\ntime.sleep(1.2)\nprint('x' * 30_000)"}, allow_claimed=True
            )
        assert server.stop() == 0
    assert capabilities is not None
    assert EXTENSION not in (capabilities.extensions or {})
    assert not ({})
    structured = check_structured(result.structured_content)
    assert structured["stdout_truncated"]
    assert "full_output" not in structured


async def test_a_request_without_the_extension_learns_what_it_lacks_before_any_header_is_judged(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    with http_server(work_dir, tmp_path / "log") as server:
        answer = posted(server, "tasks/get", {"taskId": "t-anything"}, declared=False)  # and no Mcp-Name
        assert server.stop() == 0
    assert answer.json()["error"]["code"] == -32021, answer.text


async def test_a_call_in_flight_when_the_server_is_told_to_stop_is_answered_within_the_grace_not_as_a_task(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """Found by a review: such a call became a task a moment later, whose run the stop then killed."""
    marker = tmp_path / "started"
    code = f"import time\nopen({str(marker)!r}, 'w').close()\ntime.sleep(2)\nprint('finished')"
    with http_server(work_dir, tmp_path / "log") as server:
        answers: list[httpx2.Response] = []

        async def call() -> None:
            params = {"name": "run_python", "arguments": {"code": code}}
            answers.append(
                await anyio.to_thread.run_sync(
                    lambda: posted(server, "tools/call", params, **{"mcp-name": "run_python"})
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(20):
                while not marker.exists():
                    await anyio.sleep(0.02)
            server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0
    [answer] = answers
    assert answer.status_code == 200, answer.text
    body = answer.text
    data = json.loads(body[body.index("{") :].splitlines()[0]) if "data:" in body else answer.json()
    result = data["result"]
    assert result.get("resultType") == "complete", result
    assert check_structured(result["structuredContent"])["stdout"] == "finished\n"
    assert "task created" not in (tmp_path / "log").read_text()


def unread_get(server: HttpServer, task_id: str, token: str, request_id: int) -> socket.socket:
    """tasks/get of `task_id` on a connection of its own, its answer read only as far as `head_of` reads."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
    }
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tasks/get", "params": {"taskId": task_id, "_meta": meta}}
    versioned = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tasks/get", "mcp-name": task_id}
    return unread_post(server, message, token, **versioned)


async def once_not_busy(ask: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """`ask`'s answer, asked again while it is refused busy (-32010: as the refusal says, once the
    answers in flight have gone; a closed connection's goes once the server has seen it close)."""
    with anyio.fail_after(30):
        while True:
            try:
                return await ask()
            except MCPError as busy:
                if busy.code != -32010:
                    raise
            await anyio.sleep(0.05)


async def test_tasks_get_of_a_large_result_never_read_is_bounded_as_a_read_of_kept_output_is(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    # Found by a review: each tasks/get built the result's answer again and held it until the client
    # read it, any number of them: a 1.2 MB result asked on 500 connections that read a byte each 10 s
    # held 1.2 GB of the server's memory and 1.5 GB of the kernel's. Now it is admitted against the
    # budget of reads of kept output (`runner.protocol.reads`), and the rest are refused busy.
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice:{ALICE}\nbob:{BOB}\n")
    code = "import sys, time\ntime.sleep(1.5)\nsys.stdout.write(chr(1) * 4_000_000)"
    # The cap counts characters as shown: each chr(1) is "\\x01", so 2,500,000 of them are shown.
    env = {"RUNNER_AUTH_TOKENS_FILE": str(tokens), "RUNNER_MAX_OUTPUT_CHARS": "10000000"}
    with http_server(work_dir, tmp_path / "log", **env) as server:
        async with tasks_client(server, ALICE) as alice:
            created = await alice.session.call_tool("run_python", {"code": code, "timeout": 60}, allow_claimed=True)
            ended = await wait_for_task(alice.session, created.task_id)
            before = peak_memory(server.process.pid)
            gets = [unread_get(server, created.task_id, ALICE, n) for n in range(8)]
            heads = [head_of(connection) for connection in gets]
            held = peak_memory(server.process.pid) - before
            for connection in gets:
                connection.close()
            again = await once_not_busy(lambda: wait_for_task(alice.session, created.task_id))
        assert server.stop() == 0
    assert ended["status"] == again["status"] == "completed"
    assert len(json.dumps(again["result"])) > 20_000_000  # each chr(1) is "\u0001" in its JSON
    answered = [head for head in heads if b'"result"' in head]
    refused = [head for head in heads if b'"error"' in head]
    # One in flight (a second would pass half the budget, 144 MiB); before, all eight, 230 MiB each.
    # Found by a clean clone: 3 of 8, each let go as uvicorn took its body whole (`PIECE_BYTES`).
    assert (len(answered), len(refused)) == (1, 7)
    assert all(b"-32010" in head and b"busy: " in head and b"then ask again" in head for head in refused)
    assert held < 400 * 2**20
