"""End to end: `python -m runner` over real stdio, driven by the official Python client and by raw JSON-RPC."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from anyio.abc import Process
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from runner.config import Config
from runner.schemas import input_schema, output_schema
from tests.conftest import REPO
from tests.helpers import SEED_PLAIN, alive, check_structured, max_overlap

pytestmark = pytest.mark.anyio


def server_env(work_dir: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "RUNNER_WORK_DIR": str(work_dir),
        "RUNNER_POOL_SIZE": "2",
        **extra,
    }


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text` (run interpreters carry their work dir)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline and alive(int(entry)):
                found.append(int(entry))
    return found


@pytest.fixture
def left_nothing(work_dir: Path) -> AsyncIterator[None]:
    yield
    assert processes_mentioning(str(work_dir)) == []
    assert list(work_dir.iterdir()) == []


@pytest.fixture(params=["legacy", "auto"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def stdio_session(work_dir: Path, errlog: Any, mode: str, **env: str) -> Client:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "runner"], cwd=str(REPO), env=server_env(work_dir, **env)
    )
    return Client(stdio_client(params, errlog=errlog), mode=mode)  # type: ignore[arg-type]


def text_of(result: types.CallToolResult) -> str:
    [block] = result.content
    assert isinstance(block, types.TextContent)
    return block.text


async def test_a_session_lists_the_tool_and_runs_code_in_the_seed_format(
    work_dir: Path, tmp_path: Path, mode: str, left_nothing: None
) -> None:
    with open(tmp_path / "stderr.log", "w") as errlog:
        async with stdio_session(work_dir, errlog, mode) as client:
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
            [tool] = (await client.list_tools()).tools
            assert tool.input_schema == input_schema(Config.from_env({}))
            assert tool.output_schema == output_schema()
            result = await client.call_tool("run_python", {"code": "print(sum(range(10)))", "timeout": 5})
            assert re.fullmatch(SEED_PLAIN, text_of(result))
            structured = check_structured(result.structured_content)
            secret = await client.call_tool("run_python", {"code": "print('OUTPUT' + '-MARKER') # CODE-MARKER"})
            assert check_structured(secret.structured_content)["stdout"] == "OUTPUT-MARKER\n"
            bad = await client.call_tool("run_python", {"code": "x", "timeout": -1})
            assert bad.is_error
            assert "invalid argument 'timeout'" in check_structured(bad.structured_content)["message"]
    log = (tmp_path / "stderr.log").read_text()
    lines = log.splitlines()
    assert all(" request_id=" in line for line in lines), "every log line carries a request_id"
    request_id = structured["request_id"]
    mine = [line for line in lines if f"request_id={request_id}" in line]
    assert [re.search(r"request_id=\w+ (call received|run started|run finished)", m) is not None for m in mine] == [
        True
    ] * 3
    assert "CODE-MARKER" not in log, "no user code in the log at info level"
    assert "OUTPUT-MARKER" not in log, "no user output in the log at info level"
    assert "peak_memory=None" not in log


async def test_ten_parallel_calls_are_bounded_by_the_concurrency_limit(
    work_dir: Path, tmp_path: Path, mode: str, left_nothing: None
) -> None:
    code = "import time\nstart = time.time()\ntime.sleep(0.4)\nprint(start, time.time())"
    intervals: list[tuple[float, float]] = []
    waits: list[float] = []

    async def one(client: Client) -> None:
        result = await client.call_tool("run_python", {"code": code})
        structured = check_structured(result.structured_content)
        start, end = map(float, structured["stdout"].split())
        intervals.append((start, end))
        waits.append(structured["queue_wait_seconds"])

    with open(tmp_path / "stderr.log", "w") as errlog:
        async with stdio_session(work_dir, errlog, mode, RUNNER_MAX_CONCURRENT="3") as client:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for _ in range(10):
                        tg.start_soon(one, client)
    assert len(intervals) == 10
    assert max_overlap(intervals) == 3
    assert sum(1 for wait in waits if wait > 0.2) >= 6, "calls beyond the limit queued"


async def test_a_cancelled_call_kills_its_process_and_the_server_keeps_serving(
    work_dir: Path, tmp_path: Path, mode: str, left_nothing: None
) -> None:
    marker = tmp_path / "pid"
    code = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"
    with open(tmp_path / "stderr.log", "w") as errlog:
        async with stdio_session(work_dir, errlog, mode) as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "run_python", {"code": code, "timeout": 60})
                with anyio.fail_after(20):
                    while not marker.exists() or not marker.read_text():
                        await anyio.sleep(0.02)
                tg.cancel_scope.cancel()
            pid = int(marker.read_text())
            with anyio.fail_after(10):
                while alive(pid):
                    await anyio.sleep(0.02)
            result = await client.call_tool("run_python", {"code": "print('still here')"})
            assert check_structured(result.structured_content)["stdout"] == "still here\n"
    assert "status=cancelled" in (tmp_path / "stderr.log").read_text()


async def rpc(process: Process, message: dict[str, Any]) -> None:
    assert process.stdin is not None
    await process.stdin.send((json.dumps(message) + "\n").encode())


async def read_response(process: Process, buffer: bytearray, request_id: int | None) -> dict[str, Any]:
    assert process.stdout is not None
    while True:
        while b"\n" in buffer:
            line, _, rest = bytes(buffer).partition(b"\n")
            buffer[:] = rest
            message: dict[str, Any] = json.loads(line)
            if message.get("id") == request_id:
                return message
        buffer += await process.stdout.receive()


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


async def start_raw(work_dir: Path, stderr_path: Path) -> tuple[Process, bytearray]:
    with open(stderr_path, "w") as errlog:
        process = await anyio.open_process(
            [sys.executable, "-m", "runner"], cwd=REPO, env=server_env(work_dir), stderr=errlog
        )
    buffer = bytearray()
    await rpc(process, INITIALIZE)
    assert (await read_response(process, buffer, 1))["result"]["protocolVersion"] == "2025-06-18"
    await rpc(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return process, buffer


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "stdin EOF"])
async def test_the_server_stops_cleanly_mid_run_killing_everything_and_exiting_0(
    work_dir: Path, tmp_path: Path, how: str, left_nothing: None
) -> None:
    marker = tmp_path / "pid"
    code = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"
    process, _ = await start_raw(work_dir, tmp_path / "stderr.log")
    async with process:
        call = {"name": "run_python", "arguments": {"code": code, "timeout": 60}}
        await rpc(process, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        with anyio.fail_after(20):
            while not marker.exists() or not marker.read_text():
                await anyio.sleep(0.02)
        if how == "stdin EOF":
            assert process.stdin is not None
            await process.stdin.aclose()
        else:
            process.send_signal(getattr(signal, how))
        with anyio.fail_after(20):
            assert await process.wait() == 0
    assert not alive(int(marker.read_text()))
    assert "server stopped" in (tmp_path / "stderr.log").read_text()


async def test_garbage_on_the_wire_gets_json_rpc_errors_and_the_server_keeps_serving(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    process, buffer = await start_raw(work_dir, tmp_path / "stderr.log")
    async with process:
        assert process.stdin is not None
        await process.stdin.send(b"{this is not json\n")
        assert (await read_response(process, buffer, None))["error"]["code"] == -32700
        await process.stdin.send(b'{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": "x"}\n')
        assert (await read_response(process, buffer, 6))["error"]["code"] == -32600
        await rpc(process, {"jsonrpc": "2.0", "id": 7, "method": "no/such/method"})
        assert (await read_response(process, buffer, 7))["error"]["code"] == -32601
        await rpc(process, {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": 5}})
        assert (await read_response(process, buffer, 8))["error"]["code"] == -32602
        # A line far beyond the largest legal call is dropped without growing the server's memory.
        huge = {"name": "run_python", "arguments": {"code": "#" * 20_000_000}}
        await rpc(process, {"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": huge})
        too_large = await read_response(process, buffer, 10)
        assert too_large["error"]["code"] == -32600
        assert too_large["error"]["message"].startswith("Invalid Request: 20,000,1")
        call = {"name": "run_python", "arguments": {"code": "print('alive')"}}
        await rpc(process, {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": call})
        response = await read_response(process, buffer, 9)
        assert response["result"]["structuredContent"]["stdout"] == "alive\n"
        await process.stdin.aclose()
        with anyio.fail_after(20):
            assert await process.wait() == 0
    log = (tmp_path / "stderr.log").read_text()
    assert re.search(r'invalid message answered error="Invalid Request: 20,000,1\d\d bytes', log)


async def test_progress_reaches_a_client_over_stdio_while_a_long_run_goes_on(
    work_dir: Path, tmp_path: Path, mode: str, left_nothing: None
) -> None:
    messages: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message)

    code = "import time\nfor i in range(3):\n    print('step', i, flush=True)\n    time.sleep(0.9)"
    with open(tmp_path / "stderr.log", "w") as errlog:
        async with stdio_session(work_dir, errlog, mode) as client:
            result = await client.call_tool("run_python", {"code": code}, progress_callback=on_progress)
    assert check_structured(result.structured_content)["status"] == "ok"
    assert len(messages) >= 2
    assert all(m is not None and m.startswith("running for ") for m in messages)
    assert any(m is not None and "last line: step" in m for m in messages)
