"""RUNNER_TOOLS_CONFIG without a server: the mcpServers file read into downstream servers, and every
fault of it refused naming the file and the entry, never a credential."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.config import load
from runner.config.tools import ToolServers, python_name
from runner.errors import ConfigError

SECRET = "Bearer s3cr3t-value-never-shown"


def servers(**entries: Any) -> bytes:
    return json.dumps({"mcpServers": entries}).encode()


def test_a_file_in_the_mcp_servers_shape_gives_each_server_how_it_is_reached_and_what_it_allows() -> None:
    read = ToolServers.parse(
        servers(
            time={"command": "mcp-server-time", "args": ["--local-timezone", "UTC"], "env": {"A": "1"}, "tools": ["*"]},
            remote={
                "url": "http://127.0.0.1:8001/mcp",
                "headers": {"Authorization": SECRET},
                "tools": ["run_python"],
                "callers": ["alice"],
                "type": "http",
            },
        ),
        "/etc/tools.json",
    )
    time, remote = read.servers
    assert (time.name, time.command, time.args, time.env, time.every_tool) == (
        "time",
        "mcp-server-time",
        ("--local-timezone", "UTC"),
        (("A", "1"),),
        True,
    )
    assert time.allows("anything")
    assert time.serves(None)
    assert time.serves("bob")
    assert (remote.url, remote.headers, remote.tools) == (
        "http://127.0.0.1:8001/mcp",
        (("Authorization", SECRET),),
        ("run_python",),
    )
    assert remote.allows("run_python")
    assert not remote.allows("close_session")
    assert remote.serves("alice")
    assert not remote.serves("bob")
    assert not remote.serves(None)
    assert SECRET not in repr(read), "a server's repr never shows its credentials"
    assert read.named("remote") is remote
    assert read.named("nope") is None


@pytest.mark.parametrize(
    ("name", "made"),
    [
        ("time", "time"),
        ("my-server", "my_server"),
        ("a.b", "a_b"),
        ("3d", "_3d"),
        ("class", "_class"),
        ("get-sum", "get_sum"),
    ],
)
def test_a_python_name_replaces_what_is_not_a_letter_digit_or_underscore(name: str, made: str) -> None:
    assert python_name(name) == made


def test_a_disabled_entry_is_left_out_whatever_else_it_says() -> None:
    # Found by a first hour: Cline's and Roo Code's "disabled": true was ignored, the server started.
    read = ToolServers.parse(
        servers(
            off={"command": "x", "disabled": True},  # no "tools": not looked at
            on={"command": "y", "tools": ["*"], "disabled": False},
        ),
        "/etc/tools.json",
    )
    assert [server.name for server in read.servers] == ["on"]


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"{not json", "not JSON"),
        (b"[]", '"mcpServers"'),
        (servers(), "names no server"),
        (servers(time={"command": "x"}), 'mcpServers.time: "tools" is required'),
        (servers(time={"command": "x", "tools": []}), "names no tool"),
        (servers(time={"command": "x", "tools": ["*", "a"]}), '"\\*" stands alone'),
        (servers(time={"command": "x", "tools": ["a", "a"]}), "names a tool twice"),
        (servers(time={"tools": ["*"]}), 'give "command"'),
        (servers(time={"command": "x", "url": "http://h/mcp", "tools": ["*"]}), 'give "command"'),
        (servers(time={"url": "ftp://h", "tools": ["*"]}), "http:// or https://"),
        (servers(time={"url": "http://h/mcp", "args": [], "tools": ["*"]}), 'for a "command" server'),
        (servers(time={"command": "x", "headers": {}, "tools": ["*"]}), 'for a "url" server'),
        (servers(time={"command": "x", "tools": ["*"], "callers": []}), "names no caller"),
        (servers(time={"command": "x", "tools": ["*"], "colour": "red"}), "unknown key 'colour'$"),
        # Found by a first hour: a misspelt key had no guess, an SSE server was taken silently, and a
        # command written with its arguments failed to start saying only "No such file or directory".
        (servers(time={"comand": "x", "tools": ["*"]}), "unknown key 'comand'; did you mean 'command'\\?"),
        (servers(time={"url": "http://h/sse", "type": "sse", "tools": ["*"]}), "an SSE server is not served here"),
        (
            servers(time={"command": "sh -c true", "tools": ["*"]}),
            '"command" is one program \\(\'sh\'\\): its words after it go in "args"',
        ),
        (servers(**{"a-b": {"command": "x", "tools": ["*"]}, "a_b": {"command": "y", "tools": ["*"]}}), "also 'a-b'"),
        (servers(call={"command": "x", "tools": ["*"]}), "mcp_tools' own name"),
        (servers(**{"bad name": {"command": "x", "tools": ["*"]}}), "a server's name is"),
        (servers(time={"command": "x", "tools": ["*"], "disabled": "yes"}), '"disabled" is true or false'),
        (servers(time={"command": "x", "tools": ["*"], "disabled": True}), "every server of mcpServers is disabled"),
        # Found by a first hour: JSON keeps the last of two; the first entry, its callers with it, was gone.
        (
            b'{"mcpServers": {"time": {"command": "x", "tools": ["*"], "callers": ["alice"]},'
            b' "time": {"command": "x", "tools": ["*"]}}}',
            "'time' is given twice in one object",
        ),
        (b'{"mcpServers": {"t": {"command": "x", "tools": ["*"], "callers": ["a"], "callers": null}}}', "twice"),
    ],
)
def test_a_bad_file_or_entry_is_refused_naming_the_file_and_the_entry(data: bytes, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as raised:
        ToolServers.parse(data, "/etc/tools.json")
    assert raised.value.variable == "RUNNER_TOOLS_CONFIG"
    assert "/etc/tools.json" in str(raised.value)


def test_a_bad_credential_is_refused_without_its_value() -> None:
    data = servers(remote={"url": "http://h/mcp", "headers": {"Authorization": 7}, "tools": ["*"]})
    with pytest.raises(ConfigError, match="'Authorization' must be") as raised:
        ToolServers.parse(data, "/etc/tools.json")
    env = servers(time={"command": "x", "env": {"TOKEN": ["not", SECRET]}, "tools": ["*"]})
    with pytest.raises(ConfigError) as raised:
        ToolServers.parse(env, "/etc/tools.json")
    assert SECRET not in str(raised.value)


def test_the_server_reads_the_file_it_is_given_and_hides_it_from_runs(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_bytes(servers(time={"command": "mcp-server-time", "tools": ["get_current_time"]}))
    deployment = load({"RUNNER_TOOLS_CONFIG": str(path), "RUNNER_PACKAGES": "", "RUNNER_WHEELHOUSE": ""})
    assert deployment.tools is not None
    assert [server.name for server in deployment.tools.servers] == ["time"]
    assert deployment.config.isolation.hidden_files == (str(path.resolve()),)
    with pytest.raises(ConfigError, match="RUNNER_TOOLS_CONFIG"):
        load({"RUNNER_TOOLS_CONFIG": str(tmp_path / "missing.json"), "RUNNER_PACKAGES": "", "RUNNER_WHEELHOUSE": ""})


def test_a_header_with_a_line_break_is_refused_at_start_without_its_value() -> None:
    data = servers(remote={"url": "http://h/mcp", "headers": {"Authorization": SECRET + "\n"}, "tools": ["*"]})
    with pytest.raises(ConfigError, match="no line break") as raised:
        ToolServers.parse(data, "/etc/tools.json")
    assert SECRET not in str(raised.value)
