"""A run's brokered call answered (`runner.tools.broker.RunCalls`), its downstream server played by a
stand-in for its connection's call: what the run is answered, and what its answer cost to make."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from mcp import types

from runner.config import ToolsConfig, ToolServers
from runner.config.tools import Downstream
from runner.outcome import ToolCall
from runner.tools.broker import Broker, RunCalls
from runner.tools.downstream import loop_time

pytestmark = pytest.mark.anyio

MIB = 1 << 20


async def answered(
    result: dict[str, Any], dumped: list[int], monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Any], RunCalls]:
    """What a run whose budget is 1 MiB is answered for a call whose result is `result`, and the run's
    calls; the length of each text `json.dumps` made meanwhile added to `dumped`."""
    broker = _broker(Downstream(name="s", python_name="s", tools=("*",), callers=None, command="true"))
    connection = broker.connections["s"]

    async def call(tool: str, arguments: dict[str, Any], seconds: float) -> types.CallToolResult:
        return types.CallToolResult.model_validate(result)

    monkeypatch.setattr(connection, "call", call)
    dumps = json.dumps

    def counted(value: Any, **options: Any) -> str:
        text = dumps(value, **options)
        dumped.append(len(text))
        return text

    run = broker.for_run("r", None, loop_time() + 30)
    assert run is not None
    monkeypatch.setattr(json, "dumps", counted)
    try:
        answer = await run.forward(ToolCall("s", "t", {}, 10, loop_time()))
    finally:
        monkeypatch.setattr(json, "dumps", dumps)
    return json.loads(answer), run


async def test_a_result_over_the_runs_budget_is_refused_having_dumped_about_the_budget_not_the_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Found by a review: a result was dumped whole to JSON on the event loop before its size was
    # looked at (an 18 MiB one some 0.13 s), though it was then refused. Records, as a server's
    # structured content holds them: some 8 MiB of them under a budget of 1 MiB.
    records = [{"id": n, "name": f"name {n}", "email": f"user{n}@example.com"} for n in range(110_000)]
    dumped: list[int] = []
    said, run = await answered({"content": [], "structuredContent": {"records": records}}, dumped, monkeypatch)
    assert said["ok"] is False
    assert "would pass what this run may pass through tools" in said["error"]
    assert "RUNNER_TOOLS_MAX_MB" in said["error"]
    assert sum(dumped) < 2 * MIB, f"{sum(dumped):,} characters dumped"
    assert b"has passed" in run.take(b'{"op": "module"}')  # counted all the same: nothing more passes
    # A text result is refused by its length: a megabyte or so dumped of its 8.
    dumped.clear()
    said, run = await answered({"content": [{"type": "text", "text": "x" * (8 * MIB)}]}, dumped, monkeypatch)
    assert said["ok"] is False
    assert "RUNNER_TOOLS_MAX_MB" in said["error"]
    assert sum(dumped) < 2 * MIB, f"{sum(dumped):,} characters dumped"


async def test_a_result_within_the_budget_is_answered_as_json_dumps_writes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    records = {"records": [{"id": n, "name": f"n\u00e9 {n}", "tags": ["a", None, 1.5]} for n in range(3_000)]}
    said, _ = await answered({"content": [], "structuredContent": records}, [], monkeypatch)
    assert said == {"ok": True, "value": records}


async def test_a_tool_error_too_large_for_the_run_is_said_in_part_and_counts_past_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = [{"id": n, "name": f"name {n}"} for n in range(200_000)]
    dumped: list[int] = []
    said, run = await answered(
        {"content": [], "structuredContent": {"records": records}, "isError": True}, dumped, monkeypatch
    )
    assert said["ok"] is False
    assert said["error"].startswith('s.t: the tool failed: {"records": [{"id": 0, "name": "name 0"}')
    assert len(said["error"]) < 2_100
    assert sum(dumped) < 2 * MIB, f"{sum(dumped):,} characters dumped"
    assert b"has passed" in run.take(b'{"op": "module"}')  # received all the same, however little was said


def test_a_name_a_run_sends_is_said_back_cut_as_every_answer_cuts_a_clients_value() -> None:
    server = Downstream(name="s", python_name="s", tools=("*",), callers=None, command="true")
    config = ToolsConfig("tools.json", tools_max_calls=100, tools_max_mb=16, tools_max_concurrent=4, tools_spin_us=0)
    run = Broker(ToolServers("tools.json", (server,)), config, logging.getLogger()).for_run("r", None, loop_time() + 30)
    assert run is not None
    huge = "x" * MIB
    for arguments, why in (([], "arguments must be an object"), ({}, "no such server here")):
        said = run.take(json.dumps({"op": "call", "server": huge, "tool": "t" + huge, "arguments": arguments}).encode())
        assert isinstance(said, bytes)
        error = json.loads(said)["error"]
        cut = f"{'x' * 200}... (cut: 1,048,576 characters).t{'x' * 199}... (cut: 1,048,577 characters): {why}"
        assert error == cut


def calls_to_one_tool(schema: dict[str, Any], max_calls: int) -> RunCalls:
    """A run's calls, its server's one tool `s.t` listed with `schema` (no downstream: refusals only)."""
    server = Downstream(name="s", python_name="s", tools=("*",), callers=None, command="true")
    config = ToolsConfig(
        "tools.json", tools_max_calls=max_calls, tools_max_mb=16, tools_max_concurrent=4, tools_spin_us=0
    )
    broker = Broker(ToolServers("tools.json", (server,)), config, logging.getLogger())
    broker.connections["s"].tools["t"] = types.Tool(name="t", input_schema=schema)
    run = broker.for_run("r", None, loop_time() + 30)
    assert run is not None
    return run


def error_of(run: RunCalls, arguments: dict[str, Any]) -> str:
    """What the run is told of a call of `s.t` with `arguments` that is refused."""
    said = run.take(json.dumps({"op": "call", "server": "s", "tool": "t", "arguments": arguments}).encode())
    assert isinstance(said, bytes)
    error: str = json.loads(said)["error"]
    return error


def test_calls_refused_by_the_input_schema_count_against_the_runs_calls() -> None:
    # Found by a review: only forwarded calls counted, so a run had 1,999 arguments checked (25 s of the
    # event loop's CPU with a schema that is costly to check) where 100 calls forwarded were its limit.
    run = calls_to_one_tool({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}, 3)
    errors = [error_of(run, arguments) for arguments in ({"n": "x"}, {}, {}, {})]
    assert all("do not match the tool's input schema" in error for error in errors[:3]), errors
    assert errors[3] == "s.t: this run has made its 3 tool calls (RUNNER_TOOLS_MAX_CALLS)"


def test_a_misspelt_argument_is_named_beside_what_the_schema_says_is_missing() -> None:
    # Found by a first hour: `get_current_time(tz="x")` was told only that 'timezone' is required.
    schema = {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}
    error = error_of(calls_to_one_tool(schema, 9), {"tz": "UTC"})
    assert error.startswith("s.t: the arguments do not match the tool's input schema: "), error
    assert error.endswith("('tz': no such argument; it takes timezone)"), error


def test_a_runs_refused_calls_name_the_tool_to_give_and_make_the_listings_python_names_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Found by a review: each call naming no listed tool made the Python names of every listed tool
    # again, to say which one it meant: 1,000 tools, a run's 2,000 frames, 2.7 s of the event loop.
    import runner.tools.downstream

    made: list[str] = []
    real = runner.tools.downstream.python_name
    monkeypatch.setattr(runner.tools.downstream, "python_name", lambda name: made.append(name) or real(name))
    server = Downstream(name="s", python_name="s", tools=("*",), callers=None, command="true")
    config = ToolsConfig("tools.json", tools_max_calls=100, tools_max_mb=16, tools_max_concurrent=4, tools_spin_us=0)
    broker = Broker(ToolServers("tools.json", (server,)), config, logging.getLogger())
    names = [f"tool-{n:04d}" for n in range(1000)]
    broker.connections["s"].tools = {name: types.Tool(name=name, input_schema={}) for name in names}
    run = broker.for_run("r", None, loop_time() + 30)
    for tool in ("nope", "tool_0007") * (run.most_frames // 2):
        answer = run.take(json.dumps({"op": "call", "server": "s", "tool": tool, "arguments": {}}).encode())
    assert isinstance(answer, bytes)
    assert "the server calls this tool 'tool-0007'" in json.loads(answer)["error"]
    assert len(made) == len(names)


def _broker(*servers: Downstream) -> Broker:
    """A broker of `servers`, none started; a run's budget 1 MiB."""
    config = ToolsConfig("tools.json", tools_max_calls=100, tools_max_mb=1, tools_max_concurrent=4, tools_spin_us=0)
    return Broker(ToolServers("tools.json", servers), config, logging.getLogger())


def _two_servers() -> Broker:
    """A broker of `open`, for every caller, and `mine`, for alice alone, each listing its tool `t`."""
    broker = _broker(
        Downstream(name="open", python_name="open", tools=("*",), callers=None, command="true"),
        Downstream(name="mine", python_name="mine", tools=("*",), callers=("alice",), command="true"),
    )
    for name, connection in broker.connections.items():
        connection.tools = {"t": types.Tool(name="t", description=f"{name}'s tool", input_schema={"type": "object"})}
        connection.down = ""
    return broker


def test_a_caller_a_server_does_not_serve_is_refused_its_calls_as_if_there_were_no_such_server() -> None:
    # Found by a review of the claims: bob's run had no `mcp_tools` in the only test of `callers`, so this
    # check was never reached; a run's own frame (mcp_tools.call) names any server.
    broker = _two_servers()
    bobs, alices = broker.for_run("r1", "bob", loop_time() + 30), broker.for_run("r2", "alice", loop_time() + 30)
    assert bobs is not None
    assert alices is not None
    frame = b'{"op": "call", "server": "mine", "tool": "t", "arguments": {}}'
    refused = bobs.take(frame)
    assert isinstance(refused, bytes)
    assert json.loads(refused) == {"ok": False, "error": "mine.t: no such server here"}
    assert isinstance(alices.take(frame), ToolCall)
    assert "mine" not in json.dumps(broker.catalog("bob"))  # nor in bob's mcp_tools
    assert "mine" in json.dumps(broker.catalog("alice"))


def test_the_tool_description_names_only_the_servers_every_caller_may_use() -> None:
    said = _two_servers().description()
    assert "mcp_tools.open.t" in said
    assert "mine" not in said
    assert "1 server" in said


def test_a_servers_python_name_given_to_call_is_answered_with_its_name_where_the_caller_may_use_it() -> None:
    # Found by a first hour: mcp_tools.servers names servers by their Python names, and call() said "no
    # such server here" for each of them where the name had a '-'.
    broker = _broker(
        Downstream(name="my-time", python_name="my_time", tools=("*",), callers=None, command="true"),
        Downstream(name="their-time", python_name="their_time", tools=("*",), callers=("alice",), command="true"),
    )
    bobs = broker.for_run("r", "bob", loop_time() + 30)
    assert bobs is not None

    def said(server: str) -> Any:
        answer = bobs.take(json.dumps({"op": "call", "server": server, "tool": "t", "arguments": {}}).encode())
        assert isinstance(answer, bytes)
        return json.loads(answer)["error"]

    assert said("my_time") == "my_time.t: the server's name is 'my-time': mcp_tools.call takes the server's own names"
    assert said("their_time") == "their_time.t: no such server here", "not said to a caller it does not serve"


async def test_calls_past_the_budget_and_a_result_refused_for_its_size_are_logged_and_counted_with_their_bytes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by a first hour: calls past the budget were in neither the log nor the metrics, and the result
    # refused for its size was logged received_bytes=0 though its bytes counted against the run.
    seen: list[tuple[str, str, str]] = []
    records = [{"id": n, "name": f"name {n}"} for n in range(60_000)]
    caplog.set_level(logging.INFO)
    said, run = await answered({"content": [], "structuredContent": {"records": records}}, [], monkeypatch)
    run._broker.observe = lambda server, tool, status, seconds: seen.append((server, tool, status))
    assert said["ok"] is False
    assert b"has passed" in run.take(b'{"op": "call", "server": "s", "tool": "t", "arguments": {}}')
    run.tell()
    assert seen == [("(unknown)", "(unknown)", "refused")] * 2  # (its stand-in server listed no tool)
    refused = [r for r in caplog.records if r.getMessage() == "tool call"]
    assert [r.fields["status"] for r in refused] == ["refused", "refused"]  # type: ignore[attr-defined]
    assert refused[0].fields["received_bytes"] > 1 << 20  # type: ignore[attr-defined]


def test_a_catalog_larger_than_what_the_run_may_pass_is_said_as_what_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by a review: "this run has passed 2,097,152 bytes through tools", said to a run that had made
    # no call, whose catalog alone (one server's large listing) was more than its budget.
    server = Downstream(name="s", python_name="s", tools=("*",), callers=None, command="true")
    config = ToolsConfig("tools.json", tools_max_calls=100, tools_max_mb=1, tools_max_concurrent=4, tools_spin_us=0)
    broker = Broker(ToolServers("tools.json", (server,)), config, logging.getLogger())
    monkeypatch.setattr(broker, "module", lambda caller: b"x" * (2 * MIB))
    run = broker.for_run("r", None, loop_time() + 30)
    assert run is not None
    said = run.take(b'{"op": "module"}')
    assert (
        b"the tools' catalog of 2,097,152 bytes is more than this run may pass, 1,048,560 of 1,048,576" in said
    )  # its frame counted
    assert b"has passed" in run.take(b'{"op": "module"}')  # counted all the same: nothing more passes
