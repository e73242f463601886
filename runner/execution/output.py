"""Reading what a run sends back while it is driven: stdout, stderr and the report on the job
socket, each read in the event loop's callback while one task waits for them all.

The three fds are the event loop's readers for the run's life (epoll on Linux, kqueue on the BSDs and
macOS): one wakeup reads whatever is ready, often a stream's last bytes, its end and the report
together, each in the loop's callback. A task per fd cost two more task starts and about three more
waits per run (12% of the pool's Python calls per trivial run, a few percent of its CPU).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from runner.execution.capture import OutputCap
from runner.execution.channel import RunChannel
from runner.execution.kept import Spool
from runner.processes.child import Child

CHUNK = 64 * 1024


@dataclass
class RunOutput:
    """The output side of one run: the two capped streams, the output budget, and the report.

    `done` is set once both streams are closed (or the budget is blown, when they are no longer
    read) and the report is whole or its socket closed. Whole is what the report's first line says,
    so a process the run left holding the socket cannot keep the call waiting.
    """

    child: Child
    stdout: OutputCap
    stderr: OutputCap
    budget: int
    channel: RunChannel
    # Where the run's tool calls go, each frame's call id and body as it comes (None: the run may make none).
    on_tool: Callable[[bytes, bytes], None] | None = None
    written: int = 0
    output_exceeded: bool = False
    done: anyio.Event = field(default_factory=anyio.Event)
    # Each stream whole (up to its cap), where the pool keeps output that the answer cuts.
    spools: tuple[Spool | None, Spool | None] = (None, None)
    _reading: set[int] = field(default_factory=set)  # the fds still read

    @property
    def report(self) -> bytearray:
        """The run's report as it came (whole once `report_whole`)."""
        return self.channel.report

    @property
    def report_whole(self) -> bool:
        return self.channel.report_whole

    async def read_all(self) -> None:
        """Read until `done`; cancelled, it leaves what it read so far.

        Each fd stays registered with the event loop for the run's life, and what is ready is read in
        the loop's own callback: a tool call's frame then reaches `on_tool`, and a refusal its answer,
        without a task's turn, and a wakeup costs no re-registration (anyio's `wait_readable` adds and
        removes its reader each time: two epoll_ctl calls, a future and a task's turn). Each fd is in
        the loop's own epoll, not in a selector of ours nested there, whose wakeup reached the loop
        second-hand (a run's call frame -> the server's reader running: 43 -> 34 us here, stamped;
        the frame read and taken apart: 17-21 -> 13-14 us).
        """
        child = self.child
        # The server runs on asyncio (`anyio.run`'s default backend), whose loop takes readers.
        loop = asyncio.get_running_loop()
        drained = anyio.Event()
        failed: list[BaseException] = []

        def ready(read: Callable[[], None]) -> None:
            try:
                read()
            except Exception as exc:  # raised in read_all, as a wait there would have
                failed.append(exc)
            if failed or not self._reading:
                drained.set()

        try:
            for fd, read in (
                (child.stdout, lambda: self._read_stream(child.stdout, self.stdout, self.spools[0])),
                (child.stderr, lambda: self._read_stream(child.stderr, self.stderr, self.spools[1])),
                (child.code, self._read_report),
            ):
                self._reading.add(fd)
                loop.add_reader(fd, ready, read)
            await drained.wait()
            if failed:
                raise failed[0]
        finally:
            for fd in list(self._reading):
                self._stop(fd)
            self.done.set()

    def _stop(self, fd: int) -> None:
        """No more is read from `fd`."""
        if fd in self._reading:
            self._reading.discard(fd)
            asyncio.get_running_loop().remove_reader(fd)

    def _read_stream(self, fd: int, cap: OutputCap, spool: Spool | None) -> None:
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        if not chunk:
            self._stop(fd)
            return
        cap.feed(chunk)
        if spool is not None:
            spool.feed(chunk)
        self.written += len(chunk)
        if self.written > self.budget and not self.output_exceeded:
            # Nothing more is read from either stream: what was kept is what the answer shows.
            self.output_exceeded = True
            self.child.kill_group()
            self._stop(self.child.stdout)
            self._stop(self.child.stderr)

    def _read_report(self) -> None:
        """Tool calls go to `on_tool` as they come; the report is kept once whole. What no frame is
        (`RunChannel`) is dropped and the socket closed: a run still writing gets EPIPE rather than
        blocking until its timeout."""
        fd = self.child.code
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""  # reset by the run's end
        if not chunk:
            self._stop(fd)
            return
        channel = self.channel
        for call_id, body in channel.feed(chunk):
            if self.on_tool is not None:
                self.on_tool(call_id, body)
        if channel.broken:
            self._stop(fd)
            # Shut, not closed: an answer's task may still wait to write on it, and a closed number
            # would soon be another file's.
            self.child.shut(fd)
        elif channel.report_whole:
            self._stop(fd)
