"""A run's tool call frames taken and answered (`runner.execution.toolcalls`), on a real socket pair and
the real broker's own answers (the module, refusals), without a run or a downstream server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator

import anyio
import pytest

from runner.config import ToolsConfig, ToolServers
from runner.config.tools import Downstream
from runner.eventloop import FORWARD_SPINS, PollingLoop
from runner.execution.toolcalls import MOST_PENDING_PER_PROCESS, ToolCalls
from runner.inrun.wire import ANSWER_HEAD, frame_line
from runner.outcome import ToolCall
from runner.processes.child import Child
from runner.tools.broker import Broker, RunCalls

pytestmark = pytest.mark.anyio


def broker() -> Broker:
    """The real broker, its one server never started: what it answers itself (the module, refusals)."""
    server = Downstream(name="s", python_name="s", tools=("*",), callers=None, command="true")
    config = ToolsConfig(
        "tools.json", tools_max_calls=100_000, tools_max_mb=16, tools_max_concurrent=4, tools_spin_us=0
    )
    return Broker(ToolServers("tools.json", (server,)), config, logging.getLogger())


def channel(send_buffer: int) -> tuple[Child, socket.socket]:
    """A child whose job socket's server end takes at most about `send_buffer` bytes unread."""
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, send_buffer)
    ours.setblocking(False)
    code = ours.detach()
    child = Child(pid=-1, workdir=None, stdin=-1, stdout=-1, stderr=-1, code=code)
    child._open.add(code)
    return child, theirs


def answers(data: bytes | bytearray) -> tuple[list[tuple[bytes, bytes]], int]:
    """(call id, body) of each whole answer frame at the head of `data`, in order, and the bytes left."""
    found, view = [], bytes(data)
    while view:
        line = frame_line(view, ANSWER_HEAD)
        if line is None or len(view) < line[0] + line[1]:
            break
        found.append((line[2], view[line[0] : line[0] + line[1]]))
        view = view[line[0] + line[1] :]
    return found, len(view)


class Taken:
    """The real broker's calls of a run, each frame's body it was handed written down."""

    def __init__(self, tools: RunCalls) -> None:
        self.tools = tools
        self.bodies: list[bytes] = []
        self.most_frames, self.limit_bytes, self.tell = tools.most_frames, tools.limit_bytes, tools.tell
        self.forward, self.end, self.most_in_flight = tools.forward, tools.end, tools.most_in_flight

    @property
    def calling(self) -> str:
        return self.tools.calling

    def take(self, body: bytes) -> bytes | ToolCall:
        self.bodies.append(body)
        return self.tools.take(body)


@contextlib.asynccontextmanager
async def taking(
    taken: list[Taken] | None = None, kind: type[Taken] = Taken
) -> AsyncIterator[tuple[ToolCalls, socket.socket]]:
    """The call frames of a run whose job socket takes some 4 kB unread, and the run's end of it; what
    the broker was handed added to `taken` (a `kind` of it)."""
    child, theirs = channel(4096)
    try:
        async with anyio.create_task_group() as tg:
            tools = broker().for_run("r", None, anyio.current_time() + 60)
            assert tools is not None
            seen = kind(tools)
            if taken is not None:
                taken.append(seen)
            yield ToolCalls(tg, child, seen, logging.getLogger(), "r"), theirs
            tg.cancel_scope.cancel()
    finally:
        theirs.close()
        child.close_all()


class Forwarded(Taken):
    """Every call handed on downstream, where it waits until `answer` is set."""

    def __init__(self, tools: RunCalls) -> None:
        super().__init__(tools)
        self.answer = anyio.Event()
        self.forward = self._forward  # type: ignore[method-assign]

    def take(self, body: bytes) -> bytes | ToolCall:
        self.bodies.append(body)
        return ToolCall("s", "t", {}, len(body), anyio.current_time())

    async def _forward(self, call: ToolCall) -> bytes:
        await self.answer.wait()
        return b'{"ok": true, "value": 1}'


async def received(end: socket.socket) -> bytes:
    await anyio.wait_readable(end)
    return end.recv(1 << 16)


async def test_a_process_that_reads_none_of_its_answers_has_the_channel_shut_once_eight_more_than_its_calls_wait() -> (
    None
):
    # Found by a review: an answer the socket would not take was queued and no longer counted as
    # unanswered, so a run that wrote empty frames and read nothing had the server queue every answer
    # (409 MiB for one run at RUNNER_TOOLS_MAX_CALLS=100000) until its frames ran out.
    async with taking() as (calls, theirs):
        for taken in range(10_000):
            calls.take(b"1.%d" % taken, b"")  # not JSON: the broker answers at once
        data = bytearray()
        theirs.setblocking(False)
        with anyio.fail_after(5):  # the channel's end: shut by the server
            while chunk := await received(theirs):
                data += chunk
        written, left = answers(data)
        assert MOST_PENDING_PER_PROCESS < len(written) < 1_000
        assert left == 0


async def test_once_the_channel_is_shut_no_frame_read_before_it_reaches_the_broker() -> None:
    # Found by a review: the frames of one read that came after the one that shut the channel were
    # still checked and forwarded, another process's calls among them: a run cut off for flooding
    # still had calls made downstream.
    taken: list[Taken] = []
    async with taking(taken) as (calls, _):
        for n in range(10_000):
            calls.take(b"1.%d" % n, b"")
        handed = len(taken[0].bodies)
        assert handed < 1_000, "shut once eight of its answers waited"
        calls.take(b"2.1", b'{"op": "call", "server": "s", "tool": "t", "arguments": {}}')
        assert len(taken[0].bodies) == handed


async def test_answers_too_large_for_the_socket_come_whole_and_in_their_order() -> None:
    async with taking() as (calls, theirs):
        for n in range(3):
            calls.take(b"%d.1" % (n + 1), b'{"op": "module"}')  # each some kB: the socket takes part
        calls.take(b"4.1", b"not json")
        data = bytearray()
        theirs.setblocking(False)
        with anyio.fail_after(10):
            while len(answers(data)[0]) < 4:
                data += await received(theirs)
        written, left = answers(data)
        assert ([call_id for call_id, _ in written], left) == ([b"1.1", b"2.1", b"3.1", b"4.1"], 0)
        assert all("catalog" in json.loads(body) for _, body in written[:3])
        assert json.loads(written[3][1]) == {
            "ok": False,
            "error": "the run sent a call that is not JSON: Expecting value: line 1 column 1 (char 0)",
        }


@pytest.mark.parametrize("anyio_backend", [pytest.param(("asyncio", {"loop_factory": lambda: PollingLoop(0.2)}))])
async def test_each_call_sent_downstream_grants_the_loop_its_polling_and_an_answer_one_spin_once_calls_come_in_a_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 49's latency: each wake of an idle CPU costs a brokered call some 40 us here.
    loop = asyncio.get_running_loop()
    assert isinstance(loop, PollingLoop)
    granted: list[float] = []
    grant = loop.grant
    monkeypatch.setattr(loop, "grant", lambda spins: (granted.append(spins), grant(spins)))
    taken: list[Taken] = []
    async with taking(taken, Forwarded) as (calls, theirs):
        theirs.setblocking(False)
        [forwarded] = taken
        assert isinstance(forwarded, Forwarded)
        for n in (1, 2):
            calls.take(b"1.%d" % n, b"{}")
            forwarded.answer.set()
            with anyio.fail_after(10):
                written = await received(theirs)
            assert answers(written)[0] == [(b"1.%d" % n, b'{"ok": true, "value": 1}')]
            forwarded.answer = anyio.Event()
        # The first answer came before any call in a chain; the second call came within a spin of it.
        assert granted == [FORWARD_SPINS, FORWARD_SPINS, 1]
