"""End to end: a `notifications/cancelled` POSTed beside a large request reaches it by its id, the one the
SDK parsed from its body, whatever its size and wherever its members are (runner/transports/cancels.py)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.e2e.transports.test_http import ALICE, JSON_AND_SSE, sse_messages
from tests.helpers import living, settled_async
from tests.http_server import HttpServer, http_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

# The version of the handshake era, whose clients cancel by a POST of its own.
LEGACY = {"mcp-protocol-version": "2025-06-18"}


def tokens(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "tokens"
    path.write_text(f"alice:{ALICE}\n")
    return {"RUNNER_AUTH_TOKENS_FILE": str(path)}


def posted(server: HttpServer, body: bytes) -> httpx2.Response:
    headers = {**JSON_AND_SSE, **LEGACY, "authorization": f"Bearer {ALICE}"}
    return httpx2.post(server.url, content=body, headers=headers, timeout=60)


def cancel(server: HttpServer, request_id: str | int) -> None:
    message = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
    assert posted(server, json.dumps(message).encode()).status_code == 202


def waiting_code(marker: Path) -> str:
    """A run that says its pid, then sleeps, after a comment of nearly 1 MiB (code's bound)."""
    padding = "# " + "x" * (2**20 - 4096) + "\n"
    return padding + f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"


async def pid_written(marker: Path) -> int:
    with anyio.fail_after(30):
        while not marker.exists() or not marker.read_text():
            await anyio.sleep(0.02)
    return int(marker.read_text())


async def cancelled_by(server: HttpServer, body: bytes, marker: Path, others: list[Any], real: str | int) -> None:
    """POST `body`, a call that runs `waiting_code`; cancels naming each of `others` leave it running,
    and one naming `real` ends it, answered with no JSON-RPC answer."""
    answers: list[httpx2.Response] = []

    async def call() -> None:
        answers.append(await anyio.to_thread.run_sync(posted, server, body))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        pid = await pid_written(marker)
        for other in others:
            cancel(server, other)
        assert await settled_async(functools.partial(living, [pid]), timeout=1) == [pid], "still running"
        cancel(server, real)
        assert await settled_async(functools.partial(living, [pid]), timeout=10) == [], "cancelled"
    [answer] = answers
    assert answer.status_code in (200, 204)
    assert sse_messages(answer.text) == [], "a cancelled request gets no JSON-RPC answer"


async def test_a_call_of_a_1_mib_body_is_cancelled_by_its_id_wherever_its_members_are(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    # Found by a review: a body over 64 KiB was not parsed here, its method and id looked for in its first
    # and last 4 KiB only; with its id and method after a long params, its cancels were dropped.
    marker = tmp_path / "pid"
    arguments = {"code": waiting_code(marker), "stdin": "y" * 8192, "timeout": 60}
    params = {"name": "run_python", "arguments": arguments}
    body = json.dumps({"jsonrpc": "2.0", "params": params, "id": 7, "method": "tools/call"}).encode()
    assert len(body) > 2**20
    with http_server(work_dir, tmp_path / "log", **tokens(tmp_path)) as server:
        await cancelled_by(server, body, marker, [], 7)
        assert "status=cancelled" in server.log.read_text()
        assert server.stop() == 0


async def test_a_large_call_with_id_keys_nested_before_and_after_its_own_is_cancelled_by_its_real_id_only(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    # Found by a review: the id of a large body was the first "id" key of its first 4 KiB, a nested one
    # (here in `_meta`), so a cancel of that id ended the call, and one of its real id was dropped.
    marker = tmp_path / "pid"
    arguments = {"code": waiting_code(marker), "timeout": 60}
    params = {"_meta": {"id": "before"}, "name": "run_python", "arguments": arguments}
    message = {"jsonrpc": "2.0", "method": "tools/call", "params": params, "id": "real", "z": {"id": "after"}}
    body = json.dumps(message).encode()
    with http_server(work_dir, tmp_path / "log", **tokens(tmp_path)) as server:
        await cancelled_by(server, body, marker, ["before", "after"], "real")
        assert server.stop() == 0
