"""A run's tool calls (code mode), taken from its job socket and answered there.

Each call frame reaches `ToolCalls.take` from the output reader's callback (`RunOutput`), in the event
loop's own turn. The broker's checks are synchronous (`RunTools.take`): a call it refuses, or the
module, is answered there and then, and written at once if the socket takes it; only a call that goes
downstream waits for a worker task. A brokered call's round trip is the run's time: this path costs it
no task's turn, no lock and no re-registration with the loop that it does not need (each some 5-30 us
of a round trip of a few hundred).

Answers are written whole, one after another: what the socket does not take at once waits in order
(`_Outbox`) and one task writes it as the socket drains, so that no answer's bytes are split by
another's.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
from collections.abc import Callable

import anyio
import anyio.abc

from runner.errors import is_exit
from runner.eventloop import RunPolling
from runner.inrun.wire import frame_answer
from runner.outcome import RunTools, ToolCall
from runner.processes.child import Child

# A well-behaved run has at most its limit of calls in flight (from its threads and processes), and those
# it gave up (a signal's exception while it waited) until they are answered: more unanswered frames than
# these and 8 from one process, or MOST_PENDING from all of them together, and the run is flooding its
# channel.
MOST_PENDING_PER_PROCESS = 8
MOST_PENDING = 1024


class ToolCalls:
    """One run's call frames: each checked and answered (`take`), or handed to a worker that has the
    broker forward it and answers it. A worker done with its call waits for the next, so that a run
    calling tool after tool does not pay for a task per call; a call that finds every worker busy
    starts one more. Workers are cancelled with the run's task group when the run ends (a call in
    flight downstream is then cancelled there too). Past MOST_PENDING_PER_PROCESS unanswered frames of
    one process (the pid its call ids name) besides the calls it may have in flight
    (`RunTools.most_in_flight`), or MOST_PENDING in all, or past the run's `RunTools.most_frames`, the
    channel is shut, and no frame is taken after (those read with it)."""

    def __init__(
        self, tg: anyio.abc.TaskGroup, child: Child, tools: RunTools, log: logging.Logger, request_id: str
    ) -> None:
        self._tg = tg
        self._child = child
        self._tools = tools
        self._log = log
        self._request_id = request_id
        self._outbox = _Outbox(tg, child, self._written)
        self._pending: dict[bytes, int] = {}  # unanswered frames, by process
        self._unanswered = 0  # of all processes
        self._frames = 0
        self._shut = False  # the channel is shut: frames read before it are dropped, not taken
        # Each worker waiting for a call, by the future it waits on: a call handed to one is its own, so no
        # call waits behind a busy worker. (A future, not a memory stream: a handing cost a call 12 us
        # through anyio's stream here, 7 through the loop's future.)
        self._idle: collections.deque[asyncio.Future[tuple[bytes, ToolCall, bytes]]] = collections.deque()
        self._loop = asyncio.get_running_loop()
        self._polling = RunPolling(self._loop)  # what the run's calls grant the loop (`eventloop`)

    def take(self, call_id: bytes, body: bytes) -> None:
        """One call frame of the run's, as it came (`RunOutput.on_tool`)."""
        if self._shut:
            return
        child, tools = self._child, self._tools
        process = call_id.partition(b".")[0]
        self._frames += 1
        pending = self._pending
        flooding = self._frames > tools.most_frames or self._unanswered >= MOST_PENDING
        if flooding or pending.get(process, 0) >= MOST_PENDING_PER_PROCESS + tools.most_in_flight:
            self._shut = True
            child.shut(child.code)
            return
        pending[process] = pending.get(process, 0) + 1
        self._unanswered += 1
        self._polling.taken()
        try:
            taken = tools.take(body)  # the frame's body is let go when the reader's callback returns
            if isinstance(taken, bytes):
                self._answer(call_id, taken, process)
                return
            self._polling.forwarding()
            while self._idle:
                waiting = self._idle.popleft()
                if not waiting.done():  # else its worker was cancelled: the run is ending
                    waiting.set_result((call_id, taken, process))
                    return
            self._tg.start_soon(self._worker, call_id, taken, process, name="tool call worker")
        except BaseException as exc:  # a fault of ours (`is_exit`): this run's channel ends, the server serves on
            if is_exit(exc):
                raise
            self._fault("a tool call could not be taken")
            self._shut = True
            child.shut(child.code)

    async def _worker(self, call_id: bytes, call: ToolCall, process: bytes) -> None:
        while True:
            try:
                answer = await self._tools.forward(call)
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException as exc:  # never the run's task group's end (`is_exit`), whatever it was
                if is_exit(exc):
                    raise
                self._fault("a tool call's answer failed")
                answer = b'{"ok": false, "error": "the server could not answer this call"}'
            del call  # the arguments are let go before the next call comes
            try:
                self._answer(call_id, answer, process)
            except Exception:  # a fault of ours: this call's answer is lost, the run's calls go on
                self._fault("a tool call's answer failed")
            del answer  # not held while the worker waits
            waiting = self._loop.create_future()
            self._idle.append(waiting)
            call_id, call, process = await waiting

    def _fault(self, what: str) -> None:
        """Log a fault of ours (the exception being handled) under the run's request_id."""
        self._log.warning(what, exc_info=True, extra={"request_id": self._request_id, "fields": {}})

    def _answer(self, call_id: bytes, answer: bytes, process: bytes) -> None:
        try:
            self._outbox.send(frame_answer(answer, call_id), process)
        finally:
            self._tools.tell()
            self._polling.answered()

    def _written(self, process: bytes) -> None:
        """`process`'s answer is written, or dropped: it no longer counts as unanswered. (One that
        waits in the outbox does: a run that reads no answer is flooding its channel all the same.)"""
        pending = self._pending
        pending[process] -= 1
        self._unanswered -= 1
        if not pending[process]:
            del pending[process]


class _Outbox:
    """Answers written whole and in turn on the run's job socket: at once where it takes them, else
    queued for one task that writes them as it drains. An answer to a run that has ended, or shut its
    socket, is dropped: no one waits for it. Each answer's process is told to `written` once its answer
    is written or dropped."""

    def __init__(self, tg: anyio.abc.TaskGroup, child: Child, written: Callable[[bytes], None]) -> None:
        self._tg = tg
        self._child = child
        self._written = written
        self._queued: collections.deque[tuple[memoryview, bytes]] = collections.deque()

    def send(self, data: bytes, process: bytes) -> None:
        fd = self._child.code
        if self._queued:
            self._queued.append((memoryview(data), process))
            return
        try:
            written = os.write(fd, data) if self._child.is_open(fd) else len(data)
        except BlockingIOError:
            written = 0
        except OSError:
            written = len(data)  # the run ended, or its socket was shut: dropped
        if written < len(data):
            self._queued.append((memoryview(data)[written:], process))
            self._tg.start_soon(self._drain, name="tool answers")
        else:
            self._written(process)

    async def _drain(self) -> None:
        fd, queued = self._child.code, self._queued
        try:
            while queued and self._child.is_open(fd):
                data, process = queued[0]
                try:
                    written = os.write(fd, data)
                except BlockingIOError:
                    await anyio.wait_writable(fd)
                    continue
                if written == len(data):
                    queued.popleft()
                    self._written(process)
                else:
                    queued[0] = (data[written:], process)
        except OSError:
            pass  # the run ended, or its socket was shut
        finally:
            while queued:  # written, or no one's: the run has ended, or its socket was shut
                self._written(queued.popleft()[1])
