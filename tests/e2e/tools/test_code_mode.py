"""Code mode end to end: a real server over stdio with the official client, a real downstream server
(mcp-server-time, from requirements-downstream.lock) it starts itself, and runs that call its tools
through `mcp_tools`, in every mode runs can have."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged

from runner.config import Config
from tests.code_mode import TIME_SERVER, run, run_once, stdio_params, stdio_session, tools_file
from tests.conftest import REPO
from tests.helpers import in_mode, processes_mentioning, settled
from tests.http_server import http_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "s3cr3t-downstream-credential-0123456789"
if not TIME_SERVER.exists():
    pytest.skip("no downstream environment: `make test` builds it from its lock", allow_module_level=True)


def workable(config: Config, mode: str) -> None:
    """Skip where `mode` cannot work here (a failure in CI), not once a run of it came back: a sandboxed
    run that failed would have skipped the check of what it sees (found by a review of the claims)."""
    if mode != "none":
        in_mode(config, mode)


def time_server(tools: list[str]) -> dict[str, Any]:
    return {
        "command": str(TIME_SERVER),
        "args": ["--local-timezone", "UTC"],
        "env": {"TIME_SERVER_TOKEN": SECRET},
        "tools": tools,
    }


@pytest.mark.parametrize("mode", ["none", "namespaces", "bwrap"])
async def test_a_run_calls_a_downstream_servers_tools_as_functions_fifty_in_a_row(
    work_dir: Path, tmp_path: Path, mode: str, config: Config
) -> None:
    workable(config, mode)
    path = tools_file(tmp_path, time=time_server(["get_current_time", "convert_time"]))
    code = (
        "import mcp_tools\n"
        "zones = [mcp_tools.time.get_current_time(timezone='UTC')['timezone'] for _ in range(50)]\n"
        "print(len(zones), set(zones))\n"
        "print(mcp_tools.call('time', 'convert_time', {'source_timezone': 'UTC', 'time': '12:00', "
        "'target_timezone': 'Europe/Istanbul'})['target']['datetime'][11:16])\n"
        "print('get_current_time' in mcp_tools.time.get_current_time.__doc__, "
        "mcp_tools.time.get_current_time.schema['type'])\n"
        # What it takes, said where a model looks first (found by a first hour: `(...)`, and "takes 0
        # positional arguments" for a call without keywords).
        "print('.get_current_time(timezone)  ' in mcp_tools.__doc__)\n"
        "try:\n"
        "    mcp_tools.time.convert_time('UTC', '12:00', 'Europe/Istanbul')\n"
        "except TypeError as exc:\n"
        "    print(exc)\n"
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path), RUNNER_SANDBOX=mode) as client:
            listed = await client.list_tools()
            description = listed.tools[0].description or ""
            assert "mcp_tools.time.get_current_time: Get current time" in description
            done = await run(client, code)
            before = processes_mentioning(str(TIME_SERVER))
            # A run after a run starts once a stray sweep has been (`StraySweeper.settle`): the downstream,
            # a child of the server too, is not what it sweeps.
            again = await run(client, "import mcp_tools\nprint(mcp_tools.time.get_current_time(timezone='UTC'))")
            assert processes_mentioning(str(TIME_SERVER)) == before
    assert done["status"] == "ok", done
    assert done["stdout"] == (
        "50 {'UTC'}\n15:00\nTrue object\nTrue\n"
        "convert_time() takes keyword arguments only: convert_time(source_timezone, time, target_timezone)\n"
    )
    assert again["stdout"].startswith("{'timezone': 'UTC'"), again
    log = (tmp_path / "stderr.log").read_text()
    assert "killing a process" not in log
    assert log.count(" tool call ") == 52
    assert "server=time tool=get_current_time status=ok" in log
    assert settled(lambda: processes_mentioning(str(TIME_SERVER))) == [], "the downstream ends with the server"


async def test_a_run_waiting_for_a_tools_answer_is_woken_once_a_call_by_its_answer(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found measuring issue 49's round trip: a run that waited in recv was woken twice a call, the
    # first time for nothing when the server read its call (the socket's space freed wakes recv's
    # waiters too): a context switch, and on a VM an idle core woken, each call. It waits in poll now.
    path = tools_file(tmp_path, time=time_server(["get_current_time"]))
    code = (
        "import mcp_tools\n"
        "def switches():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('voluntary_ctxt_switches:'):\n"
        "            return int(line.split()[1])\n"
        "mcp_tools.time.get_current_time(timezone='UTC')\n"
        "before = switches()\n"
        "for _ in range(90):\n"
        "    mcp_tools.time.get_current_time(timezone='UTC')\n"
        "print((switches() - before) / 90)\n"
    )
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", done["stderr"]
    # At most once a call (twice before). Fewer where a busy host preempted the run until its answer had
    # come, so that it never slept for it (0.51 seen under load): the bound below only says it was counted.
    assert 0.1 <= float(done["stdout"]) <= 1.2, done["stdout"]


async def test_every_failure_of_a_call_is_a_tool_error_naming_the_server_and_the_tool(
    work_dir: Path, tmp_path: Path
) -> None:
    gone = {"command": str(tmp_path / "no-such-server"), "tools": ["get-thing"]}
    path = tools_file(tmp_path, time=time_server(["get_current_time", "convert_time"]), gone=gone)
    code = (
        "import mcp_tools\n"
        "def said(call):\n"
        "    try:\n"
        "        call()\n"
        "    except mcp_tools.ToolError as exc:\n"
        "        print(exc)\n"
        # A server down when the module was imported, its tools called as functions all the same (found by
        # a new user: an AttributeError, not a ToolError); a tool a server up does not have.
        "said(lambda: mcp_tools.gone.get_thing(n=1))\n"
        "said(lambda: mcp_tools.time.get_everything())\n"
        "print(hasattr(mcp_tools.time, 'get_everything'), hasattr(mcp_tools.time, 'get_current_time'))\n"
        "said(lambda: mcp_tools.call('time', 'get_everything', {}))\n"
        "said(lambda: mcp_tools.call('elsewhere', 'get_current_time', {}))\n"
        "said(lambda: mcp_tools.time.get_current_time(timezone=5))\n"
        "said(lambda: mcp_tools.time.convert_time(source_timezone='Nowhere/X', time='12:00', target_timezone='UTC'))\n"
        "said(lambda: [mcp_tools.time.get_current_time(timezone='UTC') for _ in range(5)])\n"
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(
            work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path), RUNNER_SANDBOX="none", RUNNER_TOOLS_MAX_CALLS="3"
        ) as client:
            done = await run(client, code)
    lines = done["stdout"].splitlines()
    assert done["status"] == "ok", done
    # Why, in the server's own words (found by a first hour: "MCPError: Connection closed" and no path).
    assert lines.pop(0) == (
        "gone.get-thing: the server is down: MCPError: Connection closed; its stderr's last line: "
        f"cannot start {tmp_path / 'no-such-server'}: No such file or directory"
    ), done["stdout"]
    assert lines.pop(0) == (
        "time.get_everything: no such tool here, or not one this run may call (help(mcp_tools.time) lists those it may)"
    )
    assert lines.pop(0) == "False True"
    assert lines[0] == "time.get_everything: this tool is not allowed here (RUNNER_TOOLS_CONFIG's tools)"
    assert lines[1] == "elsewhere.get_current_time: no such server here"
    assert lines[2].startswith("time.get_current_time: the arguments do not match the tool's input schema")
    assert lines[3].startswith("time.convert_time: the tool failed:")
    assert lines[4] == "time.get_current_time: this run has made its 3 tool calls (RUNNER_TOOLS_MAX_CALLS)"


@pytest.mark.parametrize("mode", ["none", "namespaces", "bwrap"])
async def test_a_run_sees_neither_the_tools_file_nor_the_downstream_credentials(
    work_dir: Path, tmp_path: Path, mode: str, config: Config
) -> None:
    workable(config, mode)
    # In a directory runs see (their package environment, bound into the view read-only): only the
    # hiding keeps the file out of their sight.
    environment = tmp_path / "environment"
    (environment / "site-packages").mkdir(parents=True)
    path = tools_file(environment, time=time_server(["get_current_time"]))
    code = (
        "import os, glob\n"
        f"print(os.path.isdir({str(environment / 'site-packages')!r}), end=' ')\n"
        f"print(os.path.exists({str(path)!r}) and open({str(path)!r}).read() != '')\n"
        f"print({SECRET!r} in repr(os.environ))\n"
        "found = False\n"
        "for name in glob.glob('/proc/[0-9]*/environ'):\n"
        "    try:\n"
        f"        found = found or {SECRET.encode()!r} in open(name, 'rb').read()\n"
        "    except OSError:\n"
        "        pass\n"
        "print(found)\n"
        "import mcp_tools\n"
        f"print({SECRET!r} in repr(vars(mcp_tools)))\n"
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(
            work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path), RUNNER_SANDBOX=mode, RUNNER_PACKAGES=str(environment)
        ) as client:
            done = await run(client, code)
    if mode == "none":
        # Plain mode is no boundary (docs/code-mode.md): the run is the server's uid and may read the file
        # and the downstream's /proc; its own environment and mcp_tools still hold no credential.
        seen, environ, _, module = done["stdout"].splitlines()
        assert (seen, environ, module) == ("True True", "False", "False"), done
        return
    assert done["stdout"] == "True False\nFalse\nFalse\nFalse\n", done
    assert SECRET not in (tmp_path / "stderr.log").read_text()


async def test_a_server_without_tools_offers_no_mcp_tools_and_its_description_says_nothing_of_it(
    work_dir: Path, tmp_path: Path
) -> None:
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_SANDBOX="none") as client:
            listed = await client.list_tools()
            done = await run(client, "import mcp_tools")
    assert "mcp_tools" not in (listed.tools[0].description or "")
    assert done["status"] == "error"
    assert "ModuleNotFoundError: No module named 'mcp_tools'" in done["stderr"]


@pytest.mark.parametrize("mode", ["none", "namespaces"])
async def test_a_run_that_calls_no_tool_loads_no_module_more_for_a_server_that_brokers_tools(
    work_dir: Path, tmp_path: Path, mode: str, config: Config
) -> None:
    # Found measuring: a forked run of a server with tools imported mmap before its code, and fcntl and
    # threading for its report (1.2 ms of its time): print(1) took 6.3 ms against 3.8 without tools.
    workable(config, mode)
    path = tools_file(tmp_path, time=time_server(["get_current_time"]))
    code = "import sys\nprint(sorted(sys.modules))"
    loaded = []
    with (tmp_path / "stderr.log").open("w") as errlog:
        for tools in ({"RUNNER_TOOLS_CONFIG": str(path)}, {}):
            async with stdio_session(work_dir, errlog, RUNNER_SANDBOX=mode, **tools) as client:
                loaded.append((await run(client, code))["stdout"])
    assert loaded[0] == loaded[1]
    # The zygote's: no forked run imports them.
    assert "'fcntl'" in loaded[0]
    assert "'mmap'" in loaded[0]


def late_and_time(tmp_path: Path, late_tools: tuple[str, ...] = ("convert_time",)) -> tuple[Path, Path]:
    """A tools file naming `time` and `late`, whose command (the path returned) is not there yet."""
    late = tmp_path / "late-server"
    path = tools_file(
        tmp_path, time=time_server(["get_current_time"]), late={**time_server(list(late_tools)), "command": str(late)}
    )
    return late, path


def described(tools: types.ListToolsResult) -> str:
    return tools.tools[0].description or ""


@contextlib.asynccontextmanager
async def told_of_changes(work_dir: Path, errlog: Any, path: Path) -> AsyncIterator[tuple[Client, anyio.Event]]:
    """A handshake-era client of a stdio server of ours with the tools file `path`, and an event set once
    it has been told that the tools changed."""
    told = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            told.set()

    params = stdio_params(work_dir, RUNNER_TOOLS_CONFIG=str(path))
    async with Client(stdio_client(params, errlog=errlog), mode="legacy", message_handler=on_message) as client:
        yield client, told


async def test_a_handshake_client_is_told_the_tools_changed_once_a_server_down_at_start_has_listed_them(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a first hour: the description was made once, at start, and never named a server that came
    # up later, though runs could call it; then named at the next tools/list, but a client that lists
    # tools only when it connects (most do, unless told) never saw it. And a tool its entry names that it
    # lacks is a warning (at start, it stops the server): it was said only in each call's refusal.
    late, path = late_and_time(tmp_path, ("convert_time", "get_weather"))
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with told_of_changes(work_dir, errlog, path) as (client, told):
            capabilities = client.server_capabilities
            before = described(await client.list_tools())
            late.symlink_to(TIME_SERVER)  # there now: it is started at the next try of its backoff
            with anyio.fail_after(30):
                await told.wait()
            after = described(await client.list_tools())
    assert capabilities.tools is not None
    assert capabilities.tools.list_changed
    assert "mcp_tools.time.get_current_time" in before
    assert "mcp_tools.late" not in before
    assert "mcp_tools.late.convert_time" in after
    log = (tmp_path / "stderr.log").read_text()
    assert "tool server lists no tool the file allows server=late tools=get_weather" in log


@pytest.mark.timeout(150)
async def test_a_server_slower_to_start_than_the_first_try_allows_is_given_longer_and_comes_up(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a first hour: a server 40 s to start (`npx -y` fetching its package, a JVM) was killed at
    # 30 s at every try and never came up. Each try that runs out gives the next twice as long.
    slow = tmp_path / "slow-server"
    slow.write_text(f"#!/bin/sh\nsleep 31\nexec {TIME_SERVER} --local-timezone UTC\n")
    slow.chmod(0o755)
    path = tools_file(tmp_path, slow={"command": str(slow), "tools": ["get_current_time"]})
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with told_of_changes(work_dir, errlog, path) as (client, told):
            before = described(await client.list_tools())  # the server serves once its 35 s at start are up
            with anyio.fail_after(100):
                await told.wait()
            after = described(await client.list_tools())
            done = await run(
                client, "import mcp_tools\nprint(mcp_tools.slow.get_current_time(timezone='UTC')['timezone'])"
            )
    assert "mcp_tools.slow" not in before
    assert "mcp_tools.slow.get_current_time" in after
    assert done["stdout"] == "UTC\n", done
    assert "not started and listed within 30 s" in (tmp_path / "stderr.log").read_text()


async def test_a_2026_client_listening_is_told_the_tools_changed_and_its_stream_ends_cleanly_as_http_stops(
    work_dir: Path, tmp_path: Path
) -> None:
    late, path = late_and_time(tmp_path)
    with http_server(work_dir, tmp_path / "stderr.log", RUNNER_TOOLS_CONFIG=str(path)) as server:
        async with Client(streamable_http_client(server.url)) as client:
            capabilities = client.server_capabilities
            async with client.listen(tools_list_changed=True, resources_list_changed=True) as changes:
                honored = changes.honored
                before = described(await client.list_tools())
                late.symlink_to(TIME_SERVER)
                events = aiter(changes)
                with anyio.fail_after(30):
                    event = await anext(events)
                after = described(await client.list_tools())
                # A stop ends the stream with its result (no SubscriptionLost), not at the grace's end.
                await anyio.to_thread.run_sync(server.process.send_signal, signal.SIGTERM)
                with anyio.fail_after(20):
                    left = [event async for event in events]
        status = await anyio.to_thread.run_sync(server.process.wait, 30)
    assert capabilities.tools is not None
    assert capabilities.tools.list_changed
    assert isinstance(event, ToolsListChanged)
    # Nor said of resources (the SDK said both wherever listen is served): none of ours changes.
    assert capabilities.resources is not None
    assert not capabilities.resources.subscribe
    assert not capabilities.resources.list_changed
    # Only what it sends: no resource of ours changes, and the kept streams a caller sees are its own.
    assert honored == types.SubscriptionFilter(tools_list_changed=True)
    assert "mcp_tools.late" not in before
    assert "mcp_tools.late.convert_time" in after
    assert left == []
    assert status == 0


async def test_a_tool_the_file_names_that_the_server_does_not_list_stops_the_server_naming_the_entry(
    work_dir: Path, tmp_path: Path
) -> None:
    path = tools_file(tmp_path, time=time_server(["get_current_time", "get_weather"]))
    done = subprocess.run(
        [sys.executable, "-m", "runner"],
        cwd=REPO,
        env={
            "PATH": os.environ.get("PATH", ""),
            "RUNNER_WORK_DIR": str(work_dir),
            "RUNNER_TOOLS_CONFIG": str(path),
            "RUNNER_SANDBOX": "none",
            "RUNNER_PACKAGES": "",
            "RUNNER_WHEELHOUSE": "",
        },
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert "RUNNER_TOOLS_CONFIG" in last
    assert f"{path.resolve()}: mcpServers.time: the server lists no tool 'get_weather'" in last


async def test_over_stdio_a_server_only_some_callers_may_use_is_a_warning_and_not_in_the_description(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a first hour: a stdio client (no token: no caller) was told of "1 server(s) only some callers
    # may use", which no run of its could ever use.
    path = tools_file(
        tmp_path, time=time_server(["get_current_time"]), mine={**time_server(["convert_time"]), "callers": ["alice"]}
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            said = described(await client.list_tools())
    assert "mcp_tools.time.get_current_time" in said
    assert "Not listed here" not in said
    assert "tool server serves no run here" in (tmp_path / "stderr.log").read_text()
