"""End to end: `python -m runner` over real stdio, driven by the official Python client and by raw JSON-RPC."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from runner.config import SETTINGS, Config, HttpConfig, markdown_table
from runner.protocol.schemas import input_schema, output_schema
from tests.conftest import REPO
from tests.helpers import (
    RETURNS_ARGUMENTS,
    SEED_PLAIN,
    SIX_MB_CODE,
    SIX_MB_OUTPUT,
    check_returns,
    check_structured,
    children_of,
    living,
    max_overlap,
    processes_mentioning,
    settled,
    settled_async,
)
from tests.raw import raw_server
from tests.tasks_client import TasksExtension, cancel_task, wait_for_task

pytestmark = pytest.mark.anyio


def server_env(work_dir: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "RUNNER_WORK_DIR": str(work_dir),
        "RUNNER_POOL_SIZE": "2",
        # These tests watch runs from the host (pid files in tmp_path): no PID/mount namespaces.
        "RUNNER_SANDBOX": "none",
        # The standard library only (from this checkout the server would take its .sandbox-env and .wheelhouse).
        "RUNNER_PACKAGES": "",
        "RUNNER_WHEELHOUSE": "",
        **extra,
    }


@pytest.fixture
def left_nothing(work_dir: Path) -> Iterator[None]:
    """After the server has exited: within a moment, no process of it or of its runs is alive (what it
    killed on the way out may still be dying) and its work dir is empty."""
    yield
    assert settled(lambda: processes_mentioning(str(work_dir))) == []
    assert settled(lambda: list(work_dir.iterdir())) == []


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
            [tool, _] = (await client.list_tools()).tools
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
            assert await settled_async(lambda: living([pid]), timeout=10) == []
            result = await client.call_tool("run_python", {"code": "print('still here')"})
            assert check_structured(result.structured_content)["stdout"] == "still here\n"
    assert "status=cancelled" in (tmp_path / "stderr.log").read_text()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "stdin EOF"])
async def test_the_server_stops_cleanly_mid_run_killing_everything_and_exiting_0(
    work_dir: Path, tmp_path: Path, how: str, left_nothing: None
) -> None:
    marker = tmp_path / "pid"
    code = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"
    async with raw_server(work_dir, tmp_path / "stderr.log", RUNNER_SANDBOX="none") as session:
        await session.initialize()
        call = {"name": "run_python", "arguments": {"code": code, "timeout": 60}}
        await session.send_line(
            json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}).encode() + b"\n"
        )
        with anyio.fail_after(20):
            while not marker.exists() or not marker.read_text():
                await anyio.sleep(0.02)
        if how != "stdin EOF":
            # For EOF, leaving the block closes stdin and requires exit status 0.
            session.process.send_signal(getattr(signal, how))
            with anyio.fail_after(20):
                assert await session.process.wait() == 0
    # The server killed the run on its way out; the run may take the kernel a moment longer to end.
    assert await settled_async(lambda: living([int(marker.read_text())])) == []
    assert "server stopped" in (tmp_path / "stderr.log").read_text()


async def test_an_oversized_message_is_answered_and_the_server_keeps_serving(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    async with raw_server(work_dir, tmp_path / "stderr.log", RUNNER_MAX_INPUT_MB="0") as session:
        await session.initialize()
        # Far beyond the largest legal call: discarded as it arrives, never held whole.
        huge = {"name": "run_python", "arguments": {"code": "#" * 20_000_000}}
        await session.send_line(
            json.dumps({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": huge}).encode() + b"\n"
        )
        too_large = await session.response(10)
        assert too_large["error"]["code"] == -32600
        assert too_large["error"]["message"].startswith("Invalid Request: 20,000,1")
        alive_call = await session.request(
            "tools/call", {"name": "run_python", "arguments": {"code": "print('alive')"}}
        )
        assert alive_call["result"]["structuredContent"]["stdout"] == "alive\n"
    log = (tmp_path / "stderr.log").read_text()
    assert re.search(r'invalid message answered error="Invalid Request: 20,000,1\d\d bytes', log)


# The initialize request of a client the test plays by hand, as its line.
PIPED_INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
INITIALIZE_LINE = (
    json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": PIPED_INITIALIZE}).encode() + b"\n"
)


@contextlib.contextmanager
def piped_server(work_dir: Path, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m runner` over pipes the test writes and reads by hand, its log in tmp_path/stderr.log;
    killed and its pipes closed at the end whatever happened (an unclosed pipe, collected during a later
    test, fails that test with a ResourceWarning)."""
    with open(tmp_path / "stderr.log", "w") as errlog:
        server = subprocess.Popen(
            [sys.executable, "-m", "runner"],
            cwd=REPO,
            env=server_env(work_dir),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
        )
    try:
        yield server
    finally:
        server.kill()
        server.wait()
        for pipe in (server.stdin, server.stdout):
            with contextlib.suppress(OSError):  # what is left in its buffer cannot be flushed
                assert pipe is not None
                pipe.close()


def answer_ids_until(fd: int, last: int) -> list[int]:
    """The ids of the answers read from `fd` up to the one whose id is `last`, each within a minute."""
    # From the fd itself: select on a buffered reader misses the lines already in its buffer, and the
    # last answers often arrive in one read (a hang found under load).
    ids: list[int] = []
    pending = b""
    while not ids or ids[-1] != last:
        assert select.select([fd], [], [], 60)[0], "no answer within a minute"
        data = os.read(fd, 1 << 16)
        assert data, "the server closed its stdout"
        *lines, pending = (pending + data).split(b"\n")
        ids.extend(json.loads(line)["id"] for line in lines)
    return ids


def test_a_client_that_stops_reading_ends_the_session_with_exit_0(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    with piped_server(work_dir, tmp_path) as server:
        assert server.stdin is not None
        assert server.stdout is not None
        server.stdin.write(INITIALIZE_LINE)
        server.stdin.flush()
        assert json.loads(server.stdout.readline())["id"] == 1
        server.stdout.close()  # no reader left: the server's next write fails with EPIPE
        with contextlib.suppress(BrokenPipeError):
            server.stdin.write(b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}\n')
            server.stdin.flush()
        assert server.wait(timeout=20) == 0
    assert "client closed its end of stdout; shutting down" in (tmp_path / "stderr.log").read_text()


# What a client that never reads may make the server take: a ping line is 42 bytes, so this is some
# 100,000 requests, hundreds of times what the server reads before it stops (256, the pipe and a read).
UNREAD_BYTES_BOUND = 4 * 1024 * 1024
# How long the client's pipe stays full, once the server says it paused, before it is taken to have
# stopped reading it.
QUIET_SECONDS = 1.0


def vm_rss_mib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) // 1024


def test_a_client_that_writes_requests_and_never_reads_is_held_back_by_its_full_pipe_and_served_once_it_reads(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    # Found by a review: the server read on and started a task per request, each holding its answer
    # for a client that never read one (70 MiB -> 1.29 GB in 40 s of pings).
    with piped_server(work_dir, tmp_path) as server:
        assert server.stdin is not None
        assert server.stdout is not None
        server.stdin.write(INITIALIZE_LINE + b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        server.stdin.flush()
        assert answer_ids_until(server.stdout.fileno(), 1) == [1]
        rss_before = vm_rss_mib(server.pid)

        ping = b'{"jsonrpc": "2.0", "id": 7, "method": "ping"}\n'
        chunk, written, rest = ping * 1000, 0, b""
        fd = server.stdin.fileno()
        os.set_blocking(fd, False)
        # Write until the server says it paused and the pipe stays full, or past the bound (it reads on).
        # Not the pipe's being full alone: a server starved of CPU on a busy machine reads nothing for
        # seconds before it pauses (found by a clean clone beside busy loops).
        paused = "client has too many requests unanswered; reading paused until it reads answers unanswered=256"
        deadline = time.monotonic() + 60
        while written < UNREAD_BYTES_BOUND:
            if select.select([], [fd], [], QUIET_SECONDS)[1]:
                with contextlib.suppress(BlockingIOError):
                    data = rest or chunk
                    sent = os.write(fd, data)
                    written, rest = written + sent, data[sent:]
            elif paused in (tmp_path / "stderr.log").read_text():
                break
            else:
                assert time.monotonic() < deadline, "the server neither read on nor paused within a minute"
        assert written < UNREAD_BYTES_BOUND, "the server read on, holding what it could not answer"
        assert vm_rss_mib(server.pid) < rss_before + 100

        # Once the client reads, every request it sent is answered, and the server goes on.
        os.set_blocking(fd, True)
        last = rest + b'{"jsonrpc": "2.0", "id": 8, "method": "ping"}\n'
        stdin = server.stdin

        def write_last() -> None:  # blocks until the server reads; fails if the test killed it
            with contextlib.suppress(OSError):
                stdin.write(last)

        writer = threading.Thread(target=write_last, daemon=True)
        writer.start()
        answers = answer_ids_until(server.stdout.fileno(), 8)
        assert answers == [7] * ((written + len(rest)) // len(ping)) + [8]
        writer.join()
        server.stdin.close()
        assert server.wait(timeout=20) == 0


async def test_requests_past_the_bound_that_are_cancelled_leave_room_for_more(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    # A cancelled request gets no answer: it must leave the count of those in flight all the same, or
    # a client that cancels would find the server reading nothing more after 256 cancels.
    call = {"name": "run_python", "arguments": {"code": "pass"}}
    async with raw_server(work_dir, tmp_path / "stderr.log", RUNNER_MAX_QUEUE="0") as session:
        await session.initialize()
        long_run = {"name": "run_python", "arguments": {"code": "import time\ntime.sleep(120)", "timeout": 300}}
        await session.send({"jsonrpc": "2.0", "id": "long", "method": "tools/call", "params": long_run})
        for index in range(300):  # each waits for the one slot, behind the long run, and is cancelled
            await session.send({"jsonrpc": "2.0", "id": index, "method": "tools/call", "params": call})
            await session.notify("notifications/cancelled", {"requestId": index})
        assert (await session.request("ping"))["result"] == {}
        await session.notify("notifications/cancelled", {"requestId": "long"})
    assert "too many requests unanswered" not in (tmp_path / "stderr.log").read_text()


INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "file", "version": "1"}}


def served_from_a_file(
    work_dir: Path, tmp_path: Path, text: str
) -> tuple[subprocess.CompletedProcess[bytes], dict[int, Any]]:
    """The server run with the file of `text` on its stdin, to its exit 0; its answers by id."""
    requests = tmp_path / "requests.jsonl"
    requests.write_text(text)
    with open(requests, "rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "runner"],
            cwd=REPO,
            env=server_env(work_dir),
            stdin=stdin,
            capture_output=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done, {message["id"]: message for message in map(json.loads, done.stdout.splitlines())}


def test_requests_from_a_file_on_stdin_are_all_answered_blank_lines_skipped_and_the_server_exits_0(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    # Found by a new user: `python -m runner < requests.jsonl` died in a 127-line traceback (the event
    # loop cannot wait on a regular file), and a blank line got a parse error.
    call = {"name": "run_python", "arguments": {"code": "import time\ntime.sleep(0.5)\nprint(6 * 7)"}}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call},
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
        # Cancelled in the file: it gets no answer, so it is not waited for.
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {**call, "arguments": {"code": "import time\ntime.sleep(30)"}},
        },
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}},
    ]
    text = "\n".join(json.dumps(line) for line in lines).replace("\n", "\n\n\r\n", 1) + "\n\n"
    done, answers = served_from_a_file(work_dir, tmp_path, text)
    assert sorted(answers) == [1, 2, 3], done.stdout  # no parse error for the blank lines
    assert answers[2]["result"]["structuredContent"]["stdout"] == "42\n"
    assert b"Traceback" not in done.stderr


def test_a_request_before_initialize_is_told_to_initialize_first_and_the_server_serves_on(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    # Found by a first hour: a valid tools/call sent by hand got "Invalid request parameters", nothing in
    # the log (over HTTP, stateless, the same call runs).
    call = {"name": "run_python", "arguments": {"code": "print(6 * 7)"}}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call},
        {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": INITIALIZE},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "run_python", "arguments": []}},
    ]
    done, answers = served_from_a_file(work_dir, tmp_path, "".join(json.dumps(line) + "\n" for line in lines))
    assert answers[1]["error"] == {
        "code": -32602,
        "message": "Invalid request parameters: this connection is not initialized yet; send initialize, "
        "then notifications/initialized, first",
        "data": "",
    }
    assert b"request before initialize" in done.stderr
    assert answers[3]["result"]["structuredContent"]["stdout"] == "42\n"
    assert answers[4]["error"]["message"] != answers[1]["error"]["message"], "bad params are not taken for it"


def test_dev_null_on_stdin_stops_the_server_at_once_with_exit_0_and_one_line_that_says_why(
    work_dir: Path, left_nothing: None
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runner"],
        cwd=REPO,
        env=server_env(work_dir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, b""), done.stderr.decode()[-3000:]
    said = [line for line in done.stderr.decode().splitlines() if "stdin is /dev/null" in line]
    assert len(said) == 1, done.stderr.decode()
    assert "-i" in said[0]
    assert "Traceback" not in done.stderr.decode()


async def test_the_python_client_accepts_an_image_resources_and_a_result_from_handed_in_files(
    work_dir: Path, tmp_path: Path, mode: str, left_nothing: None
) -> None:
    with open(tmp_path / "stderr.log", "w") as errlog:
        async with stdio_session(work_dir, errlog, mode) as client:
            # The client checks structuredContent against the output schema as it receives it.
            result = await client.call_tool("run_python", RETURNS_ARGUMENTS)
            escape = {"path": "../../planted", "content": "x"}
            refused = await client.call_tool("run_python", {"code": "print('ran')", "files": [escape]})
    check_returns(result.model_dump(by_alias=True, mode="json", exclude_none=True))
    assert refused.is_error
    structured = check_structured(refused.structured_content)
    assert structured["status"] == "invalid_arguments"
    assert structured["message"].startswith("invalid argument 'files[0]' ('../../planted'): every part of the path")
    log = (tmp_path / "stderr.log").read_text()
    assert f"request_id={structured['request_id']} run started" not in log, "nothing ran"
    assert not (work_dir.parent / "planted").exists()


async def test_a_6_mb_stdout_shown_cut_is_read_back_byte_for_byte_through_its_link_and_a_short_one_gets_none(
    work_dir: Path, tmp_path: Path, mode: str, left_nothing: None
) -> None:
    with open(tmp_path / "stderr.log", "w") as errlog:
        async with stdio_session(work_dir, errlog, mode) as client:
            result = await client.call_tool("run_python", {"code": SIX_MB_CODE})
            [text, link] = result.content
            assert isinstance(link, types.ResourceLink)
            read = await client.read_resource(link.uri)
            listed = await client.list_resources()
            short = await client.call_tool("run_python", {"code": "print('short')"})
    assert isinstance(text, types.TextContent)
    structured = check_structured(result.structured_content)
    assert structured["stdout_truncated"]
    assert structured["stdout_bytes"] == len(SIX_MB_OUTPUT)
    assert structured["full_output"] == [
        {
            "stream": "stdout",
            "uri": str(link.uri),
            "bytes": len(SIX_MB_OUTPUT),
            "complete": True,
            "expires_in_seconds": 3600,
        }
    ]
    [contents] = read.contents
    assert isinstance(contents, types.TextResourceContents)
    assert contents.text.encode() == SIX_MB_OUTPUT
    # The app view is listed too, first: readable by every caller (tests/e2e/protocol/test_view.py).
    assert [str(resource.uri) for resource in listed.resources] == ["ui://python-runner/run.html", str(link.uri)]
    assert "short" in text_of(short)  # text_of takes the one block there is: no link for output shown whole
    assert "full_output" not in check_structured(short.structured_content)


async def test_over_stdio_a_long_run_becomes_a_task_that_is_polled_and_cancelled_and_the_server_exits_cleanly(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "runner"], cwd=str(REPO), env=server_env(work_dir)
    )
    extension = TasksExtension()
    with open(tmp_path / "stderr.log", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="auto", extensions=[extension]) as client:  # type: ignore[arg-type]
            resolved = await client.call_tool("run_python", {"code": "import time\ntime.sleep(1.5)\nprint('late')"})
            created = await client.session.call_tool(
                "run_python", {"code": "import time\ntime.sleep(60)", "timeout": 120}, allow_claimed=True
            )
            await cancel_task(client.session, created.task_id)
            ended = await wait_for_task(client.session, created.task_id)
            left_working = await client.session.call_tool(
                "run_python", {"code": "import time\ntime.sleep(60)", "timeout": 120}, allow_claimed=True
            )
    assert len(extension.created) == 1
    assert check_structured(resolved.structured_content)["stdout"] == "late\n"
    assert ended["status"] == "cancelled"
    assert left_working.result_type == "task"  # its run dies with the server (left_nothing)


def test_the_server_refuses_to_start_on_a_bad_value_with_one_line_and_exit_status_2() -> None:
    env = {**os.environ, "RUNNER_MAX_MEMORY_MB": "lots"}
    done = subprocess.run(
        [sys.executable, "-m", "runner"], cwd=REPO, env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    assert "RUNNER_MAX_MEMORY_MB" in lines[0]
    assert "an integer from 32 to 1048576" in lines[0]


@pytest.mark.parametrize(("kept_mb", "warned"), [("6", False), ("7", True), ("16", True)])
def test_a_server_whose_kept_output_a_typescript_client_over_stdio_could_not_read_warns_at_start(
    work_dir: Path, kept_mb: str, warned: bool
) -> None:
    # Found by a review: a TypeScript SDK client's stdio transport takes a message of 10 MiB at most; a
    # read of 16 MiB of kept output (the default then) closed its connection.
    env = server_env(work_dir, RUNNER_MAX_KEPT_OUTPUT_MB=kept_mb, RUNNER_SANDBOX="none")
    command = [sys.executable, "-m", "runner"]
    done = subprocess.run(command, cwd=REPO, env=env, input="", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    said = f"RUNNER_MAX_KEPT_OUTPUT_MB={kept_mb}: reading a kept stream may answer more than 10 MiB"
    assert (said in done.stderr) == warned, done.stderr


@pytest.mark.parametrize(
    ("settings", "warned"),
    [({}, False), ({"RUNNER_MAX_RETURNED_MB": "12", "RUNNER_MAX_FILES_MB": "12"}, True)],
    ids=["defaults", "12-mib-returned"],
)
def test_a_server_whose_calls_answers_a_typescript_client_over_stdio_could_not_read_warns_at_start(
    work_dir: Path, settings: dict[str, str], warned: bool
) -> None:
    # Found by a second look: a 9 MiB file returned inline closed a TypeScript SDK client's connection,
    # with no warning at start.
    env = server_env(work_dir, **settings)
    command = [sys.executable, "-m", "runner"]
    done = subprocess.run(command, cwd=REPO, env=env, input="", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert ("a call's answer may be more than 10 MiB" in done.stderr) == warned, done.stderr


def test_python_m_runner_config_prints_the_table() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runner.config"], cwd=REPO, capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout == markdown_table(SETTINGS, Config(), HttpConfig())


def test_the_server_refuses_to_start_on_a_path_that_is_not_there_with_exit_status_2(tmp_path: Path) -> None:
    env = {**os.environ, "RUNNER_WORK_DIR": str(tmp_path / "missing")}
    done = subprocess.run(
        [sys.executable, "-m", "runner"], cwd=REPO, env=env, capture_output=True, text=True, timeout=30
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"python-runner-mcp: invalid configuration: RUNNER_WORK_DIR: {str(tmp_path / 'missing')!r} does not exist "
        f"({tmp_path} has no 'missing')\n"
    )


async def test_reads_of_a_kept_output_hold_their_budget_until_their_answers_are_written_not_built(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    # Found by a review: over stdio a read's answer left the reads' budget once built, so a client that
    # never read its answers could pile up built answers (each 8 MiB read of control characters ~60 MiB).
    log = tmp_path / "stderr.log"
    code = f"import sys; sys.stdout.write(chr(1) * {8 * 2**20 - 1000})"
    async with raw_server(work_dir, log, RUNNER_MAX_KEPT_OUTPUT_MB="8") as session:
        await session.initialize()
        result = await session.request("tools/call", {"name": "run_python", "arguments": {"code": code}})
        [uri] = set(re.findall(r"runner://output/[^\"]+", json.dumps(result)))
        assert session.process.stdout is not None
        unread = bytearray()
        for index in range(8):
            read = {"jsonrpc": "2.0", "id": f"read-{index}", "method": "resources/read", "params": {"uri": uri}}
            await session.send(read)
            if not index:  # its answer is built and being written: 11 MiB, more than the pipe takes unread
                unread += await session.process.stdout.receive(1)
                continue
            with anyio.move_on_after(20):
                while log.read_text().count("read refused") < index:
                    await anyio.sleep(0.02)
            assert log.read_text().count("read refused") == index, "a read was admitted beside an unwritten answer"
        with anyio.fail_after(60):  # read as a client does, a MiB at a time
            while unread.count(b"\n") < 8:
                unread += await session.process.stdout.receive(2**20)
        answers = [json.loads(line) for line in bytes(unread).splitlines()]
        again = await session.request("resources/read", {"uri": uri})
    assert "result" in answers[0]
    assert all(answer["error"]["code"] == -32010 for answer in answers[1:])
    assert "busy: " in answers[1]["error"]["message"]
    assert "result" in again, "once written, an answer leaves the budget"


@pytest.mark.parametrize("sandbox", ["none", "none-posix-spawn"])
async def test_a_plain_run_cannot_read_the_real_servers_environment_nor_its_memory(
    work_dir: Path, tmp_path: Path, sandbox: str
) -> None:
    """The real server, not a stand-in (found by a review of the claims: the adversarial suite made its
    own process non-dumpable in the server's stead). A root server's plain run has a uid of its own and
    no capability; a non-root server's shares its uid, and the server's being non-dumpable is what
    denies it: that case is the image's (tests/deploy/test_container.py, the server as uid 10001)."""
    marker = "marker-of-the-servers-environment-0123456789"
    with open(tmp_path / "stderr.log", "w") as errlog:
        async with stdio_session(work_dir, errlog, "auto", RUNNER_SANDBOX=sandbox, SERVER_MARKER=marker) as client:
            [pid] = [pid for pid in children_of(os.getpid()) if b"runner" in Path(f"/proc/{pid}/cmdline").read_bytes()]
            code = (
                "for name in ('environ', 'mem'):\n"
                "    try:\n"
                f"        print(name, open('/proc/{pid}/' + name, 'rb').read(64))\n"
                "    except OSError as exc:\n"
                "        print(name, type(exc).__name__)\n"
            )
            result = await client.call_tool("run_python", {"code": code})
    done = check_structured(result.structured_content)
    assert done["status"] == "ok", done
    assert done["stdout"] == "environ PermissionError\nmem PermissionError\n", done
