"""Reading what a run sends back while it is driven: stdout, stderr and the report on the job
socket, all three from one task.

The three fds sit in one selector (epoll on Linux, kqueue on the BSDs and macOS), and the event loop
waits on the selector's own fd: one wakeup reads whatever is ready, often a stream's last bytes, its
end and the report together. A task per fd cost two more task starts and about three more waits per
run (12% of the pool's Python calls per trivial run, a few percent of its CPU).
"""

from __future__ import annotations

import os
import selectors
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

    @property
    def report(self) -> bytearray:
        """The run's report as it came (whole once `report_whole`)."""
        return self.channel.report

    @property
    def report_whole(self) -> bool:
        return self.channel.report_whole

    async def read_all(self) -> None:
        """Read until `done`; cancelled, it leaves what it read so far."""
        child = self.child
        selector = selectors.DefaultSelector()
        try:
            selector.register(child.stdout, selectors.EVENT_READ, (self.stdout, self.spools[0]))
            selector.register(child.stderr, selectors.EVENT_READ, (self.stderr, self.spools[1]))
            selector.register(child.code, selectors.EVENT_READ, None)
            while selector.get_map():
                await anyio.wait_readable(selector.fileno())
                for key, _ in selector.select(0):
                    if key.fd not in selector.get_map():
                        continue  # let go earlier in this batch: the other stream, once the budget is blown
                    if key.data is None:
                        self._read_report(selector)
                    else:
                        self._read_stream(selector, key.fd, key.data)
        finally:
            selector.close()
            self.done.set()

    def _read_stream(self, selector: selectors.BaseSelector, fd: int, stream: tuple[OutputCap, Spool | None]) -> None:
        cap, spool = stream
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        if not chunk:
            selector.unregister(fd)
            return
        cap.feed(chunk)
        if spool is not None:
            spool.feed(chunk)
        self.written += len(chunk)
        if self.written > self.budget and not self.output_exceeded:
            # Nothing more is read from either stream: what was kept is what the answer shows.
            self.output_exceeded = True
            self.child.kill_group()
            for other in (self.child.stdout, self.child.stderr):
                if other in selector.get_map():
                    selector.unregister(other)

    def _read_report(self, selector: selectors.BaseSelector) -> None:
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
            selector.unregister(fd)
            return
        channel = self.channel
        for call_id, body in channel.feed(chunk):
            if self.on_tool is not None:
                self.on_tool(call_id, body)
        if channel.broken:
            selector.unregister(fd)
            # Shut, not closed: an answer's task may still wait to write on it, and a closed number
            # would soon be another file's.
            self.child.shut(fd)
        elif channel.report_whole:
            selector.unregister(fd)
