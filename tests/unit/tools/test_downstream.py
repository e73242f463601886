"""A downstream connection's own text, without a server: no credential of the file's in it."""

from __future__ import annotations

import contextlib
import os

import anyio
import pytest
from mcp import MCPError
from mcp.types import CONNECTION_CLOSED

from runner.config.tools import Downstream
from runner.logs import get_logger
from runner.tools.downstream import Connection
from runner.tools.stderr import stderr_to_log

TOKEN = "Bearer s3cr3t-0123456789"


def test_a_reason_or_an_error_never_shows_a_credential_the_file_gives_the_server() -> None:
    # Found by a review: an HTTP library's error echoed a header's value, which went to runs ("down")
    # and to the log.
    server = Downstream(
        "remote", "remote", ("*",), None, url="http://h/mcp", headers=(("Authorization", TOKEN), ("X-Short", "ab"))
    )
    connection = Connection(server, get_logger())
    said = connection.credentials.scrubbed(f"LocalProtocolError: Illegal header value b'{TOKEN}\\n' ({TOKEN})")
    assert "s3cr3t" not in said
    assert said == "LocalProtocolError: Illegal header value b'***\\n' (***)"
    assert connection.credentials.scrubbed("ab stays: too short to be one") == "ab stays: too short to be one"


def test_tools_whose_python_names_collide_or_are_the_servers_own_are_left_out() -> None:
    from mcp import types

    server = Downstream("every", "every", ("*",), None, command="x")
    connection = Connection(server, get_logger())
    connection.tools = {
        name: types.Tool(name=name, input_schema={}) for name in ("get-sum", "get_sum", "__class__", "_mcp_x", "echo")
    }
    assert connection.python_names() == {"echo": "echo", "get-sum": "get_sum"}


def test_the_head_of_a_longer_text_is_said_without_its_end_which_could_be_a_credentials_start() -> None:
    server = Downstream("remote", "remote", ("*",), None, url="http://h/mcp", headers=(("Authorization", TOKEN),))
    connection = Connection(server, get_logger())
    head = f"{TOKEN} and then {TOKEN[:12]}"  # the dump was cut in the middle of the second
    said = connection.credentials.scrubbed(head, whole=False)
    assert said == "*** and then"[: len(said)]
    assert "s3cr" not in said
    assert connection.credentials.scrubbed(head) == f"*** and then {TOKEN[:12]}"


def test_a_credential_is_masked_however_json_or_repr_escapes_it() -> None:
    # Found by a review: an error that is no text is dumped to JSON before it is masked, and a
    # credential JSON escapes ("pa\"ss\\word", "p\u00e4ssw\u00f6rd") reached the run, which decoded it back.
    import json

    secrets = ('pa"ss\\word-9', "pässwörd-1234", "plainSecret123")
    server = Downstream("s", "s", ("*",), None, command="x", env=tuple((f"K{n}", v) for n, v in enumerate(secrets)))
    connection = Connection(server, get_logger())
    for secret in secrets:
        for said in (json.dumps({"error": secret}), json.dumps({"error": secret}, ensure_ascii=False), repr(secret)):
            masked = connection.credentials.scrubbed(said)
            assert "***" in masked, masked
            assert secret not in masked
            if masked.startswith("{"):
                assert secret not in json.loads(masked)["error"], "nor once the run decodes it"


@pytest.mark.anyio
async def test_a_credential_split_across_a_gone_servers_last_stderr_writes_is_masked_in_why_it_went_down() -> None:
    # Found by a review: the start of a line the stderr reader held was dropped when it was stopped, and
    # what was read after it masked alone: "0123456789abcdef was refused", 16 of the key's 24 characters,
    # went to the log and to every run's ToolError.
    key = "sk-live-0123456789abcdef"
    connection = Connection(Downstream("s", "s", ("*",), None, command="x", env=(("API_KEY", key),)), get_logger())
    last: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        errlog = await stderr_to_log(stack, get_logger(), "s", connection.credentials.secrets, last)
        errlog.write("fatal: the key " + key[:8])
        errlog.flush()
        # Until the reader has taken the line's start (and holds it, the line not ended): the pipe empty.
        pipe = os.readlink(f"/proc/self/fd/{errlog.fileno()}")
        read_end = next(
            int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) != errlog.fileno() and _link(fd) == pipe
        )
        with anyio.fail_after(5):
            while _unread(read_end):
                await anyio.sleep(0.005)
        os.write(errlog.fileno(), (key[8:] + " was refused\n").encode())  # its last write: then it is gone
    connection._last_said = last
    said = connection._reason(MCPError(CONNECTION_CLOSED, "Connection closed"), gone=True)
    assert said == "MCPError: Connection closed; its stderr's last line: fatal: the key *** was refused"


def _link(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe `fd` reads."""
    import array
    import fcntl
    import termios

    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


@pytest.mark.anyio
async def test_a_servers_blank_stderr_lines_are_charged_to_its_log_rate_as_any_other() -> None:
    # Found by a review: skipped before the rate was charged, a flood of blank lines was looked at one by
    # one in Python without end, 3.6 times the event loop's CPU of a flood of text lines.
    last: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        errlog = await stderr_to_log(stack, get_logger(), "s", [], last)
        pipe = os.readlink(f"/proc/self/fd/{errlog.fileno()}")
        read_end = next(
            int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) != errlog.fileno() and _link(fd) == pipe
        )
        os.write(errlog.fileno(), b"first\n" + b"\n" * 5000 + b"past the rate\n")
        with anyio.fail_after(5):
            while _unread(read_end):
                await anyio.sleep(0.005)
        await anyio.sleep(0.05)
        assert last == ["first"]


def test_an_http_status_s_reason_echoing_a_credential_is_masked_before_it_is_cut() -> None:
    # Found by a review: the reason phrase was cut to 60 characters, then masked: the key no longer
    # whole, its first 15 characters reached runs and the log.
    key = "sk-live-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    server = Downstream("remote", "remote", ("*",), None, url="http://h/mcp", headers=(("X-Api-Key", key),))
    connection = Connection(server, get_logger())
    connection._answered(f"it answered HTTP 401 Unauthorized: the key {'x' * 30} {key} was refused")
    [said] = connection._last_said
    assert "sk-live" not in said, said
    assert said.startswith("it answered HTTP 401 Unauthorized: the key "), said
