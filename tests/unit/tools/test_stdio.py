"""A stdio server's lines out of its stdout's chunks (`Lines`), and how a line is parsed, without a
process; the transport's two streams over real pipes (`Received`, `Sent`); the transport itself is
tested with real servers (tests/e2e/tools/test_hostile_servers.py)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import types
from mcp.client.stdio import StdioServerParameters
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCNotification

from runner.fdio import AskedReads
from runner.rates import Pace
from runner.tools import stdio
from runner.tools.messages import PARSED_IN_TWO
from runner.tools.stdio import BYTES_PER_SECOND, Lines, LineTooLong, Received, Sent, dying_with_us, parse


@given(
    st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=8),
    st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=10),
)
def test_lines_come_out_whole_and_in_order_however_the_stream_is_cut(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines) + b"the start of a line not ended"
    got: list[bytes] = []
    splitter = Lines(most=1000)
    at, n = 0, 0
    while at < len(stream):
        size = cuts[n % len(cuts)]
        got += splitter.feed(stream[at : at + size])
        at, n = at + size, n + 1
    assert got == lines


def test_a_line_of_exactly_the_bound_passes_and_one_byte_more_does_not_whether_ended_or_held() -> None:
    assert Lines(most=5).feed(b"12345\n") == [b"12345"]
    assert Lines(most=5).feed(b"123") == []
    with pytest.raises(LineTooLong, match="more than 5 bytes"):
        Lines(most=5).feed(b"123456\n")
    held = Lines(most=5)
    assert held.feed(b"1234") == []
    assert held.feed(b"5") == []
    with pytest.raises(LineTooLong):
        held.feed(b"6")  # not ended yet: the bound holds before its newline comes


def test_a_line_past_the_bound_carries_the_lines_its_chunk_ended_before_it() -> None:
    with pytest.raises(LineTooLong) as ended:
        Lines(most=5).feed(b"123\n45\n123456\n7\n")
    assert ended.value.before == [b"123", b"45"]
    with pytest.raises(LineTooLong) as held:
        Lines(most=5).feed(b"123\n123456")
    assert held.value.before == [b"123"]


def test_a_line_held_across_chunks_counts_from_its_own_start_not_from_the_lines_before_it() -> None:
    splitter = Lines(most=5)
    assert splitter.feed(b"12345\n123") == [b"12345"]
    assert splitter.feed(b"45\n12") == [b"12345"]
    with pytest.raises(LineTooLong):
        splitter.feed(b"3456\n")


def test_a_line_that_comes_in_tiny_chunks_is_held_in_about_its_own_size() -> None:
    # Found by a review: a list of its chunks held 16 MiB of 2-byte chunks in 450 MiB (28x).
    splitter = Lines(most=1 << 30)
    tracemalloc.start()
    try:
        for _ in range(1 << 19):
            splitter.feed(bytes(bytearray(b"xy")))  # each chunk its own object, as each read's is
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 2 << 20, f"{held:,} bytes for a line of 1 MiB"
    assert splitter.feed(b"\n") == [b"xy" * (1 << 19)]


def failed_call(parsed: SessionMessage | Exception | None) -> object:
    """The id of the call `parsed` fails, as an answer that did not parse does."""
    assert isinstance(parsed, SessionMessage), parsed
    assert isinstance(parsed.message, types.JSONRPCError), parsed.message
    assert parsed.message.error.message.startswith("its answer is no MCP message ("), parsed.message
    return parsed.message.id


def test_a_line_is_a_message_an_error_for_the_call_it_answers_or_the_error_that_says_why_not() -> None:
    server = StdioServerParameters(command="x", encoding_error_handler="replace")
    message = parse(b'{"jsonrpc": "2.0", "id": 1, "result": {}}', server)
    assert isinstance(message, SessionMessage)
    assert message.message.model_dump(exclude_unset=True) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    # Replaced, so it parses, and the result that is not an object fails its call.
    assert failed_call(parse(b'{"jsonrpc": "2.0", "id": 1, "result": "\xff"}', server)) == 1
    said = parse(
        b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "\xff"}}', server
    )
    assert isinstance(said, SessionMessage)
    assert "\ufffd" in said.message.model_dump_json()
    # No answer's id to be read, and not the server's own message: the error, which ends the connection.
    assert isinstance(parse(b'{"jsonrpc": "2.0", "x": 5}', server), ValueError)
    # The server's own message that does not parse: no call waits for it (found by a second look: a log
    # notification of a run's deep arguments ended the connection).
    deep_note = b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": %s1%s}}'
    assert parse(deep_note % (b"[" * 300, b"]" * 300), server) is None
    assert parse(b'{"method": "notifications/message", "jsonrpc": 5}', server) is None
    # Text in front of a message (a progress bar without its newline): the message is read (found by a
    # second look: skipped as a stray, its call waited out the run).
    said = parse(b'progress: 100%{"jsonrpc": "2.0", "id": 4, "result": {}}', server)
    assert isinstance(said, SessionMessage)
    assert said.message.model_dump(exclude_unset=True) == {"jsonrpc": "2.0", "id": 4, "result": {}}
    assert failed_call(parse(b'{"jsonrpc": "2.0", "id": 1, "result": {', server)) == 1  # cut short


@pytest.mark.parametrize("line", [b"not json", b"MCP server running on stdio", b"", b"  \t", b"\xff\xfe"])
def test_a_line_that_is_no_json_object_at_all_is_skipped_as_the_sdks_client_skips_it(line: bytes) -> None:
    # Found by a review: a server that printed a banner first was started again without end.
    assert parse(line, StdioServerParameters(command="x")) is None


def test_a_long_line_is_parsed_as_a_short_one_is_and_one_nested_too_deep_fails_its_call() -> None:
    server = StdioServerParameters(command="x")
    long = b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "%s"}}' % (
        b"x" * (1 << 17)
    )
    message = parse(long, server)
    assert isinstance(message, SessionMessage)
    assert message.message.model_dump()["params"]["data"] == "x" * (1 << 17)
    deep = b'{"jsonrpc": "2.0", "id": 1, "result": {"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}}"
    assert failed_call(parse(deep, server)) == 1
    # Found by a review: `json` took a lone surrogate (and nesting 990 deep) where the short path refuses
    # it; a listing with one then broke our own tools/list for every client.
    lone = b'{"jsonrpc": "2.0", "id": 1, "result": {"a": "\\ud800", "pad": "%s"}}' % (b"x" * (1 << 17))
    assert failed_call(parse(lone, server)) == 1
    nested = b'{"jsonrpc": "2.0", "id": 1, "result": {"pad": "%s", "a": %s1%s}}' % (
        b"x" * (1 << 17),
        b"[" * 500,
        b"]" * 500,
    )
    assert failed_call(parse(nested, server)) == 1
    assert isinstance(parse(b"[" * 100_000, server), RecursionError | ValueError)


@pytest.mark.parametrize("fields_last", [False, True], ids=["python-sdk", "typescript-sdk"])
@pytest.mark.parametrize("padding", [0, PARSED_IN_TWO], ids=["short", "long"])
def test_an_answer_too_deep_for_pydantic_is_an_error_for_its_call_alone(fields_last: bool, padding: int) -> None:
    # Found by a review: a run's arguments nested 210 deep, echoed back by a tool, ended the connection.
    result = {"content": [{"type": "text", "text": "x" * padding}], "structuredContent": nested(300)}
    answer = (
        {"result": result, "jsonrpc": "2.0", "id": 7} if fields_last else {"jsonrpc": "2.0", "id": 7, "result": result}
    )
    parsed = parse(json.dumps(answer).encode(), StdioServerParameters(command="x"))
    assert isinstance(parsed, SessionMessage)
    message = parsed.message
    assert isinstance(message, types.JSONRPCError)
    assert message.id == 7


def test_an_answer_that_is_no_result_says_pydantics_first_error_and_where() -> None:
    parsed = parse(b'{"jsonrpc": "2.0", "id": "x1", "result": "not a listing"}', StdioServerParameters(command="x"))
    assert isinstance(parsed, SessionMessage)
    message = parsed.message
    assert isinstance(message, types.JSONRPCError)
    assert message.id == "x1"
    assert "ValidationError" in message.error.message
    assert message.error.message.endswith("(ValidationError: Input should be an object at JSONRPCResponse.result)")


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def test_a_request_of_the_servers_own_that_does_not_parse_is_no_answer_to_ours() -> None:
    # Its id comes from the same counter as ours: taken for an answer, it would fail another's call.
    request = {"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage", "params": nested(300)}
    assert isinstance(parse(json.dumps(request).encode(), StdioServerParameters(command="x")), ValueError)


def _note(n: int) -> bytes:
    return b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": %d}}\n' % n


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    """A pipe's read and write ends; whichever the test has not closed is closed after it."""
    read_end, write_end = os.pipe()
    yield read_end, write_end
    for fd in (read_end, write_end):
        with contextlib.suppress(OSError):
            os.close(fd)


def _stdout(read_end: int) -> AskedReads:
    # The fd is the test's to close (the fixture's), not the stream's.
    return AskedReads(read_end, functools.partial(os.read, read_end), lambda: None)


def _received(read_end: int, most: int = 1 << 20, stdout: AskedReads | None = None) -> Received:
    """`Received` over `read_end` (through `stdout`, where the test reads it too)."""
    return Received(
        stdout or _stdout(read_end),
        Lines(most),
        Pace(most, BYTES_PER_SECOND, anyio.current_time()),
        StdioServerParameters(command="x"),
    )


@pytest.mark.anyio
async def test_what_a_server_writes_is_received_a_message_a_line_in_order_however_it_is_cut_then_its_end(
    pipe: tuple[int, int],
) -> None:
    read_end, write_end = pipe
    received = _received(read_end)
    wire = b"".join(_note(n) for n in range(50)) + b"a banner, skipped\n" + b'{"not": "a message"}\n'
    for at in range(0, len(wire), 97):  # cut mid-line, and several lines in one read
        os.write(write_end, wire[at : at + 97])
    os.close(write_end)
    got = [await received.receive() for _ in range(51)]
    assert [m.message.model_dump()["params"]["data"] for m in got[:50] if isinstance(m, SessionMessage)] == list(
        range(50)
    )
    assert isinstance(got[50], ValueError)  # said to the session, as the SDK says a message that does not parse
    with pytest.raises(anyio.EndOfStream):
        await received.receive()
    with pytest.raises(anyio.EndOfStream):
        await received.receive()


@pytest.mark.anyio
async def test_a_line_past_the_bound_is_said_once_then_the_end_and_nothing_after_it_is_read(
    pipe: tuple[int, int],
) -> None:
    read_end, write_end = pipe
    received = _received(read_end, most=1000)
    os.write(write_end, _note(1))
    assert isinstance(await received.receive(), SessionMessage)
    os.write(write_end, b"x" * 2000)
    assert isinstance(await received.receive(), LineTooLong)
    os.write(write_end, b"\n" + _note(2))
    with pytest.raises(anyio.EndOfStream):
        await received.receive()
    assert received.overflowed
    assert os.read(read_end, 4096) == b"\n" + _note(2)  # left unread, for the drain to leave alone too


@pytest.mark.anyio
async def test_the_messages_before_a_line_past_the_bound_in_the_same_read_are_received_first(
    pipe: tuple[int, int],
) -> None:
    """Found by looking: the lines a chunk ended before the over-long one were dropped with it, and one may
    be a call's answer (its call then failed as the connection ended, not answered)."""
    read_end, write_end = pipe
    received = _received(read_end, most=1000)
    os.write(write_end, _note(1) + _note(2) + b"x" * 2000)
    got = [await received.receive() for _ in range(3)]
    assert [m.message.model_dump()["params"]["data"] for m in got[:2] if isinstance(m, SessionMessage)] == [1, 2]
    assert isinstance(got[2], LineTooLong)
    with pytest.raises(anyio.EndOfStream):
        await received.receive()
    assert received.overflowed


@pytest.mark.anyio
async def test_a_receive_that_waits_ends_at_once_when_the_stream_is_ended_or_closed(pipe: tuple[int, int]) -> None:
    read_end, _ = pipe
    for how, raised in (("end", anyio.EndOfStream), ("close", anyio.ClosedResourceError)):
        received = _received(read_end)
        outcome: list[BaseException] = []

        async def receive(received: Received = received, outcome: list[BaseException] = outcome) -> None:
            try:
                await received.receive()
            except Exception as exc:
                outcome.append(exc)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(receive)
                await anyio.wait_all_tasks_blocked()
                getattr(received, how)()
        assert [type(e) for e in outcome] == [raised]


@pytest.mark.anyio
async def test_messages_sent_at_once_reach_the_server_whole_and_in_order() -> None:
    # The server is cat: what it reads on its stdin comes back on its stdout, a message a line.
    read_end, write_end = os.pipe()
    try:
        process = await anyio.open_process(["cat"], stdin=subprocess.PIPE, stdout=write_end)
    finally:
        os.close(write_end)
    received = _received(read_end, most=1 << 22)
    assert process.stdin
    sent = Sent(process.stdin, StdioServerParameters(command="cat"), received.end)
    big = "y" * 300_000  # past the pipe's buffer: a send that waits while another one writes

    async def send(n: int) -> None:
        data = big if n % 10 == 0 else n
        await sent.send(SessionMessage(JSONRPCNotification(jsonrpc="2.0", method="m", params={"n": n, "data": data})))

    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for n in range(40):
                    tg.start_soon(send, n)
                got = [await received.receive() for _ in range(40)]
    finally:
        process.kill()
        await process.aclose()
        os.close(read_end)
    params = [m.message.model_dump()["params"] for m in got if isinstance(m, SessionMessage)]
    assert sorted(p["n"] for p in params) == list(range(40))
    assert all(p["data"] == (big if p["n"] % 10 == 0 else p["n"]) for p in params)


@pytest.mark.anyio
async def test_a_write_the_server_cannot_take_fails_the_send_and_ends_what_is_received(pipe: tuple[int, int]) -> None:
    read_end, _ = pipe
    # A server that closed its stdin and lives on: the session must hear the connection end.
    process = await anyio.open_process(
        [sys.executable, "-c", "import os, time; os.close(0); print('closed', flush=True); time.sleep(30)"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdin
        assert process.stdout
        with anyio.fail_after(20):
            await process.stdout.receive()
            received = _received(read_end)
            sent = Sent(process.stdin, StdioServerParameters(command="x"), received.end)
            message = SessionMessage(JSONRPCNotification(jsonrpc="2.0", method="m"))
            ended: list[BaseException] = []

            async def receive() -> None:
                try:
                    await received.receive()
                except anyio.EndOfStream as exc:
                    ended.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(receive)
                await anyio.wait_all_tasks_blocked()
                with pytest.raises(anyio.BrokenResourceError):
                    await sent.send(message)
            assert ended  # the receive that waited ended at once
            with pytest.raises(anyio.EndOfStream):
                await received.receive()
            with pytest.raises(anyio.BrokenResourceError):  # and every send after it, without a write
                await sent.send(message)
    finally:
        process.kill()
        await process.aclose()


@pytest.mark.anyio
async def test_a_send_that_fails_after_the_stream_is_closed_leaves_the_drains_read_alone(
    pipe: tuple[int, int],
) -> None:
    # Found by a review: a run's send that failed while the server was being stopped ended the drain's
    # read with EndOfStream, which escaped the transport's task group ("tool server down: EndOfStream").
    read_end, write_end = pipe
    stdout = _stdout(read_end)
    received = _received(read_end, stdout=stdout)
    received.close()
    drained: list[bytes] = []

    async def drain() -> None:
        drained.append(await stdout.read(4096))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            await anyio.wait_all_tasks_blocked()
            received.end()
            os.write(write_end, b"more")
    assert drained == [b"more"]
    with pytest.raises(anyio.ClosedResourceError):
        await received.receive()


@pytest.mark.anyio
async def test_a_read_that_fails_ends_the_stream_and_the_failure_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)  # a directory: its read fails (EISDIR)
    try:
        received = _received(fd)
        with pytest.raises(anyio.EndOfStream):
            await received.receive()
        with pytest.raises(anyio.EndOfStream):
            await received.receive()
    finally:
        os.close(fd)
    assert "reading a tool server's stdout failed mid-session" in caplog.text


@pytest.mark.anyio
async def test_a_stop_that_fails_still_closes_the_servers_stdout_so_that_nothing_waits_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stop's wait for the server failing (injected here): the server, alive, still holds its stdout,
    and the drain, shielded, read it until the server's end (30 s here) before the failure was said. Found
    by looking; the failure now comes at once."""
    started: list[anyio.abc.Process] = []

    async def failing(process: anyio.abc.Process, timeout: float) -> bool:
        started.append(process)
        raise PermissionError("the wait failed")

    monkeypatch.setattr(stdio, "_wait_for_process_exit", failing)
    holding = "import sys, time; sys.stdin.read(); time.sleep(30)"  # its stdout open, its stdin read to the end
    server = StdioServerParameters(command=sys.executable, args=["-c", holding])
    failed: BaseException | None = None
    began = anyio.current_time()
    try:
        with open(os.devnull, "w") as errlog:
            async with stdio.stdio_transport(server, errlog, 1 << 20):
                pass
    except BaseException as exc:  # the task group's, holding it
        failed = exc
    finally:
        for process in started:  # the test's to end, its stop having failed
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with anyio.fail_after(10):
                await process.wait()
    took = anyio.current_time() - began
    found = failed.exceptions if isinstance(failed, BaseExceptionGroup) else (failed,)
    assert [type(exc) for exc in found] == [PermissionError], repr(failed)
    assert took < 15, f"the failure waited {took:.1f} s for the server's end"


def test_a_line_past_the_bound_is_skipped_whole_however_it_is_cut_keeping_only_its_head_and_tail() -> None:
    # Found by a review: a run could make a server's answer outgrow the bound, and the whole connection
    # ended with it. Now the line is skipped, its ends kept to find its id, and the lines after it come.
    from runner.tools.stdio import ID_BYTES, Skipped

    line = b'{"jsonrpc": "2.0", "id": 7, "result": "' + b"x" * 5000 + b'"}'
    stream = b"a\n" + line + b"\nb\n"
    for size in (1, 7, 600, 4096, len(stream)):
        splitter = Lines(most=1000, skip=10_000)
        got: list[bytes | Skipped] = []
        for at in range(0, len(stream), size):
            got += splitter.feed(stream[at : at + size])
        assert got == [b"a", Skipped(len(line), line[:ID_BYTES], line[-ID_BYTES:]), b"b"], size
    with pytest.raises(LineTooLong, match="more than 1,000 bytes") as ended:
        Lines(most=1000, skip=3000).feed(b"a\n" + b"x" * 3001)
    assert ended.value.before == [b"a"], "a line that does not end within `skip` ends the connection"


@pytest.mark.parametrize(
    ("head", "tail", "request_id"),
    [
        (b'{"jsonrpc": "2.0", "id": 7, "result": {"x', b"xx}}", 7),
        (b'{"jsonrpc":"2.0","id":"a-1","result":{', b"}}", "a-1"),
        (b'{"result": {"content": [', b'xx"}]}, "jsonrpc": "2.0", "id": 12}', 12),
        (b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {', b"}}", None),
        (b'{"result": {"text": "{\\"jsonrpc\\": \\"2.0\\", \\"id\\": 3, ', b'"}}', None),
        (b"not json at all", b"nor here", None),
        # A request of the server's own: its id is from the same counter as ours (found by a second look).
        (b'{"jsonrpc": "2.0", "id": 3, "method": "elicitation/create", "params": {', b"}}", None),
        (b'{"method": "elicitation/create", "params": {"x', b'x"}, "jsonrpc": "2.0", "id": 3}', None),
        (b'{"jsonrpc":"2.0","id":4,"error":{"code":-32603,"message":"', b'"}}', 4),
    ],
)
def test_a_skipped_line_answers_its_call_with_an_error_when_its_id_is_at_either_end(
    head: bytes, tail: bytes, request_id: object
) -> None:
    from mcp import types

    from runner.tools.stdio import Skipped, skipped_answer

    answer = skipped_answer(Skipped(5000, head, tail), 1000)
    if request_id is None:
        assert answer is None
        return
    assert answer is not None
    assert isinstance(answer.message, types.JSONRPCError)
    assert answer.message.id == request_id
    assert answer.message.error.message == "its answer was a line of 5,000 bytes, more than 1,000: dropped"


@pytest.mark.anyio
async def test_lines_that_are_no_message_are_paced_as_reads_of_8_kib_each(pipe: tuple[int, int]) -> None:
    # Found by a second look: skipped lines came to no rate at all, and a flood of them kept a core busy.
    read_end, write_end = pipe
    rate = Pace(1, 1_000_000, anyio.current_time())  # a megabyte a second
    received = Received(_stdout(read_end), Lines(1 << 20), rate, StdioServerParameters(command="x"))
    os.write(write_end, b"stray\n" * 100 + _note(1))
    started = anyio.current_time()
    message = await received.receive()
    assert isinstance(message, SessionMessage)
    assert anyio.current_time() - started >= 0.5, "100 lines paced as 800 KiB at 1 MB/s"


def test_a_command_that_cannot_be_found_says_what_to_give_instead() -> None:
    # Found by a first hour: "No such file or directory" of `~/.local/bin/x`, whose ~ no shell expands, and
    # of a name on no directory of the PATH the server gave it, which was not said.
    with pytest.raises(FileNotFoundError, match=r"~ is not expanded .*: give the absolute path"):
        dying_with_us(["~/.local/bin/mcp-server-time"], {"PATH": "/usr/bin"})
    with pytest.raises(FileNotFoundError, match=r"on no directory of its PATH \(/nowhere:/neither\): give its"):
        dying_with_us(["mcp-server-nope"], {"PATH": "/nowhere:/neither"})
