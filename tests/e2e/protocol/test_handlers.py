"""The MCP layer through the SDK's in-process client, in both protocol eras, against a real pool."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.client.extension import advertise
from mcp.shared.exceptions import MCPError

from runner.config import Config
from runner.execution.pool import Pool
from runner.protocol.handlers import build_server
from runner.protocol.schemas import close_input_schema, close_output_schema, input_schema, output_schema
from tests.e2e.test_data import with_packages
from tests.helpers import SEED_PLAIN, check_structured
from tests.raw import raw_server

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["legacy", "auto"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def client(config: Config, mode: str, no_leaks: None) -> AsyncIterator[Client]:
    async with Pool.open(config) as pool, Client(build_server(config, pool), mode=mode) as client:  # type: ignore[arg-type]
        yield client


def text_of(result: types.CallToolResult) -> str:
    [block] = result.content
    assert isinstance(block, types.TextContent)
    return block.text


async def call(client: Client, arguments: Any, name: str = "run_python") -> tuple[str, dict[str, Any], bool]:
    result = await client.call_tool(name, arguments)
    structured = check_structured(result.structured_content)
    assert f"[request_id={structured['request_id']}]" in text_of(result)
    assert result.is_error == (structured["status"] != "ok")
    return text_of(result), structured, result.is_error


async def test_tools_list_returns_exactly_the_hand_written_schemas(client: Client, config: Config) -> None:
    listed = await client.list_tools()
    [tool, close] = listed.tools
    assert tool.name == "run_python"
    assert tool.title == "Run Python"
    assert tool.input_schema == input_schema(config)
    assert tool.output_schema == output_schema()
    assert tool.annotations is not None
    assert tool.annotations.read_only_hint is False
    assert tool.annotations.destructive_hint is True
    assert tool.description is not None
    assert f"{config.max_memory_mb} MiB memory" in tool.description
    assert 'pass session "new"' in tool.description
    assert close.name == "close_session"
    assert (close.input_schema, close.output_schema) == (close_input_schema(), close_output_schema())
    assert close.annotations is not None
    assert close.annotations.idempotent_hint is True


async def test_without_sessions_only_run_python_is_listed_and_a_session_call_says_they_are_off(
    config: Config, mode: str, no_leaks: None
) -> None:
    off = dataclasses.replace(config, max_sessions=0)
    async with Pool.open(off) as pool, Client(build_server(off, pool), mode=mode) as client:  # type: ignore[arg-type]
        [tool] = (await client.list_tools()).tools
        assert tool.name == "run_python"
        # Neither described as if there were sessions, nor refused as "busy", which a model retries (found
        # by a first hour).
        said = tool.input_schema["properties"]["session"]["description"]
        assert said.startswith("Leave this out: sessions are off on this server (RUNNER_MAX_SESSIONS=0)"), said
        for named in ("new", "s-x", ""):  # whatever it names (found by a second look: "start one with new")
            _, structured, is_error = await call(client, {"code": "1", "session": named})
            assert is_error
            assert structured["status"] == "invalid_arguments"
            assert structured["message"].startswith("sessions are off on this server (RUNNER_MAX_SESSIONS=0)")
        result = await client.call_tool("close_session", {"session": "s-x"})
        assert result.is_error
        assert "unknown tool 'close_session'" in text_of(result)


async def test_a_call_returns_the_seed_format_and_structured_content(client: Client) -> None:
    text, structured, is_error = await call(client, {"code": "print(sum(range(10)))", "timeout": 5})
    assert re.fullmatch(SEED_PLAIN, text)
    assert not is_error
    assert structured["status"] == "ok"
    assert (structured["stdout"], structured["exit_code"], structured["signal"]) == ("45\n", 0, None)


async def test_a_failing_run_is_an_error_result_with_its_traceback(client: Client) -> None:
    text, structured, is_error = await call(client, {"code": "raise ValueError('nope')"})
    assert is_error
    assert structured["status"] == "error"
    assert "--- stderr ---\nTraceback (most recent call last):" in text
    assert text.endswith("ValueError: nope\n\n--- exit_code: 1 | duration: " + text.rsplit("duration: ", 1)[1])


async def test_a_timeout_is_reported_in_text_and_structure(client: Client) -> None:
    text, structured, is_error = await call(client, {"code": "import time; time.sleep(30)", "timeout": 0.3})
    assert is_error
    assert structured["status"] == "timeout"
    assert "--- timeout: wall-clock limit of 0.3s reached; process group killed ---" in text
    assert "--- exit_code: -9 (SIGKILL) |" in text


async def test_stdin_reaches_the_program(client: Client) -> None:
    _, structured, _ = await call(client, {"code": "print(input()[::-1])", "stdin": "abc\n"})
    assert structured["stdout"] == "cba\n"


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({}, "missing argument: 'code' is a required property"),
        ({"code": "1", "timeout": 0}, "invalid argument 'timeout'"),
        ({"code": "1", "timeout": "soon"}, "invalid argument 'timeout'"),
        ({"code": "1", "timeout": 10_000}, "invalid argument 'timeout'"),
        ({"code": ["print(1)"]}, "invalid argument 'code'"),
        ({"code": "1", "env": {"A": "1"}}, "unknown argument 'env'"),
    ],
)
async def test_bad_arguments_give_an_error_result_naming_the_field(
    client: Client, arguments: dict[str, Any], says: str
) -> None:
    text, structured, is_error = await call(client, arguments)
    assert is_error
    assert structured["status"] == "invalid_arguments"
    assert says in structured["message"]
    assert f"--- invalid_arguments: {structured['message']} ---" in text
    assert structured["exit_code"] is None


async def test_an_unknown_tool_is_an_error_result_and_the_server_keeps_serving(client: Client) -> None:
    _, structured, is_error = await call(client, {"code": "1"}, name="run_ruby")
    assert is_error
    assert "unknown tool 'run_ruby'" in structured["message"]
    _, structured, _ = await call(client, {"code": "print(2)"})
    assert structured["stdout"] == "2\n"


async def test_a_runner_fault_becomes_an_internal_error_result_with_the_request_id(
    config: Config, mode: str, no_leaks: None, caplog: pytest.LogCaptureFixture
) -> None:
    broken = dataclasses.replace(config, python="/bin/false", pool_size=0)
    async with Pool.open(broken) as pool, Client(build_server(broken, pool), mode=mode) as client:  # type: ignore[arg-type]
        text, structured, is_error = await call(client, {"code": "print(1)"})
        assert is_error
        assert structured["status"] == "internal_error"
        assert "the server log has details under this request_id" in text
        _, again, _ = await call(client, {"code": "print(1)"})
        assert again["status"] == "internal_error"
    faults = [r for r in caplog.records if r.getMessage() == "internal error"]
    assert [getattr(r, "request_id", None) for r in faults] == [structured["request_id"], again["request_id"]]
    assert all(r.exc_info for r in faults), "the traceback goes to the log"


async def test_calls_in_parallel_each_get_their_own_request_id(client: Client) -> None:
    seen: list[str] = []

    async def one(i: int) -> None:
        _, structured, _ = await call(client, {"code": f"print({i} * 2)"})
        assert structured["stdout"] == f"{i * 2}\n"
        seen.append(structured["request_id"])

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i)
    assert len(set(seen)) == 8


async def test_a_run_longer_than_a_second_reports_progress_to_a_client_that_asked(client: Client) -> None:
    updates: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    code = "import time\nprint('warming up', flush=True)\ntime.sleep(2.6)\nprint('done')"
    result = await client.call_tool("run_python", {"code": code, "timeout": 10}, progress_callback=on_progress)
    assert check_structured(result.structured_content)["stdout"] == "warming up\ndone\n"
    # One after a second; the next only with new output, or after a few seconds without.
    assert len(updates) >= 1
    assert [p for p, _, _ in updates] == sorted(p for p, _, _ in updates), "progress only goes up"
    assert updates[0][2] is not None
    assert updates[0][2] == "running for 1s of 10s; output 11 bytes\nlatest stdout:\nwarming up"


async def test_a_silent_run_reports_progress_at_least_every_five_seconds_with_its_latest_twenty_lines(
    client: Client,
) -> None:
    times: list[float] = []
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        times.append(time.monotonic())
        messages.append(message or "")

    code = (
        "import sys, time\nfor i in range(30):\n    print(f'line {i}', flush=True)\n"
        "print('oops', file=sys.stderr)\ntime.sleep(9.5)"
    )
    started = time.monotonic()
    result = await client.call_tool("run_python", {"code": code, "timeout": 20}, progress_callback=on_progress)
    ended = time.monotonic()
    assert check_structured(result.structured_content)["status"] == "ok"
    moments = [started, *times, ended]
    assert max(later - earlier for earlier, later in itertools.pairwise(moments)) <= 5.0, moments
    last = messages[-1]
    stdout_part, stderr_part = last.split("\nlatest stdout:\n", 1)[1].split("\nlatest stderr:\n")
    assert stdout_part.splitlines() == [f"line {i}" for i in range(10, 30)]
    assert stderr_part == "oops"


async def test_a_timeout_up_to_ten_minutes_is_accepted_and_601_seconds_is_refused_naming_the_maximum(
    client: Client,
) -> None:
    _, structured, is_error = await call(client, {"code": "print(1)", "timeout": 600})
    assert not is_error, structured
    _text, structured, is_error = await call(client, {"code": "print(1)", "timeout": 601})
    assert is_error
    assert structured["status"] == "invalid_arguments"
    assert "must be at most 600 (RUNNER_MAX_TIMEOUT), got 601" in structured["message"], structured


async def test_a_run_shorter_than_a_second_gets_no_progress(client: Client) -> None:
    updates: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    await client.call_tool("run_python", {"code": "print(1)"}, progress_callback=on_progress)
    assert updates == []


# --- sessions ----------------------------------------------------------------------------------------


async def close(client: Client, handle: str) -> tuple[str, dict[str, Any], bool]:
    result = await client.call_tool("close_session", {"session": handle})
    assert result.structured_content is not None
    Draft202012Validator(close_output_schema()).validate(result.structured_content)
    return text_of(result), result.structured_content, result.is_error


async def test_a_session_keeps_state_under_the_handle_it_returns_and_says_so_in_text_and_structure(
    client: Client,
) -> None:
    text, started, is_error = await call(client, {"code": "x = 41", "session": "new"})
    assert not is_error
    handle = started["session"]
    assert re.fullmatch(r"s-[A-Za-z0-9_-]{32}", handle)
    assert (started["rolled_back"], started["session_note"]) == (False, "")
    assert f"\n--- session: {handle} | kept ---\n--- exit_code: 0 |" in text
    _, structured, _ = await call(client, {"code": "x += 1\nprint(x)", "session": handle})
    assert (structured["stdout"], structured["session"], structured["rolled_back"]) == ("42\n", handle, False)


async def test_a_failed_call_is_rolled_back_and_the_result_says_so_in_a_line_and_a_field(client: Client) -> None:
    _, started, _ = await call(client, {"code": "x = 1", "session": "new"})
    handle = started["session"]
    text, failed, is_error = await call(client, {"code": "x = 2\nraise KeyError('k')", "session": handle})
    assert is_error
    assert (failed["status"], failed["rolled_back"], failed["session"]) == ("error", True, handle)
    assert f"--- session: {handle} | rolled back (" in text
    assert "the session is as it was before this call ---" in text
    _, after, _ = await call(client, {"code": "print(x)", "session": handle})
    assert after["stdout"] == "1\n"


async def test_a_one_shot_result_has_no_session_field(client: Client) -> None:
    text, structured, _ = await call(client, {"code": "print(1)"})
    assert not {"session", "rolled_back", "session_note"} & set(structured)
    assert "--- session" not in text


async def test_close_session_ends_it_and_from_then_on_its_handle_is_unknown(client: Client) -> None:
    _, started, _ = await call(client, {"code": "x = 1", "session": "new"})
    handle = started["session"]
    text, closed, is_error = await close(client, handle)
    assert not is_error
    assert (closed["closed"], closed["session"]) == (True, handle)
    assert text == f"[request_id={closed['request_id']}]\n{closed['message']}\n"
    _, after, is_error = await call(client, {"code": "print(x)", "session": handle})
    assert is_error
    assert after["message"].startswith("unknown session")
    assert "closed by close_session" in after["message"]
    assert "session" not in after, "nothing ran"
    _, again, is_error = await close(client, handle)
    assert is_error
    assert again["closed"] is False
    assert again["message"].startswith("unknown session")
    # "new" is no handle to close (found by a first hour: it was told to start one with "new").
    _, new, is_error = await close(client, "new")
    assert is_error
    assert new["message"] == (
        'close_session takes the handle a session\'s calls returned (structuredContent.session), not "new"'
    )


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({}, "missing argument"),
        ({"session": 7}, "invalid argument 'session'"),
        ({"session": "s-x", "code": "1"}, "unknown argument 'code': close_session takes 'session' only"),
    ],
)
async def test_close_session_with_bad_arguments_says_which(
    client: Client, arguments: dict[str, Any], says: str
) -> None:
    result = await client.call_tool("close_session", arguments)
    assert result.is_error
    assert says in text_of(result)


async def test_a_large_returned_file_is_marked_for_the_user_and_links_for_both_the_user_and_the_model(
    client: Client,
) -> None:
    code = (
        "open('big.txt', 'w').write('b' * 10_000)\nopen('small.txt', 'w').write('s')\n"
        "open('huge.txt', 'w').write('h' * 60_000)\nprint('x' * 30_000)"
    )
    result = await client.call_tool("run_python", {"code": code})
    files = {
        block.resource.uri: block.annotations
        for block in result.content
        if isinstance(block, types.EmbeddedResource) and block.resource.uri is not None
    }
    [big] = [annotations for uri, annotations in files.items() if str(uri).endswith("/big.txt")]
    [small] = [annotations for uri, annotations in files.items() if str(uri).endswith("/small.txt")]
    assert big is not None
    assert (big.audience, big.priority) == (["user"], 0.3)
    assert small is None
    links = {block.name: block for block in result.content if isinstance(block, types.ResourceLink)}
    assert set(links) == {"stdout", "huge.txt"}  # the stream shown cut, the file over the budget for files
    for link in links.values():
        assert link.annotations is not None
        assert (link.annotations.audience, link.annotations.priority) == (["user", "assistant"], 0.2)
    assert links["huge.txt"].mime_type == "text/plain"


# --- the app view (issue 51): a table for the clients that show it, the same result for the rest -------

SHOWS_APPS = advertise("io.modelcontextprotocol/ui", {"mimeTypes": ["text/html;profile=mcp-app"]})
FRAME_CODE = "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', None]})"


def without_request_id(result: types.CallToolResult) -> tuple[str, dict[str, Any]]:
    structured = dict(check_structured(result.structured_content))
    request_id = structured.pop("request_id")
    for timing in ("duration_seconds", "queue_wait_seconds", "cpu_seconds", "peak_memory_bytes"):
        structured.pop(timing)
    return re.sub(r"duration: [0-9.]+s", "duration: -", text_of(result).replace(request_id, "-")), structured


async def test_a_client_that_shows_app_views_gets_the_table_and_every_other_client_exactly_today_s_result(
    config: Config, mode: str, no_leaks: None
) -> None:
    data = with_packages(config, "fork-server")
    off = dataclasses.replace(data, app_view="off")
    async with Pool.open(data) as pool, Pool.open(off) as off_pool:
        async with Client(build_server(data, pool), mode=mode, extensions=[SHOWS_APPS]) as shows:  # type: ignore[arg-type]
            viewed = await shows.call_tool("run_python", {"code": FRAME_CODE})
            resource = await shows.read_resource("ui://python-runner/run.html")
        async with Client(build_server(data, pool), mode=mode) as plain:  # type: ignore[arg-type]
            unviewed = await plain.call_tool("run_python", {"code": FRAME_CODE})
            listed = await plain.list_resources()
            read_by_any = await plain.read_resource("ui://python-runner/run.html")
        async with Client(build_server(off, off_pool), mode=mode, extensions=[SHOWS_APPS]) as refused:  # type: ignore[arg-type]
            turned_off = await refused.call_tool("run_python", {"code": FRAME_CODE})
            [tool] = (await refused.list_tools()).tools[:1]
            unlisted = await refused.list_resources()
            with pytest.raises(MCPError, match="resource not found"):
                await refused.read_resource("ui://python-runner/run.html")
    text, structured = without_request_id(viewed)
    assert structured.pop("table") == {
        "columns": ["a", "b"],
        "dtypes": ["int64", structured_dtype(viewed)],
        "shape": [2, 2],
        "rows": [[1, "x"], [2, None]],
    }
    assert (text, structured) == without_request_id(unviewed) == without_request_id(turned_off)
    assert [block.type for block in viewed.content] == [block.type for block in unviewed.content] == ["text"]
    assert [str(r.uri) for r in listed.resources] == ["ui://python-runner/run.html"]
    assert resource.contents == read_by_any.contents
    assert tool.meta is None
    assert unlisted.resources == []


async def test_resource_templates_are_listed_as_none_not_refused_as_an_unknown_method(client: Client) -> None:
    # The resources capability promises resources/templates/list; it was "Method not found" (-32601).
    listed = await client.list_resource_templates()
    assert listed.resource_templates == []


def structured_dtype(result: types.CallToolResult) -> str:
    dtype = check_structured(result.structured_content)["table"]["dtypes"][1]
    assert dtype in ("object", "str")  # pandas 3 has a dtype of its own for text
    return str(dtype)


async def test_an_error_answer_says_back_a_5_mib_tool_name_uri_handle_session_or_method_cut_saying_so(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: a tools/call naming a 5 MiB tool was answered with the name whole (10 MiB, as the
    # repr of it was said twice over), though the log cut it; a URI, a handle and a method likewise.
    huge = "x" * (5 * 2**20)
    async with raw_server(work_dir, tmp_path / "stderr.log") as session:
        await session.initialize()
        answers = [
            await session.request("tools/call", {"name": huge, "arguments": {"code": "1"}}),
            await session.request("tools/call", {"name": "close_session", "arguments": {"session": huge}}),
            await session.request("tools/call", {"name": "run_python", "arguments": {"code": "1", "session": huge}}),
            await session.request("resources/read", {"uri": "runner://output/" + huge}),
            await session.request(huge),
        ]
    sizes = [len(json.dumps(answer)) for answer in answers]
    assert max(sizes) < 5_000, sizes
    unknown_tool, closed, unknown_session, not_found, no_method = answers
    assert "unknown tool 'xxx" in unknown_tool["result"]["structuredContent"]["message"]
    assert "(cut: 5,242,880 characters)" in unknown_tool["result"]["structuredContent"]["message"]
    assert closed["result"]["isError"] is True
    # The handle a session call named, as every value said back: before, cut by hand to 64 characters.
    said = unknown_session["result"]["structuredContent"]["message"]
    assert said.startswith(f"unknown session '{'x' * 200}... (cut: 5,242,880 characters)': "), said[:300]
    assert not_found["error"]["message"].startswith("resource not found: runner://output/xxx")
    assert not_found["error"]["data"]["uri"].endswith("(cut: 5,242,896 characters)")
    assert no_method["error"]["message"] == "Method not found"
    assert no_method["error"]["data"].endswith("(cut: 5,242,880 characters)")


async def test_a_progress_token_longer_than_the_bound_is_refused_before_any_progress_sends_it_back(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: a 40 MiB progressToken sent once came back 440 MiB in 12.8 s, whole in each
    # notification, one a second, and took 4.7 s of the server's CPU.
    code = {"code": "import time\ntime.sleep(1.5)\nprint('done')"}
    async with raw_server(work_dir, tmp_path / "stderr.log") as session:
        await session.initialize()
        refused = await session.request(
            "tools/call", {"name": "run_python", "arguments": code, "_meta": {"progressToken": "x" * (1 << 20)}}
        )
        taken = await session.request(
            "tools/call", {"name": "run_python", "arguments": code, "_meta": {"progressToken": "p" * 256}}
        )
        digits = await session.request(
            "tools/call", {"name": "run_python", "arguments": code, "_meta": {"progressToken": int("9" * 4000)}}
        )
    assert len(json.dumps(refused)) < 5_000
    assert refused["result"]["isError"] is True
    said = refused["result"]["structuredContent"]["message"]
    assert said.startswith("_meta.progressToken is 1,048,576 characters long, more than 256"), said
    assert taken["result"]["structuredContent"]["stdout"] == "done\n", taken
    said = digits["result"]["structuredContent"]["message"]
    assert said.startswith("_meta.progressToken is 4,000 characters long, more than 256"), said


async def test_an_unsupported_protocol_version_the_sdk_refuses_is_said_back_cut_saying_so(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the SDK's 2026-07-28 path refuses a version it does not serve before the server's
    # middleware runs, and said the 4 MiB version back whole in `data.requested` (4,194,457 bytes), as it
    # did for an `initialize` on a connection already serving 2026-07-28.
    huge = "x" * (4 * 2**20)
    modern = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    async with raw_server(work_dir, tmp_path / "stderr.log") as session:
        answers = [
            await session.request("tools/list", {"_meta": {**modern, "io.modelcontextprotocol/protocolVersion": huge}}),
            await session.request("tools/list", {"_meta": modern}),
            await session.request(
                "initialize", {"protocolVersion": huge, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            ),
        ]
    refused, served, handshake = answers
    assert [len(json.dumps(answer)) < 5_000 for answer in (refused, handshake)] == [True, True]
    for answer in (refused, handshake):
        assert answer["error"]["code"] == -32022
        assert answer["error"]["data"]["requested"] == "x" * 2000 + "... (cut: 4,194,304 characters)"
        assert answer["error"]["data"]["supported"] == ["2026-07-28"]
    assert served["result"]["tools"], "the connection goes on serving"
