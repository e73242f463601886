"""Clients nobody here wrote: the MCP Inspector CLI and the TypeScript SDK, against `python -m runner`.

Both come from npm, pinned in tests/clients/package-lock.json and installed once per session with
`npm ci` into tests/clients/node_modules. Node.js and npm must be on PATH: without them these tests
fail (they are part of `make test`), they are not skipped.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner.config import Config
from runner.config.disk import open_environment, with_checkout_defaults
from runner.protocol.schemas import close_input_schema, close_output_schema, input_schema, output_schema
from tests.code_mode import TIME_SERVER, tools_file
from tests.conftest import REPO
from tests.helpers import (
    RETURNS_ARGUMENTS,
    SEED_PLAIN,
    SIX_MB_OUTPUT,
    alive,
    check_returns,
    check_structured,
    check_ts_session,
    processes_mentioning,
    settled,
)
from tests.npm import npm_ci_once

CLIENTS = REPO / "tests" / "clients"
NODE_MODULES = CLIENTS / "node_modules"
INSPECTOR_VERSION = "2.12.0"
SDK_VERSION = "1.32.2"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"

# The first test to run pays for `npm ci` (about 10-15 s from an empty npm cache) on top of its own
# work; every client process below has its own, much shorter, timeout.
pytestmark = pytest.mark.timeout(240)


def assert_left_nothing(work_dir: Path) -> None:
    assert settled(lambda: processes_mentioning(str(work_dir)), 5) == [], "no server or run process outlives the client"
    assert settled(lambda: list(work_dir.iterdir())) == [], "the work dir is left empty"


# --- npm install, once per session ------------------------------------------------------------------


def required_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} not found on PATH: tests/e2e/test_real_clients.py runs the MCP Inspector and the TypeScript "
            "SDK from npm and needs Node.js (20 or newer) with npm",
            pytrace=False,
        )
    return path


@dataclass(frozen=True)
class Node:
    node: str
    inspector: Path  # the Inspector's launcher script (its `mcp-inspector` bin)


@pytest.fixture(scope="session")
def node_clients() -> Node:
    """`npm ci` in tests/clients unless node_modules was installed from the current lock."""
    node = required_tool("node")
    npm_ci_once(required_tool("npm"), CLIENTS, 200, skip_if_unreachable=False)
    installed = {
        name: json.loads((NODE_MODULES / name / "package.json").read_text())
        for name in ("@modelcontextprotocol/inspector", "@modelcontextprotocol/sdk")
    }
    assert installed["@modelcontextprotocol/inspector"]["version"] == INSPECTOR_VERSION
    assert installed["@modelcontextprotocol/sdk"]["version"] == SDK_VERSION
    launcher = installed["@modelcontextprotocol/inspector"]["bin"]["mcp-inspector"]
    return Node(node=node, inspector=(NODE_MODULES / "@modelcontextprotocol/inspector" / launcher).resolve())


def client_env(home: Path) -> dict[str, str]:
    """What the Node client itself runs with; a private HOME keeps ~/.mcp-inspector out of the real one."""
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "NO_COLOR": "1"}


# --- MCP Inspector CLI -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str

    def json_lines(self, stream: str) -> list[dict[str, Any]]:
        text = self.stdout if stream == "stdout" else self.stderr
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def envelope(self) -> dict[str, Any]:
        """`--format json`: exactly one JSON object on stdout."""
        [line] = self.stdout.splitlines()
        envelope: dict[str, Any] = json.loads(line)
        return envelope

    def inspector_stderr(self) -> list[str]:
        """stderr lines that did not come from the server's log (every server log line has a request_id)."""
        return [line for line in self.stderr.splitlines() if " request_id=" not in line]


@pytest.fixture
def inspector(node_clients: Node, work_dir: Path, tmp_path: Path) -> Iterator[Callable[..., Run]]:
    """Run `mcp-inspector --cli <python> -m runner ...` (cwd: the repo, RUNNER_WORK_DIR: work_dir)."""

    def run(*args: str, server: list[str] | None = None) -> Run:
        ours = [sys.executable, "-m", "runner", "-e", f"RUNNER_WORK_DIR={work_dir}", "-e", "RUNNER_SANDBOX=none"]
        # The server takes this checkout's .sandbox-env and .wheelhouse, as a user's does (the Inspector
        # passes no empty value to say otherwise); what it installs goes beside the work directory.
        ours += ["-e", f"RUNNER_WHEELHOUSE_CACHE={tmp_path / 'environments'}"]
        target = server or [*ours, "--cwd", str(REPO)]
        done = subprocess.run(
            [node_clients.node, str(node_clients.inspector), "--cli", *target, *args],
            cwd=CLIENTS,
            env=client_env(tmp_path / "home"),
            capture_output=True,
            text=True,
            timeout=30,
        )
        return Run(done.returncode, done.stdout, done.stderr)

    yield run
    assert_left_nothing(work_dir)


def assert_era(result: dict[str, Any], era: str) -> None:
    """2026-07-28 (modern) results carry the server's identity in _meta; handshake-era results do not."""
    if era == "modern":
        assert result["_meta"][SERVER_INFO_META]["name"] == "python-runner-mcp"
    else:
        assert SERVER_INFO_META not in result.get("_meta", {})


ERAS = ["legacy", "modern"]
ERA_VERSIONS = {"legacy": "2025-11-25", "modern": "2026-07-28"}
SUM_ARGS = '{"code":"print(sum(range(10)))"}'
SUM_CALL = ["--method", "tools/call", "--tool-name", "run_python", "--tool-args-json", SUM_ARGS]


@pytest.mark.parametrize("era", ERAS)
def test_the_inspector_negotiates_the_protocol_version_of_each_era(inspector: Callable[..., Run], era: str) -> None:
    run = inspector("--method", "initialize", "--protocol-era", era, "--format", "json")
    assert run.returncode == 0, run.stderr
    result = run.envelope()["result"]
    assert result["protocolVersion"] == ERA_VERSIONS[era]
    assert result["serverInfo"]["name"] == "python-runner-mcp"
    assert "tools" in result["capabilities"]
    assert run.inspector_stderr() == []


@pytest.mark.parametrize("era", ERAS)
def test_the_inspector_lists_the_tool_under_strict_with_zero_schema_portability_findings(
    inspector: Callable[..., Run], era: str
) -> None:
    as_json = inspector("--method", "tools/list", "--strict", "--protocol-era", era, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    envelope = as_json.envelope()
    assert set(envelope) == {"result"}, "no schemaFindings key: the lint found nothing"
    [tool, close] = envelope["result"]["tools"]
    assert tool["name"] == "run_python"
    # The server the Inspector starts takes this checkout's package environment and wheelhouse.
    assert tool["inputSchema"] == input_schema(open_environment(Config.from_env(with_checkout_defaults({}))))
    assert tool["outputSchema"] == output_schema()
    assert (close["name"], close["inputSchema"]) == ("close_session", close_input_schema())
    assert as_json.inspector_stderr() == []
    as_text = inspector("--method", "tools/list", "--strict", "--protocol-era", era)
    assert as_text.returncode == 0, as_text.stderr
    assert as_text.inspector_stderr() == [], "no Warning:/Error: findings and no summary line on stderr"
    assert json.loads(as_text.stdout)["tools"][0]["name"] == "run_python"


def test_the_inspector_strict_lint_reports_a_nullable_type_array_so_zero_findings_is_meaningful(
    inspector: Callable[..., Run], node_clients: Node
) -> None:
    """Control: the same commands against a server whose schema has `"type": ["string", "null"]`."""
    unportable = [node_clients.node, str(CLIENTS / "unportable_server.mjs")]
    as_json = inspector("--method", "tools/list", "--strict", "--format", "json", server=unportable)
    assert as_json.returncode == 0, "warnings alone do not change the exit status (only errors exit 6)"
    [tool_findings] = as_json.envelope()["schemaFindings"]
    assert tool_findings["toolName"] == "nullable"
    assert [(f["rule"], f["severity"]) for f in tool_findings["findings"]] == [("type-union", "warning")]
    as_text = inspector("--method", "tools/list", "--strict", server=unportable)
    assert as_text.returncode == 0
    lines = as_text.inspector_stderr()
    assert lines[0] == 'Warning: tool "nullable"'
    assert lines[1] == "  Path: inputSchema.properties.value"
    assert lines[-1] == "0 errors, 1 warning across 1 tool."


@pytest.mark.parametrize("era", ERAS)
def test_the_inspector_calls_run_python_and_gets_the_seed_text_and_structured_content(
    inspector: Callable[..., Run], era: str
) -> None:
    run = inspector(*SUM_CALL, "--protocol-era", era, "--format", "json")
    assert run.returncode == 0, run.stderr
    result = run.envelope()["result"]
    assert_era(result, era)
    [block] = result["content"]
    assert block["type"] == "text"
    assert re.fullmatch(SEED_PLAIN, block["text"])
    structured = check_structured(result["structuredContent"])
    assert (structured["status"], structured["stdout"], structured["exit_code"]) == ("ok", "45\n", 0)
    assert structured["request_id"] in block["text"]
    assert result["isError"] is False
    assert run.inspector_stderr() == []


@pytest.mark.parametrize(
    ("arguments", "status"),
    [({"code": "raise ValueError('boom')"}, "error"), ({"code": "x", "timeout": -1}, "invalid_arguments")],
    ids=["exception", "invalid-arguments"],
)
def test_an_error_run_makes_the_inspector_exit_with_its_is_error_code_5(
    inspector: Callable[..., Run], arguments: dict[str, Any], status: str
) -> None:
    run = inspector(
        "--method", "tools/call", "--tool-name", "run_python", "--tool-args-json", json.dumps(arguments),
        "--format", "json",
    )  # fmt: skip
    assert run.returncode == 5, run.stderr
    result = run.envelope()["result"]
    assert result["isError"] is True
    assert check_structured(result["structuredContent"])["status"] == status
    assert run.json_lines("stderr") == [
        {"error": {"code": "tool_is_error", "message": "Tool 'run_python' returned isError:true."}}
    ]


def test_the_inspector_calls_run_python_with_files_and_gets_an_image_resources_and_a_result(
    inspector: Callable[..., Run],
) -> None:
    run = inspector(
        "--method", "tools/call", "--tool-name", "run_python", "--tool-args-json", json.dumps(RETURNS_ARGUMENTS),
        "--format", "json",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    check_returns(run.envelope()["result"])
    assert run.inspector_stderr() == []


# --- TypeScript SDK ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TsSession:
    reports: dict[str, dict[str, Any]]
    stderr: str
    work_dir: Path

    def report(self, check: str) -> dict[str, Any]:
        assert check in self.reports, f"ts_client.mjs printed no {check!r} report; stderr:\n{self.stderr[-3000:]}"
        report = self.reports[check]
        assert "error" not in report, f"{check}: {report}"
        return report


@pytest.fixture(scope="module")
def ts_session(node_clients: Node, tmp_path_factory: pytest.TempPathFactory) -> TsSession:
    """One run of tests/clients/ts_client.mjs: it starts the server and prints one JSON report per check."""
    base = tmp_path_factory.mktemp("ts")
    work_dir = base / "work"
    work_dir.mkdir()
    config = {
        "command": sys.executable,
        "args": ["-m", "runner"],
        # No sandbox: the cancelled run writes its pid to a file the test reads on the host.
        "env": {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "RUNNER_WORK_DIR": str(work_dir),
            "RUNNER_SANDBOX": "none",
            "RUNNER_PACKAGES": "",
            "RUNNER_WHEELHOUSE": "",
        },
        "cwd": str(REPO),
        "pidFile": str(base / "pid"),
        "returnsArguments": RETURNS_ARGUMENTS,
    }
    reports, stderr = run_ts_client(node_clients, config, base / "home", timeout=60)
    return TsSession(reports, stderr, work_dir)


@pytest.mark.timeout(240)
def test_a_70_second_run_ends_ok_through_the_typescript_sdk_whose_timeout_only_progress_resets(
    node_clients: Node, tmp_path: Path
) -> None:
    reports, stderr = run_ts_client(node_clients, one_check(tmp_path, "long"), tmp_path / "home", timeout=200)
    long = reports["long"]
    assert "error" not in long, (long, stderr[-3000:])
    assert check_structured(long["structuredContent"])["stdout"] == "".join(f"step {i}\n" for i in range(7)) + "done\n"
    assert long["tookMs"] >= 70_000
    times = [0, *(n["afterMs"] for n in long["notifications"]), long["tookMs"]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert max(gaps) <= 5_000, gaps  # at least every 5 s, though it prints only every 10 s
    messages = [n.get("message", "") for n in long["notifications"]]
    # The latest output rides along: each step appears in some message once printed.
    for i in range(7):
        assert any("latest stdout:\n" in m and f"step {i}" in m for m in messages), (i, messages[-3:])


def test_the_typescript_sdk_over_stdio_reads_the_largest_stdout_the_server_keeps_and_calls_on(
    node_clients: Node, tmp_path: Path
) -> None:
    # Found by a review: the SDK's stdio transport takes a message of 10 MiB at most, and closes the
    # connection over a longer one; a read of 16 MiB of kept stdout (the default then) did, and the host
    # lost the server. The default now keeps 6 MiB, whose answer is 9 MiB at most (as text, JSON half as
    # long again; else base64, a third).
    config = one_check(tmp_path, "largest", RUNNER_SANDBOX="none")
    reports, stderr = run_ts_client(node_clients, config, tmp_path / "home", timeout=120)
    largest = reports["largest"]
    assert "error" not in largest, (largest, stderr[-3000:])
    assert largest == {"linkSize": 6 << 20, "textChars": 6 << 20, "after": "42\n"}


def one_check(tmp_path: Path, check: str, **env: str) -> dict[str, Any]:
    """tests/clients/ts_client.mjs's configuration for `check` alone, over stdio, on a server of this
    checkout with the standard library only, its work directory in `tmp_path`."""
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    return {
        "command": sys.executable,
        "args": ["-m", "runner"],
        "env": {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "RUNNER_WORK_DIR": str(work_dir),
            "RUNNER_PACKAGES": "",
            "RUNNER_WHEELHOUSE": "",
            **env,
        },
        "cwd": str(REPO),
        "only": [check],
    }


def run_ts_client(
    node_clients: Node, config: dict[str, Any], home: Path, timeout: float
) -> tuple[dict[str, dict[str, Any]], str]:
    """Run tests/clients/ts_client.mjs with `config`; its reports by check name, and its stderr."""
    done = subprocess.run(
        [node_clients.node, str(CLIENTS / "ts_client.mjs"), json.dumps(config)],
        cwd=CLIENTS,
        env=client_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    reports = {line.pop("check"): line for line in lines}
    assert len(reports) == len(lines), "one report per check"
    return reports, done.stderr


def test_the_typescript_sdk_negotiates_2025_11_25_and_lists_the_tool_with_the_published_schemas(
    ts_session: TsSession,
) -> None:
    connect = ts_session.report("connect")
    assert connect["protocolVersion"] == "2025-11-25"
    assert connect["serverInfo"]["name"] == "python-runner-mcp"
    listed = ts_session.report("list")
    assert listed["names"] == ["run_python", "close_session"]
    assert listed["inputSchema"] == input_schema(Config.from_env({}))
    assert listed["outputSchema"] == output_schema()
    assert (listed["closeInputSchema"], listed["closeOutputSchema"]) == (close_input_schema(), close_output_schema())


def test_the_typescript_sdk_reads_a_cut_stdout_back_whole_through_its_resource_link(ts_session: TsSession) -> None:
    link = ts_session.report("link")
    [block] = link["links"]
    assert (block["name"], block["size"], block["mimeType"]) == ("stdout", len(SIX_MB_OUTPUT), "text/plain")
    assert link["textBytes"] == len(SIX_MB_OUTPUT)
    assert link["sha256"] == hashlib.sha256(SIX_MB_OUTPUT).hexdigest()
    assert [kept["uri"] for kept in link["fullOutput"]] == [block["uri"]]


def test_the_typescript_sdk_accepts_every_result_of_a_session_and_of_close_session(ts_session: TsSession) -> None:
    check_ts_session(ts_session.report("session"))


def test_the_typescript_sdk_calls_run_python_and_gets_the_seed_text_and_structured_content(
    ts_session: TsSession,
) -> None:
    call = ts_session.report("call")
    assert re.fullmatch(SEED_PLAIN, call["text"])
    structured = check_structured(call["structuredContent"])
    assert (structured["status"], structured["stdout"]) == ("ok", "45\n")
    assert call["isError"] is False


def test_the_typescript_sdk_accepts_an_image_resources_and_a_result_from_handed_in_files(
    ts_session: TsSession,
) -> None:
    check_returns(ts_session.report("returns"))


def test_the_typescript_sdk_sees_is_error_for_a_failing_run(ts_session: TsSession) -> None:
    error = ts_session.report("error")
    assert error["isError"] is True
    structured = check_structured(error["structuredContent"])
    assert (structured["status"], structured["exit_code"]) == ("error", 1)
    assert "ValueError: boom" in structured["stderr"]
    assert "ValueError: boom" in error["text"]


def test_the_typescript_sdk_receives_progress_notifications_during_a_long_run(ts_session: TsSession) -> None:
    progress = ts_session.report("progress")
    assert check_structured(progress["structuredContent"])["stdout"] == "done\n"
    notifications = progress["notifications"]
    assert len(notifications) >= 1, (
        "no notifications/progress reached the TypeScript client's onprogress during a 2.5 s run whose "
        "request carried a progressToken (the server should send one about once a second)"
    )
    assert len(progress["rawNotifications"]) == len(notifications), "every notification reached onprogress"
    values = [n["progress"] for n in notifications]
    assert values == sorted(set(values)), "progress increases with every notification"


def test_aborting_a_typescript_sdk_call_kills_its_process_and_the_server_keeps_serving(
    ts_session: TsSession,
) -> None:
    cancel = ts_session.report("cancel")
    assert "rejected" in cancel["settled"], "the aborted callTool rejects"
    assert cancel["goneWhileConnected"], f"run pid {cancel['pid']} still alive 10 s after the abort"
    assert cancel["serverPidAlive"]
    assert check_structured(cancel["after"]["structuredContent"])["stdout"] == "still here\n"
    assert not alive(cancel["pid"])
    assert "status=cancelled" in ts_session.stderr


def test_the_typescript_session_closes_with_no_process_and_no_file_left(ts_session: TsSession) -> None:
    close = ts_session.report("close")
    assert close["exited"], "the server exits when the client closes"
    assert not alive(close["serverPid"])
    assert_left_nothing(ts_session.work_dir)


@pytest.mark.parametrize("era", ERAS)
def test_the_inspector_finds_nothing_under_strict_with_code_mode_on_and_calls_a_tool_through_a_run(
    inspector: Callable[..., Run], work_dir: Path, tmp_path: Path, era: str
) -> None:
    if not TIME_SERVER.exists():
        pytest.skip("no downstream environment: `make test` builds it from its lock")
    tools = tools_file(tmp_path, time={"command": str(TIME_SERVER), "tools": ["get_current_time"]})
    ours = [sys.executable, "-m", "runner", "-e", f"RUNNER_WORK_DIR={work_dir}", "-e", "RUNNER_SANDBOX=none"]
    ours += ["-e", f"RUNNER_WHEELHOUSE_CACHE={tmp_path / 'environments'}", "-e", f"RUNNER_TOOLS_CONFIG={tools}"]
    server = [*ours, "--cwd", str(REPO)]
    listed = inspector("--method", "tools/list", "--strict", "--protocol-era", era, "--format", "json", server=server)
    assert listed.returncode == 0, listed.stderr
    envelope = listed.envelope()
    assert set(envelope) == {"result"}, "no schemaFindings key: the lint found nothing"
    assert "mcp_tools.time.get_current_time" in envelope["result"]["tools"][0]["description"]
    code = json.dumps({"code": "import mcp_tools\nprint(mcp_tools.time.get_current_time(timezone='UTC')['timezone'])"})
    called = inspector(
        "--method",
        "tools/call",
        "--tool-name",
        "run_python",
        "--tool-args-json",
        code,
        "--protocol-era",
        era,
        "--format",
        "json",
        server=server,
    )
    assert called.returncode == 0, called.stderr
    assert called.envelope()["result"]["structuredContent"]["stdout"] == "UTC\n"
    assert called.inspector_stderr() == []
