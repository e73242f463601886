"""MCP on stdio, the wire side; runner/serving/stdio.py is the serving side (the process around it).

Newline-delimited JSON-RPC read and written without threads, with bounds.

Why not the SDK's stdio transport: it reads stdin in a worker thread (a blocked readline cannot be
cancelled, so SIGTERM would wait for the client's next byte), buffers a line without limit, and
drops malformed messages without the error response JSON-RPC requires, so such a client waits
forever. Here every line is parsed once; what is not a JSON-RPC message is answered with a parse
error or an invalid-request error, and a line over the size bound is discarded unread and answered.

Each request carries a `WireRequest` as its request context: whoever answers it may ask to be told when
its answer has been written (`after_written`), as `resources/read` does to hold its answer's bytes in
its budget until then, not only until the answer is built (found by a review: a client that never read
could pile up built answers).

At most `MAX_UNANSWERED` of the client's requests are in flight: past that, its next request waits,
and nothing more is read, until one is answered on the wire. The SDK starts a task per request and
each holds its answer until the client reads it, so a client that writes and never reads would
otherwise make the server grow without bound; this way its own pipe fills and its writes block.

While serving, fd 0 reads /dev/null and fd 1 writes to stderr, so nothing else in the process can
read from or write to the wire by accident.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp.types import JSONRPCError, JSONRPCMessage, JSONRPCRequest, JSONRPCResponse, RequestId

from runner.fdio import write_all
from runner.logs import cut_error, log_event
from runner.transports.jsonrpc import ID_SEARCH_BYTES, InvalidMessage, parse_message, too_large_reply

READ_SIZE = 64 * 1024
# Said when stdin is /dev/null: the server reads it to its end and stops at once.
NO_CLIENT = (
    "stdin is /dev/null, so no client can reach this server and it stops: an MCP client starts it with a "
    "pipe on stdin and stdout (a container needs -i: podman run -i / docker run -i)"
)

# Requests of the client in flight at most (dispatched, not yet answered on the wire nor settled
# unanswered). Far above what a client waits on at once (runs are bounded by the pool and its queue,
# tasks answer at once), and few enough that their held answers stay small.
MAX_UNANSWERED = 256

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


class LineReader:
    """Async iterator of lines (newline included) from a non-blocking fd, each at most `max_line_bytes`.

    A longer line is discarded as it arrives, never held whole; in its place the iterator yields a
    `Dropped` with the line's head and size, so the caller can answer it.
    """

    def __init__(self, fd: int, max_line_bytes: int) -> None:
        self._fd = fd
        self._max = max_line_bytes
        self._buffer = bytearray()
        self._discarded = 0  # bytes of an oversized line discarded so far
        self._discarded_head = b""
        self._eof = False
        self.pollable = pollable(fd)  # else a file: read to its end, every request answered (`stdio_transport`)
        self.bytes_read = 0

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> bytes | Dropped:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[: newline + 1])
                del self._buffer[: newline + 1]
                if self._discarded or len(line) > self._max:
                    head = self._discarded_head if self._discarded else line[:ID_SEARCH_BYTES]
                    dropped = Dropped(head, self._discarded + len(line))
                    self._discarded, self._discarded_head = 0, b""
                    return dropped
                return line
            if len(self._buffer) > self._max:
                if not self._discarded:
                    self._discarded_head = bytes(self._buffer[:ID_SEARCH_BYTES])
                self._discarded += len(self._buffer)
                self._buffer.clear()
            if self._eof:
                if self._buffer and not self._discarded:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                raise StopAsyncIteration
            if self.pollable:
                await anyio.wait_readable(self._fd)
            else:  # a file is always readable: read it to its end, a checkpoint between reads
                await anyio.lowlevel.checkpoint()
            try:
                data = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                continue
            if data:
                self._buffer += data
                self.bytes_read += len(data)
            else:
                self._eof = True


def pollable(fd: int) -> bool:
    """Whether the event loop can wait for `fd` to be readable: not a regular file, a directory or a
    device that is not a terminal (/dev/null), which epoll refuses (EPERM) and which never block."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISBLK(mode):
        return False
    return not stat.S_ISCHR(mode) or os.isatty(fd)


def is_dev_null(fd: int) -> bool:
    try:
        here, null = os.fstat(fd), os.stat(os.devnull)
    except OSError:
        return False
    return stat.S_ISCHR(here.st_mode) and here.st_rdev == null.st_rdev


@dataclass(frozen=True, slots=True)
class Dropped:
    """An oversized line that was discarded: its first bytes and its whole size."""

    head: bytes
    size: int


class Unanswered:
    """How many of the client's requests are in flight, and a wait for that count to fall.

    Counted, not named by id: the answer to one request cannot be told from another's when the client
    reuses an id, and a count cannot be talked down by ids. A request leaves by its answer (any
    response or error the server writes) or by `settled` (it was cancelled, so it gets none).
    """

    __slots__ = ("_changed", "count")

    def __init__(self) -> None:
        self.count = 0
        self._changed = anyio.Event()

    def opened(self) -> None:
        self.count += 1

    def settled(self) -> None:
        if self.count:
            self.count -= 1
            self._changed.set()

    async def at_most(self, count: int) -> None:
        """Return once no more than `count` requests are in flight."""
        while self.count > count:
            self._changed = anyio.Event()
            await self._changed.wait()


Key = tuple[bool, RequestId]  # a request's id, "1" and 1 apart


class WireRequest:
    """A request read from the wire, as its handler sees it (`ctx.request`; `after_written`)."""

    __slots__ = ("callbacks", "done", "key", "written")

    def __init__(self, key: Key, written: Written) -> None:
        self.key = key
        self.written = written
        self.done = False
        self.callbacks: list[Callable[[], None]] = []

    def finish(self) -> None:
        self.done = True
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            callback()


def after_written(request: object, callback: Callable[[], None]) -> bool:
    """Call `callback` once the answer to `request` (a `WireRequest`) has been written to the wire; False
    if that cannot be told (the callback is then the caller's to call)."""
    return isinstance(request, WireRequest) and request.written.watch(request, callback)


class Written:
    """Which requests' answers have been written, told by their ids.

    An answer carries only its request's id, and a client may reuse one: so the requests of one id that
    asked to be told are told together once every request of that id in flight has been answered (never
    early, whichever was answered first); a request settled with no answer (cancelled) is told at once.
    Kept: a count per id of the requests in flight (at most MAX_UNANSWERED together), and those that asked."""

    def __init__(self) -> None:
        self._counts: dict[Key, int] = {}
        self._waiting: dict[Key, list[WireRequest]] = {}

    def opened(self, request_id: RequestId) -> WireRequest:
        key = (isinstance(request_id, str), request_id)
        self._counts[key] = self._counts.get(key, 0) + 1
        return WireRequest(key, self)

    def watch(self, request: WireRequest, callback: Callable[[], None]) -> bool:
        if request.done or request.key not in self._counts:
            return False  # settled, or its id's every answer written
        if not request.callbacks:
            self._waiting.setdefault(request.key, []).append(request)
        request.callbacks.append(callback)
        return True

    def answered(self, request_id: RequestId) -> None:
        self._close((isinstance(request_id, str), request_id))

    def settled(self, request: WireRequest) -> None:
        waiting = self._waiting.get(request.key, [])
        if request in waiting:
            waiting.remove(request)
        request.finish()
        self._close(request.key)

    def finish_all(self) -> None:
        """The wire is closed: no answer will be written."""
        for waiting in self._waiting.values():
            for request in waiting:
                request.finish()
        self._counts.clear()
        self._waiting.clear()

    def _close(self, key: Key) -> None:
        count = self._counts.get(key)
        if count is None:
            return
        if count > 1:
            self._counts[key] = count - 1
            return
        del self._counts[key]
        for request in self._waiting.pop(key, []):
            request.finish()


# Marks the answers `read_wire` writes itself (a line that is not a message): they answer no request
# the server took, so they must not count as one answered.
_OWN = ServerMessageMetadata()


@asynccontextmanager
async def stdio_transport(
    max_line_bytes: int, logger: logging.Logger, max_unanswered: int = MAX_UNANSWERED
) -> AsyncIterator[Streams]:
    """Serve this process's stdin and stdout as the (read, write) stream pair `Server.run` takes."""
    nothing_to_read = is_dev_null(0)
    with _claimed(0, os.O_RDONLY) as wire_in, _claimed(1, os.O_WRONLY) as wire_out:
        to_server, from_wire = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        to_wire, from_server = anyio.create_memory_object_stream[SessionMessage](16)
        replies = to_wire.clone()
        written_all = anyio.Event()

        # A file on stdin (`python -m runner < requests.jsonl`) is read to its end, and the server stops
        # once it has answered every request in it. A pipe's EOF is the client gone: the server stops
        # at once, its calls cancelled.
        unanswered = Unanswered()
        written = Written()

        def metadata(request: WireRequest) -> ServerMessageMetadata:
            async def settled_unanswered() -> None:  # the SDK's hook: it ended with no answer (cancelled)
                unanswered.settled()
                written.settled(request)

            # Nothing else in this metadata differs from none (it can carry the server's requests).
            return ServerMessageMetadata(request_context=request, on_request_unanswered=settled_unanswered)

        async def read_wire() -> None:
            reader = LineReader(wire_in, max_line_bytes)
            said_full = False
            async with to_server, replies:
                async for line in reader:
                    if isinstance(line, bytes) and not line.strip():
                        continue  # a blank line (or "\r\n") between messages: skipped, as other servers do
                    try:
                        if isinstance(line, Dropped):
                            raise InvalidMessage(too_large_reply(line.head, line.size, max_line_bytes))
                        message = parse_message(line)
                    except InvalidMessage as invalid:
                        log_event(logger, logging.WARNING, "invalid message answered", error=str(invalid))
                        await replies.send(SessionMessage(invalid.reply, metadata=_OWN))
                        continue
                    if not isinstance(message, JSONRPCRequest):
                        await to_server.send(SessionMessage(message))
                        continue
                    if unanswered.count >= max_unanswered:
                        # Back-pressure: this request waits, unread past, until one is answered; its
                        # writes then block on its own full pipe. Notifications and answers it sent
                        # before this request have gone through.
                        if not said_full:
                            said_full = True
                            log_event(
                                logger,
                                logging.WARNING,
                                "client has too many requests unanswered; reading paused until it reads answers",
                                unanswered=unanswered.count,
                            )
                        await unanswered.at_most(max_unanswered - 1)
                    unanswered.opened()
                    await to_server.send(SessionMessage(message, metadata=metadata(written.opened(message.id))))
                if not reader.pollable:
                    await unanswered.at_most(0)
            if not reader.bytes_read and nothing_to_read:
                log_event(logger, logging.WARNING, NO_CLIENT)

        def answered(message: SessionMessage) -> None:
            if message.metadata is not _OWN and isinstance(message.message, JSONRPCResponse | JSONRPCError):
                unanswered.settled()
                if message.message.id is not None:
                    written.answered(message.message.id)

        async def write_wire() -> None:
            try:
                async with from_server:
                    async for message in from_server:
                        try:
                            data = (
                                _said_back(message.message).model_dump_json(by_alias=True, exclude_unset=True).encode()
                            )
                        except Exception:  # one message that cannot be written must not end the session
                            logger.error(
                                "message could not be serialized; dropped",
                                exc_info=True,
                                extra={"request_id": "-", "fields": {}},
                            )
                            answered(message)  # its request is over all the same
                            continue
                        await write_all(wire_out, data + b"\n")
                        answered(message)
            except (BrokenPipeError, ConnectionResetError):
                # The client stopped reading: the session is over, as on stdin EOF.
                log_event(logger, logging.INFO, "client closed its end of stdout; shutting down")
                tg.cancel_scope.cancel()
            finally:
                written.finish_all()  # nothing more will be written
                written_all.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read_wire)
            tg.start_soon(write_wire)
            try:
                yield from_wire, to_wire
            finally:
                # Let responses already queued reach the client, but never wait on a stuck client.
                to_wire.close()
                with anyio.move_on_after(1.0, shield=True):
                    await written_all.wait()
                tg.cancel_scope.cancel()


def _said_back(message: JSONRPCMessage) -> JSONRPCMessage:
    """`message`, an error's message and data cut as `cut_error` cuts them: the SDK answers some requests
    before the server's middleware (`cut_errors`) runs, saying back what the client sent (found by a
    review: a 4 MiB protocolVersion on a 2026-07-28 request was said back whole, 4,194,457 bytes)."""
    if not isinstance(message, JSONRPCError):
        return message
    error = message.error
    text, data = cut_error(error.message, error.data)
    changed: dict[str, object] = {"message": text} if text != error.message else {}
    if data != error.data:
        changed["data"] = data  # only then: an unset data would be said as null (`exclude_unset`)
    return message.model_copy(update={"error": error.model_copy(update=changed)}) if changed else message


@contextlib.contextmanager
def _claimed(fd: int, flags: int) -> Iterator[int]:
    """A private non-blocking descriptor for what `fd` (0 or 1) points at, with `fd` diverted meanwhile.

    Reopening /proc/self/fd/N gives a new open file description, so O_NONBLOCK stays ours and does
    not leak to a terminal or to stderr sharing the same description; where that is impossible
    (a socket, no procfs) a duplicate is used and its blocking mode restored afterwards.
    """
    saved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    try:
        # Keep O_APPEND: a log file opened with >> must not be overwritten from its start.
        append = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND
        private = os.open(f"/proc/self/fd/{fd}", flags | append | os.O_CLOEXEC)
        restore_blocking = None
    except OSError:
        private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
        restore_blocking = os.get_blocking(private)
    os.set_blocking(private, False)
    # Stray reads get EOF and stray writes land on stderr, never on the wire.
    diversion = os.open(os.devnull, os.O_RDONLY) if fd == 0 else os.dup(2)
    os.dup2(diversion, fd)
    os.close(diversion)
    try:
        yield private
    finally:
        if restore_blocking is not None:
            os.set_blocking(private, restore_blocking)
        os.close(private)
        os.dup2(saved, fd)
        os.close(saved)
