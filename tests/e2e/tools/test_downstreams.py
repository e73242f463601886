"""Code mode against the downstream servers users have: @modelcontextprotocol/server-everything over
stdio (text, sums, images, structured output, a long operation with progress), and a second
python-runner-mcp over Streamable HTTP with a bearer token, reached by callers of an HTTP server of
ours with two tokens. Downstreams die and come back; runs time out; a run floods its channel."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.code_mode import hostile, run, run_once, stdio_env, stdio_params, stdio_session, tools_file, waited_out
from tests.conftest import REPO
from tests.helpers import check_structured, children_of, processes_mentioning, settled
from tests.http_server import HttpServer, http_server, server_env
from tests.npm import npm_ci_once
from tests.tasks_client import TasksExtension

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

DOWNSTREAM = REPO / "tests" / "downstream"
EVERYTHING = DOWNSTREAM / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
ALLOWED = ["echo", "get-sum", "get-tiny-image", "get-structured-content", "trigger-long-running-operation"]
ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef01"
REMOTE = "remote-token-0123456789abcdef"


@pytest.fixture(scope="module")
def everything() -> dict[str, Any]:
    """server-everything from tests/downstream's lock, as a tools file entry."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for @modelcontextprotocol/server-everything")
    npm_ci_once(npm, DOWNSTREAM, 200, skip_if_unreachable=False)
    return {"command": node, "args": [str(EVERYTHING), "stdio"], "tools": ALLOWED}


@contextlib.asynccontextmanager
async def http_client(server: HttpServer, token: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60)) as http,
        Client(streamable_http_client(server.url, http_client=http)) as client,  # type: ignore[arg-type]
    ):
        yield client


async def test_each_kind_of_result_comes_back_as_its_value_and_a_long_call_is_named_in_the_progress(
    work_dir: Path, tmp_path: Path, everything: dict[str, Any]
) -> None:
    path = tools_file(tmp_path, every=everything)
    code = (
        "import mcp_tools\n"
        "every = mcp_tools.every\n"
        "print(repr(every.echo(message='hi')))\n"
        "print(repr(every.get_sum(a=1, b=2)))\n"
        "image = every.get_tiny_image()\n"
        "print([block['type'] for block in image], image[1]['mimeType'])\n"
        "print(sorted(every.get_structured_content(location='Chicago')))\n"
        "print(every.trigger_long_running_operation(duration=2, steps=4))\n"
    )
    messages: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            result = await client.call_tool("run_python", {"code": code, "timeout": 30}, progress_callback=progress)
    done = check_structured(result.structured_content)
    assert done["status"] == "ok", done
    assert done["stdout"].splitlines() == [
        "'Echo: hi'",
        "'The sum of 1 and 2 is 3.'",
        "['text', 'image', 'text'] image/png",
        "['conditions', 'humidity', 'temperature']",
        "Long running operation completed. Duration: 2 seconds, Steps: 4.",
    ]
    assert any("calling the tool every.trigger-long-running-operation" in message for message in messages), messages
    log = (tmp_path / "stderr.log").read_text()
    assert 'tool server stderr server=every line="Starting default (STDIO) server..."' in log


async def test_names_a_run_gets_wrong_are_tool_errors_that_say_the_right_one_and_help_lists_a_servers_tools(
    work_dir: Path, tmp_path: Path, everything: dict[str, Any]
) -> None:
    # Found by a first hour: call() with a tool's Python name said "no such tool"; a tool not allowed, got
    # as an attribute, said "no such tool here" under the class name _mcp_NoSuchTool; an unknown server
    # was a plain AttributeError; help(mcp_tools.every) showed the class's own help and no tool.
    path = tools_file(tmp_path, every=everything)
    code = (
        "import contextlib, io, mcp_tools\n"
        "for wrong in (lambda: mcp_tools.call('every', 'get_sum', {'a': 1, 'b': 2}), lambda: mcp_tools.every.get_env,"
        " lambda: mcp_tools.nowhere):\n"
        "    try:\n"
        "        wrong()\n"
        "    except mcp_tools.ToolError as exc:\n"
        "        print(type(exc).__name__, exc)\n"
        "shown = io.StringIO()\n"
        "with contextlib.redirect_stdout(shown):\n"
        "    help(mcp_tools.every)\n"
        "print('get_sum(a, b)' in shown.getvalue(), shown.getvalue().count('Input schema:'))\n"
        # What a worker process's pickle needs (found by a review of this: the error did not pickle).
        "import pickle\n"
        "again = pickle.loads(pickle.dumps((mcp_tools.every, mcp_tools.every.get_sum)))\n"
        "print(again == (mcp_tools.every, mcp_tools.every.get_sum), end=' ')\n"
        "try:\n"
        "    mcp_tools.nowhere\n"
        "except mcp_tools.ToolError as exc:\n"
        "    print(repr(pickle.loads(pickle.dumps(exc))))\n"
        "from mcp_tools import *\n"
        "print(ToolError is mcp_tools.ToolError, every is mcp_tools.every)\n"
    )
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", done
    assert done["stdout"].splitlines() == [
        "ToolError every.get_sum: the server calls this tool 'get-sum': mcp_tools.call takes the server's own "
        "names (mcp_tools.every.get_sum is its function)",
        "ToolError every.get_env: no such tool here, or not one this run may call (help(mcp_tools.every) lists "
        "those it may)",
        "ToolError nowhere: no such server here (help(mcp_tools) lists them)",
        f"True {len(ALLOWED)}",
        "True ToolError('nowhere: no such server here (help(mcp_tools) lists them)')",
        "True True",
    ]


async def test_a_downstream_killed_mid_call_fails_that_call_only_and_is_started_again(
    work_dir: Path, tmp_path: Path, everything: dict[str, Any]
) -> None:
    path = tools_file(tmp_path, every=everything)
    code = (
        "import mcp_tools\n"
        "try:\n"
        "    mcp_tools.every.trigger_long_running_operation(duration=20, steps=2)\n"
        "except mcp_tools.ToolError as exc:\n"
        "    print(exc)\n"
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            async with anyio.create_task_group() as tg:
                results: list[dict[str, Any]] = []
                calling = anyio.Event()

                async def progress(done: float, total: float | None, message: str | None) -> None:
                    if "calling the tool every.trigger-long-running-operation" in (message or ""):
                        calling.set()

                async def call() -> None:
                    arguments = {"code": code, "timeout": 30}
                    result = await client.call_tool("run_python", arguments, progress_callback=progress)
                    results.append(check_structured(result.structured_content))

                tg.start_soon(call)
                # Killed once the run says it waits for the tool (its 20 s operation), not after a fixed
                # 1.5 s: on a busy machine the run, or the downstream, may not have started by then.
                with anyio.fail_after(25):
                    await calling.wait()
                    while len(first := processes_mentioning(str(EVERYTHING))) != 1:
                        await anyio.sleep(0.05)
                os.kill(first[0], signal.SIGKILL)
            assert results[0]["status"] == "ok", results[0]
            assert results[0]["stdout"].startswith("every.trigger-long-running-operation: ")

            async def answers() -> dict[str, Any]:
                return await run(client, "import mcp_tools\nprint(mcp_tools.every.echo(message='back'))")

            again = await answers()
            with anyio.fail_after(40):
                while again["stdout"] != "Echo: back\n":
                    await anyio.sleep(0.5)
                    again = await answers()
            assert processes_mentioning(str(EVERYTHING)) not in ([], first)
    log = (tmp_path / "stderr.log").read_text()
    assert "tool server down server=every" in log


async def test_a_run_that_floods_its_channel_loses_it_and_nothing_else(
    work_dir: Path, tmp_path: Path, everything: dict[str, Any]
) -> None:
    path = tools_file(tmp_path, every=everything)
    flood = (
        "import os, mcp_tools\n"
        "print(mcp_tools.every.echo(message='before'), flush=True)\n"
        "try:\n"
        "    os.write(3, b'tool 99999999999\\n' + b'x' * 100000)\n"
        "except OSError as exc:\n"
        "    print('write failed', exc.errno)\n"
        "try:\n"
        "    mcp_tools.every.echo(message='after')\n"
        "except mcp_tools.ToolError as exc:\n"
        "    print('after:', exc)\n"
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            flooded = await run(client, flood)
            next_run = await run(client, "import mcp_tools\nprint(mcp_tools.every.echo(message='next'))")
    assert flooded["stdout"].startswith("Echo: before\n")
    assert "after: every.echo: this run's channel to the server failed" in flooded["stdout"]
    assert next_run["status"] == "ok"
    assert next_run["stdout"] == "Echo: next\n"


async def test_every_call_of_a_session_calls_tools_with_the_module_it_imported_once(
    work_dir: Path, tmp_path: Path, everything: dict[str, Any]
) -> None:
    path = tools_file(tmp_path, every=everything)
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            first = await run(client, "import mcp_tools\ntotal = mcp_tools.every.get_sum(a=1, b=2)", session="new")
            handle = first["session"]
            second = await run(client, "print(total, mcp_tools.every.echo(message='kept'))", session=handle)
            third = await run(client, "print(mcp_tools.call('every', 'get-sum', {'a': 2, 'b': 2}))", session=handle)
    assert first["status"] == "ok", first
    assert second["stdout"] == "The sum of 1 and 2 is 3. Echo: kept\n", second
    assert third["stdout"] == "The sum of 2 and 2 is 4.\n", third


@pytest.fixture
def remote(work_dir: Path, tmp_path: Path) -> Any:
    """A second python-runner-mcp over Streamable HTTP, with a token."""
    tokens = tmp_path / "remote-tokens"
    tokens.write_text(f"outer:{REMOTE}\n")
    remote_work = tmp_path / "remote-work"
    remote_work.mkdir()
    with http_server(remote_work, tmp_path / "remote.log", RUNNER_AUTH_TOKENS_FILE=str(tokens)) as server:
        yield server


async def test_another_python_runner_mcp_over_stdio_serves_as_a_downstream(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review of the house: a stdio server's environment holds marks of ours
    # (RUNNER_HELD_DIRECTORY, RUNNER_TOOL_SERVER_MARK), which a python-runner-mcp took for misspelt
    # settings and stopped on (exit 2): every call to it said the server was down.
    inner = tmp_path / "inner"
    inner.mkdir()
    path = tools_file(
        tmp_path,
        inner={
            "command": sys.executable,
            "args": ["-m", "runner"],
            "cwd": str(REPO),
            "env": stdio_env(inner),
            "tools": ["run_python"],
        },
    )
    code = "import mcp_tools\nprint(mcp_tools.inner.run_python(code='print(6 * 7)')['stdout'], end='')"
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", (done, (tmp_path / "stderr.log").read_text()[-2000:])
    assert done["stdout"] == "42\n"


async def test_only_the_callers_a_server_names_reach_it_and_a_run_timed_out_cancels_its_call_downstream(
    work_dir: Path, tmp_path: Path, remote: HttpServer
) -> None:
    path = tools_file(
        tmp_path,
        remote={
            "url": remote.url,
            "headers": {"Authorization": f"Bearer {REMOTE}"},
            "tools": ["run_python"],
            "callers": ["alice"],
        },
    )
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice:{ALICE}\nbob:{BOB}\n")
    nested = "import mcp_tools\nprint(mcp_tools.remote.run_python(code='print(6 * 7)')['stdout'], end='')"
    slow = "import mcp_tools\nmcp_tools.remote.run_python(code='import time; time.sleep(25)', timeout=60)"
    with http_server(
        work_dir, tmp_path / "outer.log", RUNNER_AUTH_TOKENS_FILE=str(tokens), RUNNER_TOOLS_CONFIG=str(path)
    ) as outer:
        async with http_client(outer, ALICE) as alice, http_client(outer, BOB) as bob:
            mine = await run(alice, nested)
            theirs = await run(bob, nested)
            cut = await run(alice, slow, timeout=3)
        scraped = httpx2.get(outer.base + "/metrics", timeout=30).text
    assert mine["status"] == "ok", mine
    assert mine["stdout"] == "42\n"
    assert theirs["status"] == "error"
    assert "No module named 'mcp_tools'" in theirs["stderr"], "bob may use no server: no module"
    assert waited_out(cut, "remote.run_python"), cut
    # The outer run's end cancelled its call: the remote server's own call was cancelled with it.
    assert not settled(lambda: "call cancelled" not in remote.log.read_text(), timeout=20)
    assert REMOTE not in (tmp_path / "outer.log").read_text()
    assert 'runner_tool_calls_total{server="remote",status="ok",tool="run_python"} 1.0' in scraped
    assert 'runner_tool_calls_total{server="remote",status="timeout",tool="run_python"} 1.0' in scraped
    assert 'runner_tool_call_duration_seconds_count{server="remote"} 2.0' in scraped


async def test_a_runs_processes_call_at_once_each_taking_its_own_answers_within_the_limit(
    work_dir: Path, tmp_path: Path, everything: dict[str, Any]
) -> None:
    path = tools_file(tmp_path, every=everything)
    code = (
        "import os, mcp_tools\n"
        "def echoes(n):\n"
        "    got = [mcp_tools.every.echo(message=f'{n}-{i}') for i in range(30)]\n"
        "    print(f'echo {n}', got == [f'Echo: {n}-{i}' for i in range(30)], flush=True)\n"
        "def long():\n"
        "    try:\n"
        "        mcp_tools.every.trigger_long_running_operation(duration=2, steps=1)\n"
        "        print('long ok', flush=True)\n"
        "    except mcp_tools.ToolError as exc:\n"
        "        print('long refused', 'in flight' in str(exc), flush=True)\n"
        "def at_once(*jobs):\n"
        "    children = []\n"
        "    for job in jobs:\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            try:\n"
        "                job()\n"
        "            finally:\n"
        "                os._exit(0)\n"
        "        children.append(pid)\n"
        "    for pid in children:\n"
        "        os.waitpid(pid, 0)\n"
        "at_once(lambda: echoes(0), lambda: echoes(1))\n"
        "at_once(long, long, long)\n"
    )
    done = await run_once(
        work_dir,
        tmp_path / "stderr.log",
        code,
        RUNNER_TOOLS_CONFIG=str(path),
        RUNNER_TOOLS_MAX_CONCURRENT="2",
        RUNNER_SANDBOX="namespaces",
    )
    if done["status"] == "internal_error":
        pytest.skip(done["message"])
    lines = sorted(done["stdout"].splitlines())
    assert done["status"] == "ok", done["stderr"]
    assert [line for line in lines if line.startswith("echo")] == ["echo 0 True", "echo 1 True"], done
    long = [line for line in lines if line.startswith("long")]
    assert len(long) == 3
    assert "long refused True" in long, "three at once, two allowed: one is refused"


async def test_a_runs_threads_call_at_once_each_taking_its_own_answers(
    work_dir: Path, tmp_path: Path, everything: dict[str, Any]
) -> None:
    # Before: a process's threads took turns, so a thread's echoes waited behind another thread's
    # long call, and the limit's "from its threads" (RUNNER_TOOLS_MAX_CONCURRENT) was not so.
    path = tools_file(tmp_path, every=everything)
    code = (
        "import threading, time, mcp_tools\n"
        "said = []\n"
        "def long():\n"
        "    mcp_tools.every.trigger_long_running_operation(duration=4, steps=1)\n"
        "    said.append('long done')\n"
        "def echoes(n):\n"
        "    got = [mcp_tools.every.echo(message=f'{n}-{i}') for i in range(30)]\n"
        "    said.append(f'echo {n} ' + str(got == [f'Echo: {n}-{i}' for i in range(30)]))\n"
        "slow = threading.Thread(target=long)\n"
        "slow.start()\n"
        "time.sleep(0.5)  # its call is in flight\n"
        "quick = [threading.Thread(target=echoes, args=(n,)) for n in range(2)]\n"
        "for thread in quick:\n"
        "    thread.start()\n"
        "for thread in quick:\n"
        "    thread.join()\n"
        "said.append('echoes joined')\n"
        "slow.join()\n"
        "said.append(str('Calls in flight at once, at most: 4.' in mcp_tools.__doc__))  # help(mcp_tools) says\n"
        "print('\\n'.join(said))\n"
    )
    done = await run_once(
        work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path), RUNNER_SANDBOX="namespaces"
    )
    if done["status"] == "internal_error":
        pytest.skip(done["message"])
    assert done["status"] == "ok", done["stderr"]
    said = done["stdout"].splitlines()
    assert sorted(said[:2]) == ["echo 0 True", "echo 1 True"], done
    assert said[2:4] == ["echoes joined", "long done"], "the echoes did not wait for the long call"
    assert said[4:] == ["True"], "help(mcp_tools) tells the limit"


async def test_a_run_that_passes_its_bytes_gets_a_tool_error_and_goes_on(
    work_dir: Path, tmp_path: Path, everything: dict[str, Any]
) -> None:
    path = tools_file(tmp_path, every=everything)
    code = (
        "import mcp_tools\n"
        "try:\n"
        "    mcp_tools.every.echo(message='x' * 2_000_000)\n"
        "except mcp_tools.ToolError as exc:\n"
        "    print(exc)\n"
        "sent = 0\n"
        "try:\n"
        "    while True:\n"
        "        mcp_tools.every.echo(message='y' * 100_000)\n"
        "        sent += 1\n"
        "except mcp_tools.ToolError as exc:\n"
        "    print(sent, exc)\n"
        "print('went on')\n"
    )
    done = await run_once(
        work_dir,
        tmp_path / "stderr.log",
        code,
        RUNNER_TOOLS_CONFIG=str(path),
        RUNNER_TOOLS_MAX_MB="1",
        RUNNER_TOOLS_MAX_CALLS="1000",
    )
    first, second, last = done["stdout"].splitlines()
    assert first.startswith("every.echo: 2,000,0"), first
    assert "RUNNER_TOOLS_MAX_MB" in first
    sent, _, said = second.partition(" ")
    assert 3 <= int(sent) <= 5, second  # 1 MiB: each call passes some 200 kB there and back
    assert "RUNNER_TOOLS_MAX_MB" in said
    assert last == "went on"
    assert done["status"] == "ok"


async def test_a_long_run_making_tool_calls_becomes_an_ordinary_task(
    work_dir: Path, tmp_path: Path, everything: dict[str, Any]
) -> None:
    path = tools_file(tmp_path, every=everything)
    code = (
        "import mcp_tools\n"
        "print(mcp_tools.every.trigger_long_running_operation(duration=2, steps=2))\n"
        "print(mcp_tools.every.get_sum(a=20, b=22))\n"
    )
    extension = TasksExtension()
    params = stdio_params(work_dir, RUNNER_TOOLS_CONFIG=str(path))
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="auto", extensions=[extension]) as client:  # type: ignore[arg-type]
            result = await client.call_tool("run_python", {"code": code, "timeout": 30})
    assert len(extension.created) == 1, "it became a task, polled to its end"
    assert check_structured(result.structured_content)["stdout"].splitlines() == [
        "Long running operation completed. Duration: 2 seconds, Steps: 2.",
        "The sum of 20 and 22 is 42.",
    ]


async def test_calls_a_runs_end_cancels_are_logged_and_counted_as_cancelled(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: a call cancelled by its run's end was written down as cancelled but never
    # told (only an answer written told the calls answered), so neither the log nor the metrics had it.
    path = tools_file(tmp_path, hostile=hostile())
    code = (
        "import os, threading, time, mcp_tools\n"
        "threading.Thread(target=lambda: mcp_tools.hostile.slow(seconds=30), daemon=True).start()\n"
        "time.sleep(1)\n"
        "os._exit(0)  # the run ends with its call in flight\n"
    )
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice:{ALICE}\n")
    with http_server(
        work_dir, tmp_path / "server.log", RUNNER_AUTH_TOKENS_FILE=str(tokens), RUNNER_TOOLS_CONFIG=str(path)
    ) as server:
        async with http_client(server, ALICE) as client:
            done = await run(client, code)
        scraped = httpx2.get(server.base + "/metrics", timeout=30).text
    assert done["status"] == "ok", done
    log = (tmp_path / "server.log").read_text()
    assert log.count("server=hostile tool=slow status=cancelled") == 1, log[-3000:]
    assert 'runner_tool_calls_total{server="hostile",status="cancelled",tool="slow"} 1.0' in scraped


async def test_a_run_that_sends_frames_and_reads_no_answer_has_its_channel_shut_and_the_server_goes_on(
    work_dir: Path, tmp_path: Path, everything: dict[str, Any]
) -> None:
    # Found by a review: every frame got a task, and a run that read no answer piled them up (3 GB of
    # answers to {"op": "module"} frames in a minute).
    path = tools_file(tmp_path, every=everything)
    flood = (
        "import os, mcp_tools\n"
        'frame = b\'{"op": "module"}\'\n'
        "try:\n"
        "    for n in range(2000):\n"
        "        os.write(3, b'tool %d 9.%d\\n' % (len(frame), n) + frame)\n"
        "except OSError as exc:\n"
        "    print('shut after some frames', exc.errno)\n"
        "try:\n"
        "    mcp_tools.every.echo(message='after')\n"
        "except mcp_tools.ToolError as exc:\n"
        "    print('after:', exc)\n"
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            flooded = await run(client, flood, timeout=20)
            next_run = await run(client, "import mcp_tools\nprint(mcp_tools.every.echo(message='next'))")
    assert "after: every.echo: this run's channel to the server failed" in flooded["stdout"], flooded
    assert next_run["stdout"] == "Echo: next\n"


async def test_schemas_that_cannot_be_checked_and_a_huge_result_are_tool_errors_and_the_run_goes_on(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: an exception from the schema check (a recursive schema the run nests its
    # arguments deep in, a $ref to nowhere) escaped the broker and ended the run's task group
    # (internal_error, its output lost); a pattern that backtracks held the event loop for seconds.
    path = tools_file(tmp_path, hostile=hostile())
    code = (
        "import mcp_tools, time\n"
        "h = mcp_tools.hostile\n"
        "deep, deeper = 'x', 'x'\n"
        "for _ in range(99):\n"
        "    deep = [deep]\n"
        "for _ in range(500):\n"
        "    deeper = [deeper]\n"
        "calls = [('nested', lambda: h.nested(tree=deep)), ('deeper', lambda: h.nested(tree=deeper)),\n"
        "         ('nowhere', lambda: h.nowhere(a=1)),\n"
        "         ('backtracks', lambda: h.backtracks(s='a' * 40 + '!')),\n"
        "         ('selfref', lambda: h.selfref(a=1)), ('cycle', lambda: h.cycle()),\n"
        "         ('huge', lambda: h.huge(megabytes=20))]\n"
        "for name, call in calls:\n"
        "    started = time.monotonic()\n"
        "    try:\n"
        "        said = call()\n"
        "    except mcp_tools.ToolError as exc:\n"
        "        said = str(exc)\n"
        "    print(name, time.monotonic() - started < 5, said[:140])\n"
    )
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", done
    nested, deeper, nowhere, backtracks, selfref, cycle, huge = done["stdout"].splitlines()
    assert nested == "nested True nested ok", "a schema that recurses is followed as deep as a call may nest"
    # Past the depth any call may nest (`frames.MOST_DEPTH`), refused before the schema is looked at.
    assert deeper == (
        "deeper True hostile.nested: the arguments nest 501 levels deep, more than 100, "
        "which a tool server may not parse"
    )
    assert nowhere.startswith("nowhere True hostile.nowhere: the arguments do not match the tool's input schema:")
    assert backtracks == "backtracks True backtracks ok", "the downstream checks its pattern itself"
    assert huge.startswith("huge True hostile.huge: its result (more than 16,7")
    # Found by a review: a check recursing for ever could end in a Rust extension's panic, which ended
    # the server (stdio) or the call's request (HTTP): each is that call's ToolError.
    assert selfref.startswith("selfref True hostile.selfref: the arguments do not match"), selfref
    assert cycle.startswith("cycle True hostile.cycle: "), cycle


async def test_two_processes_taking_large_answers_at_once_each_get_their_own_whole(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: while one process read a large answer in parts, another looked at the head,
    # saw the middle of it, and failed; its own answer then stalled every later call.
    path = tools_file(tmp_path, hostile=hostile())
    code = (
        "import os, mcp_tools\n"
        "children = []\n"
        "for n in (2, 3):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        try:\n"
        "            sizes = [len(mcp_tools.hostile.huge(megabytes=n)) for _ in range(3)]\n"
        "            print(n, sizes, flush=True)\n"
        "        finally:\n"
        "            os._exit(0)\n"
        "    children.append(pid)\n"
        "for pid in children:\n"
        "    os.waitpid(pid, 0)\n"
        "print('after', mcp_tools.hostile.backtracks(s='aa'))\n"
    )
    done = await run_once(
        work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path), RUNNER_TOOLS_MAX_MB="64"
    )
    assert done["status"] == "ok", done
    assert sorted(done["stdout"].splitlines()) == [
        "2 [2000000, 2000000, 2000000]",
        "3 [3000000, 3000000, 3000000]",
        "after backtracks ok",
    ]


async def test_a_schema_that_points_at_a_file_is_not_followed_and_the_file_stays_unread(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a second review: the validator's default registry fetched a $ref's URL or file, on the
    # event loop, and echoed what it found to the run.
    marker = tmp_path / "server-file.json"
    marker.write_text(json.dumps({"enum": ["SERVER-FILE-CONTENT"]}))
    server = {**hostile(), "env": {"HOSTILE_REF": marker.as_uri()}}
    path = tools_file(tmp_path, hostile=server)
    code = (
        "import mcp_tools\n"
        "try:\n"
        "    print(mcp_tools.hostile.elsewhere(a='nope'))\n"
        "except mcp_tools.ToolError as exc:\n"
        "    print(exc)\n"
    )
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert "SERVER-FILE-CONTENT" not in done["stdout"]
    assert done["stdout"].startswith("hostile.elsewhere: the arguments do not match the tool's input schema: they")


async def test_large_and_small_calls_of_a_runs_processes_at_once_keep_the_channel_whole(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a second review: a small call written while a large one went in parts landed inside it,
    # and the channel was shut.
    path = tools_file(tmp_path, hostile=hostile())
    code = (
        "import os, mcp_tools\n"
        "def large():\n"
        "    return [mcp_tools.hostile.backtracks(s='b' * 300_000) for _ in range(10)]\n"
        "def small():\n"
        "    return [mcp_tools.hostile.backtracks(s='a') for _ in range(200)]\n"
        "children = []\n"
        "for job in (large, small, small):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        try:\n"
        "            print(job.__name__, set(job()), flush=True)\n"
        "        finally:\n"
        "            os._exit(0)\n"
        "    children.append(pid)\n"
        "for pid in children:\n"
        "    os.waitpid(pid, 0)\n"
    )
    done = await run_once(
        work_dir,
        tmp_path / "stderr.log",
        code,
        RUNNER_TOOLS_CONFIG=str(path),
        RUNNER_TOOLS_MAX_MB="64",
        RUNNER_TOOLS_MAX_CALLS="1000",
    )
    assert done["status"] == "ok", done
    assert sorted(done["stdout"].splitlines()) == [
        "large {'backtracks ok'}",
        "small {'backtracks ok'}",
        "small {'backtracks ok'}",
    ]


async def test_a_channel_the_runs_code_made_non_blocking_still_takes_a_large_answer_in_parts(
    work_dir: Path, tmp_path: Path, everything: dict[str, Any]
) -> None:
    # The run's side of its channel is made once, at the first import of mcp_tools; what the code does
    # to fd 3 after that (here: non-blocking) must not break a later large call, whose frame and answer
    # both go in parts (before: EAGAIN midway through the frame, a failed call). The receive's own
    # case is tests/unit/inrun/test_wire.py's.
    path = tools_file(tmp_path, every=everything)
    code = (
        "import os, mcp_tools\n"
        "print(mcp_tools.every.echo(message='first'))\n"
        "os.set_blocking(3, False)\n"
        "print(len(mcp_tools.every.echo(message='x' * 2_000_000)))\n"
        "print(mcp_tools.every.echo(message='last'))\n"
    )
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", (done["stdout"], done["stderr"])
    assert done["stdout"].splitlines() == ["Echo: first", str(len("Echo: ") + 2_000_000), "Echo: last"]


async def test_a_default_socket_timeout_and_a_zombie_caller_do_not_break_a_runs_calls(
    work_dir: Path, tmp_path: Path, everything: dict[str, Any]
) -> None:
    # Found by a second review: the run's socket.setdefaulttimeout made the channel non-blocking (a
    # long call timed out, the next one failed); an answer for a zombie that never takes it stalled
    # every later call.
    path = tools_file(tmp_path, every=everything)
    code = (
        "import os, socket, mcp_tools\n"
        "socket.setdefaulttimeout(0.5)\n"
        "print(mcp_tools.every.trigger_long_running_operation(duration=1, steps=1))\n"
        "print(mcp_tools.every.echo(message='then'))\n"
        'frame = b\'{"op": "call", "server": "every", "tool": "echo", "arguments": {"message": "z"}}\'\n'
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.write(3, b'tool %d %d.1\\n' % (len(frame), os.getpid()) + frame)\n"
        "    os._exit(0)\n"
        "import time\n"
        "time.sleep(0.5)  # the child's answer is back, and the child a zombie (not reaped)\n"
        "print(mcp_tools.every.echo(message='after the zombie'))\n"
        "os.waitpid(pid, 0)\n"
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            done = await run(client, code, timeout=15)
    assert done["status"] == "ok", done
    assert done["stdout"].splitlines() == [
        "Long running operation completed. Duration: 1 seconds, Steps: 1.",
        "Echo: then",
        "Echo: after the zombie",
    ]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_stop_asked_for_while_a_tool_server_is_slow_to_start_is_done_at_once(
    work_dir: Path, tmp_path: Path, transport: str
) -> None:
    # Found by a review: signals were heard only once serving began, and a SIGTERM 2 s after the start
    # waited out the tool server's 35 s at start: exit after 33 s, past a container's grace of 30.
    path = tools_file(tmp_path, slow={"command": "sleep", "args": ["3171"], "tools": ["*"]})
    args, env = (["--transport", "http"], server_env) if transport == "http" else ([], stdio_env)
    with (tmp_path / "stderr.log").open("wb") as errlog:
        server = subprocess.Popen(
            [sys.executable, "-m", "runner", *args],
            cwd=REPO,
            env=env(work_dir, RUNNER_TOOLS_CONFIG=str(path)),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
        )
    try:
        deadline = time.monotonic() + 30
        while not any(b"3171" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children_of(server.pid)):
            assert time.monotonic() < deadline, "the tool server is started"
            time.sleep(0.05)
        server.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert server.wait(20) == 0
        took = time.monotonic() - started
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        assert server.stdin is not None
        server.stdin.close()
    assert took < 20, f"stopped {took:.1f} s after the signal"
    assert "signal received" in (tmp_path / "stderr.log").read_text()
