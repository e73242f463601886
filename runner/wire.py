"""Reading the MCP wire (newline-delimited JSON-RPC on stdin) without a thread and with a size bound.

The SDK's default stdin reader blocks a worker thread in readline(), which has two consequences
for a server that must stop on SIGTERM and never exhaust memory: a blocked read cannot be
cancelled, so shutdown would wait for the client's next byte; and a line without a newline grows
without limit. This reader waits on the fd in the event loop and drops oversized lines.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Awaitable, Callable
from types import TracebackType

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

from runner.logs import log_event

READ_SIZE = 64 * 1024
# Where to look for the id of a request too large to parse: clients put it near the start.
ID_SEARCH_BYTES = 4096
_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)')

OversizeHandler = Callable[[str | int | None, int], Awaitable[None]]


def request_id_in(head: bytes) -> str | int | None:
    """The JSON-RPC id at the start of a message, if it can be seen without parsing the whole."""
    match = _ID.search(head[:ID_SEARCH_BYTES])
    if match is None:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, str | int) else None


class LineReader:
    """Async iterator of text lines from a file descriptor, each at most `max_line_bytes` long."""

    def __init__(self, fd: int, max_line_bytes: int, logger: logging.Logger) -> None:
        self._fd = fd
        self._max = max_line_bytes
        self._log = logger
        self._buffer = bytearray()
        self._discarding = 0  # bytes dropped so far of an oversized line
        self._dropped_head = b""
        self._eof = False
        self._was_blocking = os.get_blocking(fd)
        self.on_oversize: OversizeHandler | None = None
        """Called with the request id (if visible) and size of each dropped line, to answer it."""

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
                if self._discarding or len(line) > self._max:
                    await self._drop(line)
                    continue
                return line.decode("utf-8", "replace")
            if len(self._buffer) > self._max:
                self._discard_buffer()
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

    def _discard_buffer(self) -> None:
        if not self._discarding:
            self._dropped_head = bytes(self._buffer[:ID_SEARCH_BYTES])
        self._discarding += len(self._buffer)
        self._buffer.clear()

    async def _drop(self, last_part: bytes) -> None:
        head = self._dropped_head if self._discarding else last_part
        size = self._discarding + len(last_part)
        self._discarding = 0
        self._dropped_head = b""
        request_id = request_id_in(head)
        log_event(
            self._log,
            logging.WARNING,
            "message dropped: too large",
            jsonrpc_id=request_id,
            size_bytes=size,
            limit_bytes=self._max,
        )
        if self.on_oversize is not None:
            await self.on_oversize(request_id, size)


def too_large_reply(request_id: str | int | None, size: int, limit: int) -> SessionMessage:
    """The JSON-RPC error answering a dropped oversized request, so the client does not wait forever."""
    error = types.ErrorData(
        code=types.INVALID_REQUEST,
        message=f"request too large: {size:,} bytes, the limit is {limit:,} (see RUNNER_MAX_CODE_BYTES)",
    )
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
