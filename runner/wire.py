"""Reading the MCP wire (newline-delimited JSON-RPC on stdin) without a thread and with a size bound.

The SDK's default stdin reader blocks a worker thread in readline(), which has two consequences
for a server that must stop on SIGTERM and never exhaust memory: a blocked read cannot be
cancelled, so shutdown would wait for the client's next byte; and a line without a newline grows
without limit. This reader waits on the fd in the event loop and drops oversized lines.
"""

from __future__ import annotations

import logging
import os
from types import TracebackType

import anyio

from runner.logs import log_event

READ_SIZE = 64 * 1024


class LineReader:
    """Async iterator of text lines from a file descriptor, each at most `max_line_bytes` long."""

    def __init__(self, fd: int, max_line_bytes: int, logger: logging.Logger) -> None:
        self._fd = fd
        self._max = max_line_bytes
        self._log = logger
        self._buffer = bytearray()
        self._discarding = 0  # bytes dropped so far of an oversized line
        self._eof = False
        self._was_blocking = os.get_blocking(fd)

    async def __aenter__(self) -> LineReader:
        os.set_blocking(self._fd, False)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # A terminal's file description is shared with the shell: give it back as it was.
        os.set_blocking(self._fd, self._was_blocking)

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[: newline + 1])
                del self._buffer[: newline + 1]
                if self._discarding:
                    self._report_dropped(self._discarding + len(line))
                    continue
                return line.decode("utf-8", "replace")
            if len(self._buffer) > self._max:
                self._discarding += len(self._buffer)
                self._buffer.clear()
            if self._eof:
                if self._buffer and not self._discarding:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line.decode("utf-8", "replace")
                raise StopAsyncIteration
            await anyio.wait_readable(self._fd)
            try:
                data = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                continue
            if data:
                self._buffer += data
            else:
                self._eof = True

    def _report_dropped(self, size: int) -> None:
        self._discarding = 0
        log_event(
            self._log,
            logging.WARNING,
            "message dropped: too large",
            size_bytes=size,
            limit_bytes=self._max,
        )
