"""A downstream server over stdio: the official SDK's transport (`mcp.client.stdio.stdio_client`), with
the reading of the server's stdout and the writing of its stdin ours.

The SDK's reader keeps a line until its newline by joining each chunk it reads to all it has, which is
quadratic and has no bound: one server's line that never ended took the whole server's memory and,
ever slower, its event loop. Ours keeps a line's start in one buffer (`Lines`: linear, bounded). A
line past the bound is a fault of the connection, said to the session as the SDK says a line that does
not parse (the client's message handler hears it, and the server is started again), and the rest of
that stdout is left unread until the server is stopped. It reads at a rate (`BYTES_PER_SECOND`: each
byte costs the event loop a parse; a read that ends no line counts as a full one, `READ_BYTES`), and
parses a long line faster than the SDK does (`parse`). The stdout is a pipe of ours (`AskedReads`), read
only when the reader asks: asyncio's pipe transport read whatever came, a byte at a time if so, paced
or not.

The SDK's transport hands each message between the session and a reader or a writer task of its own
through memory streams; ours reads in the task that receives (`Received`) and writes in the task that
sends (`Sent`): a brokered call's round trip took some eleven turns of the event loop, each 10-15 us
of the server's CPU, and five of them were those hand-overs.

The rest is the SDK's own code: the process started in a session of its own, and stopped (stdin
closed, then the process tree killed, each wait bounded; `_stop`, the SDK's but for the pipe); its
private helpers are the SDK's pinned version's (requirements.lock), and the tests of downstream
servers go through them.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import functools
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TextIO

import anyio
import anyio.abc
import anyio.lowlevel
from mcp import types
from mcp.client._transport import TransportStreams
from mcp.client.stdio import (
    _KILL_REAP_TIMEOUT,
    StdioServerParameters,
    _close_pipe,
    _close_subprocess_transport,
    _get_executable_command,
    _wait_for_process_exit,
    get_default_environment,
)
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from runner.fdio import AskedReads
from runner.rates import Pace
from runner.tools.messages import ID_BYTES, answer_id, error_answer, message_of, said_of

logger = logging.getLogger(__name__)
# A stdio server's line at most, or what a result as large as a run's budget of bytes through tools may
# take on the wire, if more: from an SDK-made server, its structured content and the same as indented
# JSON text (3.2x the run's value for flat records, 5x for nested), and the message around them. A
# listing is one line, and one larger than a run may take is cut (`MAX_LISTING_BYTES`), not refused:
# 20 MB of tools have been seen. A result within the line that is larger than the run may take is
# read, then refused to that run alone; past it, the connection fails.
MAX_LINE_BYTES = 64 << 20
# What a server's stdout is read at, after as much as its longest line at once: each byte is parsed on
# the event loop (4 MiB notifications, each in its turn, kept it busy without end). One bucket for all
# the runs that call it: 12 MiB results in a row came at 0.1 s each, and at 1.5 s under 8 MiB a second.
BYTES_PER_SECOND = 32 << 20
# A read of the server's stdout that ends no line is paced as if it were this long: a server that wrote
# a byte at a time had each byte read on its own, a whole core of the event loop for as long as it
# went on (a read that ends a line is a message, paced by the session's rations).
READ_BYTES = 64 << 10
# A line past the bound is skipped, not held, and the call whose answer it is (its id, read from the
# line's head or tail) fails alone, as long as the line ends within this many times the bound: a run may
# make a server's answer outgrow its own budget (found by a review: an SDK-made server wrote 12 MiB of
# nested lists back as 68 MiB of indented text, and the whole connection ended, every caller's call with
# it). Past it the line is a fault of the connection, as before: one that never ends.
SKIPPED_LINES = 4
CANCEL_WAIT = 0.05  # seconds a cancel waits for the server's stdin
STRAY_BYTES = 8 << 10  # what a skipped line is paced as, at least
# At a stop, a server's stdin closed: it has STOP_GRACE s to end, then SIGTERM (its group), then
# KILL_AFTER s before SIGKILL; the SDK's 2 and 2 (found by a review: a server that ended at neither made
# our stop 4.4 s, past the 2 s the official client gives us before its own SIGTERM).
STOP_GRACE = 1.0
KILL_AFTER = 0.5

# Execs a tool server's command with a parent-death signal set (`dying_with_us`): argv is the server's
# pid, the command's path, then its argv. Another pid than the server's as its parent: the server died
# before the signal was set.
DYING_WITH_US = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"  # PR_SET_PDEATHSIG, SIGKILL
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "try:\n"
    "    os.execv(sys.argv[2], sys.argv[3:])\n"
    "except OSError as exc:\n"  # what Python would say leaves the path out
    "    sys.stderr.write(f'cannot start {sys.argv[2]}: {exc.strerror}\\n')\n"
    "    sys.stderr.flush()\n"
    "    os._exit(127)\n"
)


class LineTooLong(ValueError):
    """A server's line passed the bound its connection sets; `before`: the lines its chunk ended first."""

    def __init__(self, message: str, before: list[bytes | Skipped]) -> None:
        super().__init__(message)
        self.before = before


@dataclass(frozen=True)
class Skipped:
    """A line past the bound, skipped: its size, and its head and tail (`ID_BYTES` each) to find its id."""

    size: int
    head: bytes
    tail: bytes


class Lines:
    """Sans-IO: newline-ended lines out of a stream's chunks, each at most `most` bytes. Each byte is
    looked at once, and a line's start is kept in one buffer (a list of its chunks held 16 MiB of 2-byte
    chunks in 450 MiB). A line past `most` is `LineTooLong`; or, given `skip`, it is read on without
    being kept, and comes out as `Skipped` once it ends, if it ends within `skip` bytes (past that,
    `LineTooLong`)."""

    def __init__(self, most: int, skip: int = 0) -> None:
        self.most, self._skip = most, skip
        self._held = bytearray()
        self._skipping = 0  # bytes of the line being skipped so far (0: none is)
        self._head, self._tail = b"", b""

    def _too_long(self, before: list[bytes | Skipped]) -> LineTooLong:
        return LineTooLong(f"a line of more than {self.most:,} bytes", before)

    def feed(self, chunk: bytes) -> list[bytes | Skipped]:
        """The lines that `chunk` ends, without their newlines."""
        lines: list[bytes | Skipped] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if self._skipping:
                piece = chunk[start:] if end < 0 else chunk[start:end]
                self._skipping += len(piece)
                self._tail = (self._tail + piece[-ID_BYTES:])[-ID_BYTES:]
                if self._skipping > self._skip:
                    raise self._too_long(lines)
                if end < 0:
                    return lines
                lines.append(Skipped(self._skipping, self._head, self._tail))
                self._skipping, self._head, self._tail = 0, b"", b""
                start = end + 1
                continue
            if end < 0:
                break
            if self._held:
                self._held += chunk[start:end]
                line = bytes(self._held)
                self._held.clear()
            else:
                line = chunk[start:end]
            if len(line) > self.most:
                if not self._skip:
                    raise self._too_long(lines)
                lines.append(Skipped(len(line), line[:ID_BYTES], line[-ID_BYTES:]))
            else:
                lines.append(line)
            start = end + 1
        if start < len(chunk):
            if len(self._held) + len(chunk) - start > self.most:
                if not self._skip:
                    raise self._too_long(lines)
                rest = chunk[start:]
                self._head = bytes(self._held[:ID_BYTES]) + rest[: max(0, ID_BYTES - len(self._held))]
                self._tail = (bytes(self._held[-ID_BYTES:]) + rest[-ID_BYTES:])[-ID_BYTES:]
                self._skipping = len(self._held) + len(rest)
                self._held = bytearray()  # its memory given back, not kept for the next line
                if self._skipping > self._skip:
                    raise self._too_long(lines)
            else:
                self._held += chunk[start:]
        return lines


def skipped_answer(skipped: Skipped, most: int) -> SessionMessage | None:
    """The error that answers the request a skipped line answered, as the session would have it from
    the server; None where its id cannot be read (a notification, say: it is dropped)."""
    request_id = answer_id(skipped.head, skipped.tail)
    if request_id is None:
        return None
    said = f"its answer was a line of {skipped.size:,} bytes, more than {most:,}: dropped"
    return SessionMessage(error_answer(request_id, said))


def parse(line: bytes, server: StdioServerParameters) -> SessionMessage | Exception | None:
    """One line as the SDK's reader takes it (its `_parse_line`): a message, or the error that says why
    not, for the session to hear; None for a line that is dropped (`_STRAY`, `_THEIRS`). Lines end at a
    newline byte, so they are decoded whole in UTF-8; a long one is parsed in two (`message_of`)."""
    if _STRAY.match(line):
        found = _PREFIXED.search(line, 0, ID_BYTES)
        if found is None:
            return None
        line = line[found.start() :]  # text in front of a message (a progress bar without its newline)
    try:
        return SessionMessage(message_of(line.decode(server.encoding, server.encoding_error_handler)))
    except (ValueError, RecursionError) as exc:
        logger.debug("a line from a tool server did not parse", exc_info=True)
        # An answer whose id can be read is an error for its call alone (found by a review: one nested
        # past pydantic's depth, a run's own arguments echoed back, ended the connection and every
        # other run's calls on it). The line ended where it should: the next is whole.
        request_id = answer_id(line[:ID_BYTES], line[-ID_BYTES:])
        if request_id is not None:
            return SessionMessage(error_answer(request_id, f"its answer is no MCP message ({said_of(exc)})"))
        # The server's own notification or request, no call waits for it: dropped (found by a second
        # look: a log notification of a run's deep arguments ended the connection as the answer had).
        return None if _THEIRS.match(line) else exc


# A line that is no JSON object nor array at all, or blank: a banner or a log line written to stdout by
# mistake, skipped as the SDK's client skips it (found by a review: a server that said "MCP server
# running on stdio" first was started again without end), unless a message follows text on it. A line
# that begins as JSON and does not parse may be an answer whose call would wait for ever: it ends the
# connection, unless its id is read (an error for that call) or it is the server's own message.
_STRAY = re.compile(rb"\A\s*(?:[^\s{\[]|\Z)")
_PREFIXED = re.compile(rb'\{\s*"(?:jsonrpc|result|error)"\s*:')
_THEIRS = re.compile(rb'\A\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"method"\s*:')


@contextlib.asynccontextmanager
async def stdio_transport(
    server: StdioServerParameters, errlog: TextIO, most_bytes: int
) -> AsyncIterator[TransportStreams]:
    """The SDK's `stdio_client(server, errlog)`, each line the server writes bounded: `MAX_LINE_BYTES`,
    or four times `most_bytes` (a run's budget) and 1 MiB, whichever is larger."""
    command = await _get_executable_command(server.command)
    env = get_default_environment() | (server.env or {})
    read_end, write_end = os.pipe()
    try:
        # As the SDK's `_create_platform_compatible_process`, its stdout the pipe's write end.
        process = await anyio.open_process(
            dying_with_us([command, *server.args], env),
            env=env,
            stdin=subprocess.PIPE,
            stdout=write_end,
            stderr=errlog,
            cwd=server.cwd,
            start_new_session=True,
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    stdout = AskedReads(read_end, functools.partial(os.read, read_end), functools.partial(os.close, read_end))
    # The spawn succeeded; no awaits until the task group is entered (a cancellation in the gap would
    # leak the live process).
    longest = max(4 * most_bytes + (1 << 20), MAX_LINE_BYTES)
    rate = Pace(longest, BYTES_PER_SECOND, anyio.current_time())
    assert process.stdin, "the process is started with a pipe for its stdin"
    received = Received(stdout, Lines(longest, SKIPPED_LINES * longest), rate, server)
    sent = Sent(process.stdin, server, received.end)

    async def shutdown(tg: anyio.abc.TaskGroup) -> None:
        received.close()
        await sent.aclose()
        if not received.overflowed:
            # What the server still writes is read and dropped while it is stopped (one blocked on a
            # full pipe would miss its chance to exit); `_stop` closes the pipe, which ends the drain.
            tg.start_soon(_drain, stdout, rate)
        await _stop(process, stdout)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        try:
            yield received, sent
        finally:
            # The server is stopped whatever cancels us, every wait in it bounded.
            with anyio.CancelScope(shield=True):
                await shutdown(tg)
            tg.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()


class Received(anyio.abc.ObjectReceiveStream[SessionMessage | Exception]):
    """What the server writes, read and parsed by the task that receives it (the session's dispatcher):
    the SDK's transport has a reader task hand each message over, which cost a brokered call a task
    switch and two more turns of the event loop (of some ten). Lines come out in order (`Lines`); one past
    the bound is the `LineTooLong` said once, then the end, the rest of the stdout left unread (draining
    a stream that never ends would spin until the server is stopped, which the session's end does). Reads
    are paced (`_turn`), and a line read with others waits its turn of the loop, as a read would."""

    def __init__(self, stdout: AskedReads, lines: Lines, rate: Pace, server: StdioServerParameters) -> None:
        self._stdout, self._lines, self._rate, self._server = stdout, lines, rate, server
        self._ready: collections.deque[bytes | Skipped] = collections.deque()  # lines read, not received yet
        self._owed = 0  # bytes of the last read, not paced yet
        self._end: type[Exception] | None = None  # what `receive` raises once no line is ready
        self._too_long: LineTooLong | None = None  # said once the lines before it are received
        self.overflowed = False
        self._strays = 0  # lines that were no message, skipped

    async def receive(self) -> SessionMessage | Exception:
        if self._ready:
            await anyio.lowlevel.checkpoint()
        while True:
            line = await self._line()
            if isinstance(line, LineTooLong):
                return line
            command = os.path.basename(self._server.command)
            if not isinstance(line, Skipped):
                message = parse(line, self._server)
                if message is not None:
                    return message
                self._strays += 1
                if self._strays <= 3 or self._strays & (self._strays - 1) == 0:  # a flood's lines said sparsely
                    fields = {"command": command, "bytes": len(line), "count": self._strays}
                    logger.warning("a tool server's line that is no message was skipped", extra={"fields": fields})
                # Paced as a read of STRAY_BYTES at least (found by a second look: a flood of them, never
                # a message for the notifications' rate, kept a whole core busy).
                await _turn(self._rate, max(len(line), STRAY_BYTES))
                continue
            answer = skipped_answer(line, self._lines.most)
            fields = {"command": command, "bytes": line.size, "answered": answer is not None}
            logger.warning("a tool server's line too long was dropped", extra={"fields": fields})
            if answer is not None:
                return answer
            # A notification, or no message: dropped, and the next line read.

    async def _line(self) -> bytes | Skipped | LineTooLong:
        while not self._ready:
            if self._too_long is not None:
                said, self._too_long = self._too_long, None
                return said
            if self._end is not None:
                raise self._end
            if self._owed:
                owed, self._owed = self._owed, 0
                await _turn(self._rate, owed)
            try:
                chunk = await self._stdout.read(READ_BYTES)
            except anyio.ClosedResourceError:
                self._end = self._end or anyio.ClosedResourceError
                continue
            except anyio.EndOfStream:
                continue  # `end`: a write failed
            except OSError:
                logger.exception("reading a tool server's stdout failed mid-session")
                self._end = anyio.EndOfStream
                continue
            if not chunk:
                self._end = anyio.EndOfStream
                continue
            try:
                got = self._lines.feed(chunk)
            except LineTooLong as exc:
                # The lines its chunk ended before it are received first: one may be a call's answer.
                self.overflowed, self._end, self._too_long = True, anyio.EndOfStream, exc
                self._ready.extend(exc.before)
                continue
            self._ready.extend(got)
            self._owed = len(chunk) if got else max(len(chunk), READ_BYTES)
        return self._ready.popleft()

    def end(self) -> None:
        """No more is read: what is ready is received, then the end (a read waiting now ends at once).
        Once the stream has ended or is closed, nothing: the read waiting then may be the drain's."""
        if self._end is None:
            self._end = anyio.EndOfStream
            self._stdout.interrupt(anyio.EndOfStream())

    def close(self) -> None:
        self._ready.clear()
        self._end = anyio.ClosedResourceError
        self._stdout.interrupt(anyio.ClosedResourceError())

    async def aclose(self) -> None:
        self.close()
        await anyio.lowlevel.checkpoint()


class Sent(anyio.abc.ObjectSendStream[SessionMessage]):
    """The session's messages written to the server's stdin by the task that sends them: the SDK's
    transport has a writer task take each over, which cost a brokered call a task switch and two more
    turns of the loop. Each is whole in the pipe's buffer before the send waits (`ByteSendStream.send`
    writes it into asyncio's, then waits while that is full), so sends at once never split each other. A
    write that fails ends what is received (`ended`): the server may still be alive, and the session
    must see its connection end, not wait for answers that cannot come. A server that reads no stdin has
    each waiting send's bytes held in that buffer (the writer task held one, its senders their messages):
    bounded by what runs may send at once (`RUNNER_TOOLS_MAX_CONCURRENT`, `RUNNER_TOOLS_MAX_MB`) until
    its ping goes unanswered and the connection is made again."""

    def __init__(self, stdin: anyio.abc.ByteSendStream, server: StdioServerParameters, ended: Callable[[], None]):
        self._stdin, self._server, self._ended = stdin, server, ended
        self._closed = self._broken = False

    async def send(self, item: SessionMessage) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if self._broken:
            raise anyio.BrokenResourceError
        message = item.message
        text = message.model_dump_json(by_alias=True, exclude_unset=True)
        data = (text + "\n").encode(self._server.encoding, self._server.encoding_error_handler)
        try:
            # A cancel waits CANCEL_WAIT at most for the pipe, written whole into its buffer all the
            # same (found by a review: the SDK's, sent as a run's time ran out, waited up to 5 s for a
            # stdin the server no longer read, and the run's answer with it).
            if _cancel(message):
                with anyio.move_on_after(CANCEL_WAIT):
                    await self._stdin.send(data)
            else:  # no scope on a call's way (a few us)
                await self._stdin.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            self._broken = True
            self._ended()
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        self._closed = True  # the stdin itself is closed by `_stop`, after what was written is flushed
        await anyio.lowlevel.checkpoint()


def _cancel(message: types.JSONRPCMessage) -> bool:
    return isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled"


def dying_with_us(argv: list[str], env: dict[str, str]) -> list[str]:
    """`argv` started so that its first process is SIGKILLed when this server dies (Linux: a
    parent-death signal survives exec): a server killed with SIGKILL closed its stdin, but one that
    does not end at its EOF, a wrapper waiting on it, lived on (what they started, the next start kills:
    `runner.execution.leftovers`). Costs a start of `python -I -S` (10 to 70 ms here), once per connection.
    A command without a path is looked up here, on the PATH the server is given, as `subprocess`
    would have: one that cannot be found fails to start (FileNotFoundError) as it did."""
    if not sys.platform.startswith("linux"):
        return argv
    # Said as what to do (found by a first hour: "No such file or directory" of `~/.local/bin/x`, whose
    # `~` no shell expands, and of a name on no directory of the PATH it was given, which was not said).
    if argv[0].startswith("~"):
        said = f"{argv[0]!r}: ~ is not expanded (no shell starts it): give the absolute path"
        raise FileNotFoundError(errno.ENOENT, said)
    # A path is taken from the server's working directory (`cwd`), by the exec.
    path = env.get("PATH", os.defpath)
    found = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=path)
    if found is None:
        said = f"{argv[0]!r} is on no directory of its PATH ({path[:300]}): give its absolute path, or a PATH in env"
        raise FileNotFoundError(errno.ENOENT, said)
    return [sys.executable, "-I", "-S", "-c", DYING_WITH_US, str(os.getpid()), found, *argv]


async def _turn(rate: Pace, size: int) -> None:
    """Wait until a read of `size` may be followed by another (`BYTES_PER_SECOND`); unread meanwhile:
    the server waits."""
    wait = rate.spend(size, anyio.current_time())
    if wait:
        await anyio.sleep(wait)


async def _drain(stdout: AskedReads, rate: Pace) -> None:
    """The SDK's `_drain_stdout` on our pipe, at the same pace: what the server still writes is read and
    dropped until its end, or until `_stop` closes it (a server blocked writing a full pipe would miss
    its chance to exit)."""
    with anyio.CancelScope(shield=True), contextlib.suppress(anyio.ClosedResourceError, anyio.EndOfStream, OSError):
        while chunk := await stdout.read(READ_BYTES):
            await _turn(rate, max(len(chunk), READ_BYTES))


async def _stop(process: anyio.abc.Process, stdout: AskedReads) -> None:
    """The SDK's `_stop_server_process`, the stdout ours: stdin closed, a grace period, then the whole
    tree killed; the pipe closed whatever holds its other end (a process that outlived the kill)."""
    assert process.stdin, "the process is started with a pipe for its stdin"
    try:
        await _close_pipe(process.stdin)
        if not await _wait_for_process_exit(process, STOP_GRACE):
            await terminate_posix_process_tree(process, KILL_AFTER)
            if not await _wait_for_process_exit(process, _KILL_REAP_TIMEOUT):
                logger.warning("a tool server (pid %d) is still alive after it was killed; left behind", process.pid)
    finally:
        # Whatever failed: the drain, shielded, would read the pipe until the server's end.
        stdout.close()
        _close_subprocess_transport(process)
