"""Clients nobody here wrote, over Streamable HTTP with a bearer token: the TypeScript SDK and the MCP
Inspector CLI against `python -m runner --transport http` (the npm packages of tests/e2e/test_real_clients.py)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.config import Config
from runner.protocol.schemas import input_schema, output_schema
from tests.e2e.test_real_clients import CLIENTS, Node, assert_left_nothing, client_env, node_clients, run_ts_client
from tests.helpers import (
    RETURNS_ARGUMENTS,
    SEED_PLAIN,
    SIX_MB_CODE,
    SIX_MB_OUTPUT,
    alive,
    check_returns,
    check_structured,
    check_ts_session,
)
from tests.http_server import HttpServer, http_server

__all__ = ["node_clients"]  # the session fixture, shared with tests/e2e/test_real_clients.py

pytestmark = pytest.mark.timeout(240)

TOKEN = "inspector-and-typescript-0123456789"


@pytest.fixture
def server(work_dir: Path, tmp_path: Path) -> Iterator[HttpServer]:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"node-clients:{TOKEN}\n")
    with http_server(work_dir, tmp_path / "server.log", RUNNER_AUTH_TOKENS_FILE=str(tokens)) as running:
        yield running
        assert running.stop() == 0
    assert_left_nothing(work_dir)
    assert TOKEN not in (tmp_path / "server.log").read_text()


def test_the_typescript_sdk_works_over_http_with_a_token(
    node_clients: Node, server: HttpServer, tmp_path: Path
) -> None:
    config = {
        "url": server.url,
        "headers": {"Authorization": f"Bearer {TOKEN}"},
        "pidFile": str(tmp_path / "pid"),
        "returnsArguments": RETURNS_ARGUMENTS,
    }
    reports, _ = run_ts_client(node_clients, config, tmp_path / "home", timeout=120)
    assert "error" not in reports["connect"], reports["connect"]
    assert reports["connect"]["protocolVersion"] == "2025-11-25"
    listed = reports["list"]
    assert listed["names"] == ["run_python", "close_session"]
    assert listed["inputSchema"] == input_schema(Config.from_env({}))
    assert listed["outputSchema"] == output_schema()
    assert re.fullmatch(SEED_PLAIN, reports["call"]["text"])
    assert reports["error"]["isError"] is True
    check_returns(reports["returns"])
    progress = reports["progress"]
    assert check_structured(progress["structuredContent"])["stdout"] == "done\n"
    assert len(progress["notifications"]) >= 1, "progress reached onprogress over SSE"
    cancel = reports["cancel"]
    assert "rejected" in cancel["settled"], "the aborted callTool rejects"
    assert cancel["goneWhileConnected"], f"run pid {cancel['pid']} still alive 10 s after the abort"
    assert not alive(cancel["pid"])
    assert check_structured(cancel["after"]["structuredContent"])["stdout"] == "still here\n"
    check_ts_session(reports["session"])
    assert reports["close"] == {"closed": True}


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_inspector_cli_calls_run_python_over_http_with_a_token(
    node_clients: Node, server: HttpServer, tmp_path: Path, era: str
) -> None:
    def inspector(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [node_clients.node, str(node_clients.inspector), "--cli", server.url, "--transport", "http", *args],
            cwd=CLIENTS,
            env=client_env(tmp_path / "home"),
            capture_output=True,
            text=True,
            timeout=60,
        )

    token = ["--header", f"Authorization: Bearer {TOKEN}", "--protocol-era", era, "--format", "json"]
    listed = inspector("--method", "tools/list", "--strict", *token)
    assert listed.returncode == 0, listed.stderr
    envelope = json.loads(listed.stdout)
    assert [tool["name"] for tool in envelope["result"]["tools"]] == ["run_python", "close_session"]
    assert envelope.get("schemaFindings", []) == [], "strict: no schema portability finding"
    arguments = '{"code":"print(sum(range(10)))"}'
    called = inspector("--method", "tools/call", "--tool-name", "run_python", "--tool-args-json", arguments, *token)
    assert called.returncode == 0, called.stderr
    result = json.loads(called.stdout)["result"]
    assert re.fullmatch(SEED_PLAIN, result["content"][0]["text"])
    refused = inspector("--method", "tools/list", "--protocol-era", era)
    assert refused.returncode != 0, "without the token the Inspector gets nothing"

    def session_call(tool: str, arguments: dict[str, str]) -> dict[str, Any]:
        done = inspector(
            "--method", "tools/call", "--tool-name", tool, "--tool-args-json", json.dumps(arguments), *token
        )
        structured: dict[str, Any] = json.loads(done.stdout)["result"]["structuredContent"]
        return structured

    # Each Inspector run is a client of its own; the session outlives it on the server, under its handle.
    handle = check_structured(session_call("run_python", {"code": "x = 6", "session": "new"}))["session"]
    kept = check_structured(session_call("run_python", {"code": "print(x * 7)", "session": handle}))
    assert (kept["stdout"], kept["rolled_back"]) == ("42\n", False)
    assert session_call("close_session", {"session": handle})["closed"] is True

    # A stdout shown cut, read back whole by a later Inspector run through the link the result carried.
    cut = inspector(
        "--method",
        "tools/call",
        "--tool-name",
        "run_python",
        "--tool-args-json",
        json.dumps({"code": SIX_MB_CODE}),
        *token,
    )
    assert cut.returncode == 0, cut.stderr
    [link] = [block for block in json.loads(cut.stdout)["result"]["content"] if block["type"] == "resource_link"]
    read = inspector("--method", "resources/read", "--uri", link["uri"], *token)
    assert read.returncode == 0, read.stderr
    [contents] = json.loads(read.stdout)["result"]["contents"]
    assert contents["text"].encode() == SIX_MB_OUTPUT

    # A run that outlasts a second: at 2026-07-28 the Inspector declares the tasks extension and settles
    # the task it gets back through @modelcontextprotocol/ext-tasks (tasks/get until it has ended).
    long = json.dumps({"code": "import time\nprint(1, flush=True)\ntime.sleep(2)\nprint(2)"})
    tasked = inspector("--method", "tools/call", "--tool-name", "run_python", "--tool-args-json", long, *token)
    assert tasked.returncode == 0, tasked.stderr
    assert check_structured(json.loads(tasked.stdout)["result"]["structuredContent"])["stdout"] == "1\n2\n"
    made = server.log.read_text().count("task created")
    assert made == (1 if era == "modern" else 0), "a task at 2026-07-28 only, resolved by the Inspector itself"
