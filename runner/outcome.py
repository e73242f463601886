"""Where the two sides meet: the request, progress and result of one run, as frozen data.

The protocol side builds a `RunRequest` and renders a `RunResult`; the execution side takes the
request and fills in the result. Neither side imports the other, only this module. The text block
of a result (the product description's format) lives here too, because it is the result's own
printed form: the Python API returns it (`RunResult.to_text()`) without any MCP in the way.
Pure data and formatting; no I/O.
"""

from __future__ import annotations

import signal
import socket
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol


class Status(StrEnum):
    """Why a call ended. Every status but OK makes the tool result an error.

    CANCELLED never reaches a client (a cancelled request gets no response); it names the end of
    the run in the log.
    """

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    CPU_LIMIT = "cpu_limit"
    MEMORY_LIMIT = "memory_limit"
    FILE_SIZE_LIMIT = "file_size_limit"
    OUTPUT_LIMIT = "output_limit"
    SIGNAL = "signal"
    CANCELLED = "cancelled"
    BUSY = "busy"
    INVALID_ARGUMENTS = "invalid_arguments"
    INTERNAL_ERROR = "internal_error"


@dataclass(frozen=True, slots=True)
class InputFile:
    """A file the call hands in: written into the run's directory before its code starts."""

    path: str  # relative, checked: no "..", no empty or "." part, no NUL
    data: bytes


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One run: the code, what to feed its stdin, its wall-clock timeout in seconds, its files, and
    who asked (a token's name, for the caller's share of the slots; None where no transport says)."""

    request_id: str
    code: str
    timeout: float
    stdin: str = ""
    files: tuple[InputFile, ...] = ()
    caller: str | None = None
    session: str | None = None  # "new", or the handle of a session this call runs in
    # Distributions of the wheelhouse the call names (normalized), beyond what its code imports.
    packages: tuple[str, ...] = ()
    # Rows of a last value that is a DataFrame or Series to return as a `Table`: the caller's client
    # shows an app view; 0: none (the result is then exactly as without the view).
    table_rows: int = 0


# What a session's call asks for to start a session.
NEW_SESSION = "new"


@dataclass(frozen=True, slots=True)
class KeptOutput:
    """A stream of a run kept whole (up to its cap) because the answer shows only its head and tail, or
    a file (a figure at full size) kept because it is over what the answer carries (`reason`): `uri`
    reads it back (`resources/read`) for `seconds` after the run, by the caller that ran it."""

    uri: str
    stream: str  # "stdout" or "stderr"; for a file, its path (a figure's name)
    size: int  # bytes kept
    total: int  # bytes the run wrote to the stream (more than `size` when the cap cut it)
    seconds: int
    mime_type: str = "text/plain"
    reason: str = ""  # a file's: the budget it is over
    file: bool = False  # a file (or a figure), not a stream

    @property
    def is_file(self) -> bool:
        return self.file

    @property
    def complete(self) -> bool:
        return self.size == self.total


@dataclass(frozen=True, slots=True)
class SessionOutcome:
    """What became of a session's call: the session's handle, and whether the state the call left is
    the session's now (`kept`), or the session is as it was before the call, or it `ended` as the call
    was rolled back; `note` says why not, or what the kept state does not carry (threads)."""

    handle: str
    kept: bool
    note: str = ""
    ended: bool = False

    def describe(self) -> str:
        """The line the text block gains, e.g. ``session: s-abc... | kept``."""
        if self.kept:
            return f"session: {self.handle} | kept" + (f"; {self.note}" if self.note else "")
        if self.ended:
            return f"session: {self.handle} | ended: {self.note}"
        why = self.note or "the call did not end ok"
        return f"session: {self.handle} | rolled back ({why}): the session is as it was before this call"


@dataclass(frozen=True, slots=True)
class Attachment:
    """Something a run returns besides its output: a figure or image file (`kind` "image"), or
    another file it made or changed, as text or as bytes ("text" or "blob")."""

    name: str  # figure-N.png, or the file's path in the run's directory
    data: bytes
    mime_type: str
    kind: str
    width: int = 0
    height: int = 0
    note: str = ""

    def describe(self) -> str:
        """e.g. ``plot.png (640x480, 23,053 bytes)`` or ``out.csv (text/csv, 1,204 bytes)``."""
        what = f"{self.width}x{self.height}" if self.kind == "image" and self.width else self.mime_type
        return f"{self.name} ({what}, {len(self.data):,} bytes{'; ' + self.note if self.note else ''})"


@dataclass(frozen=True, slots=True)
class Omitted:
    """Something the run made that does not come back, and why (a budget, a link, ...)."""

    name: str
    size: int
    reason: str


# A table's cell, as JSON carries it.
Cell = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class Table:
    """The first rows of a run's last value, a pandas DataFrame or Series, for an app view: its columns'
    names and dtypes, its whole shape, and up to the call's `table_rows` rows; where its index is not the
    default 0, 1, 2, ...: the index's level names and each row's key (`index_rows`)."""

    columns: tuple[str, ...]
    dtypes: tuple[str, ...]
    shape: tuple[int, ...]
    rows: tuple[tuple[Cell, ...], ...]
    index_names: tuple[str | None, ...] = ()
    index_rows: tuple[tuple[Cell, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class NetworkUse:
    """A host and port a run asked the egress proxy for: the bytes it received from there and sent
    there (0 when refused), and whether RUNNER_EGRESS_ALLOW let it through."""

    host: str
    port: int
    bytes_in: int
    bytes_out: int
    allowed: bool

    @property
    def host_port(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Progress:
    """A running run's state, reported to callers that asked for it: how long it has run, how much it
    wrote, and the latest lines of each stream (bounded)."""

    elapsed: float
    timeout: float
    stdout_bytes: int
    stderr_bytes: int
    stdout_tail: str = ""
    stderr_tail: str = ""
    # Before the run: what the server does for it first (packages it installs from the wheelhouse).
    preparing: str = ""
    calling: str = ""  # the tool (server.tool) a call of the run waits for now, if any

    def describe(self) -> str:
        """The message of a progress notification: a first line, then the latest lines of each stream
        that has any."""
        if self.preparing:
            return self.preparing
        output = self.stdout_bytes + self.stderr_bytes
        parts = [f"running for {self.elapsed:.0f}s of {self.timeout:g}s; output {output:,} bytes"]
        if self.calling:
            parts[0] += f"; calling the tool {self.calling}"
        for name, tail in (("stdout", self.stdout_tail), ("stderr", self.stderr_tail)):
            if tail:
                parts.append(f"latest {name}:\n{tail}")
        return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class SessionsState:
    """The sessions at one moment: how many are open and the memory of their processes (bytes of
    proportional set size), and counts since the server started."""

    open: int = 0
    memory_bytes: int = 0
    created: int = 0
    expired: int = 0
    closed: int = 0
    lost: int = 0
    rolled_back: int = 0  # calls of a session that were not kept


@dataclass(frozen=True, slots=True)
class PoolState:
    """The pool at one moment, for health checks and metrics."""

    running: int  # runs in progress (their interpreters taken), sessions' calls included
    waiting: int  # calls queued for a slot
    ready: int  # interpreters started and waiting for code
    queue_full: bool  # one more call would be turned away as busy
    source_restarts: int  # zygotes started again after one died or stopped answering
    sessions: SessionsState = SessionsState()


@dataclass(frozen=True, slots=True)
class StreamText:
    """What a stream shows: its text, how many bytes the run wrote, and how many were left out; and,
    where it was cut, at which of its characters the server's mark of the cut begins (the run may print
    a mark of its own: found by a review, the app view took the first it saw for the cut)."""

    text: str
    total_bytes: int
    dropped_bytes: int
    cut_at: int | None = None

    @property
    def truncated(self) -> bool:
        """True when some of what the run wrote is not in `text`."""
        return self.dropped_bytes > 0


_EMPTY = StreamText("", 0, 0)


@dataclass(frozen=True, slots=True)
class RunResult:
    """The outcome of one call: status, numbers and the (capped) output."""

    request_id: str
    status: Status
    message: str = ""
    exit_code: int | None = None
    stdout: StreamText = _EMPTY
    stderr: StreamText = _EMPTY
    duration: float = 0.0
    cpu_seconds: float | None = None
    peak_memory_bytes: int | None = None
    queue_wait: float = 0.0
    result: str | None = None  # repr() of the last expression's value, when not None
    result_chars: int = 0  # of the whole repr(): more than len(result) when it was cut
    attachments: tuple[Attachment, ...] = ()
    omitted: tuple[Omitted, ...] = ()
    session: SessionOutcome | None = None
    kept: tuple[KeptOutput, ...] = ()  # streams kept whole and files linked, to be read back as resources
    note: str = ""  # what the server adds for the caller (a module it cannot provide); empty mostly
    network: tuple[NetworkUse, ...] = ()  # what the run reached through the egress proxy, and was refused
    table: Table | None = None  # the last value's first rows, for a caller whose client shows them

    @property
    def images(self) -> tuple[Attachment, ...]:
        """The attachments that are images."""
        return tuple(a for a in self.attachments if a.kind == "image")

    @property
    def files(self) -> tuple[Attachment, ...]:
        """The attachments that are not images."""
        return tuple(a for a in self.attachments if a.kind != "image")

    @property
    def signal(self) -> str | None:
        """The name of the signal that ended the process, if one did."""
        return signal_name(-self.exit_code) if self.exit_code is not None and self.exit_code < 0 else None

    @property
    def is_error(self) -> bool:
        """Whether MCP clients should see this result as a failed tool call."""
        return self.status is not Status.OK

    def to_text(self) -> str:
        """The text block of the product description, e.g.::

            [request_id=a1b2c3d4]
            --- stdout ---
            45

            --- exit_code: 0 | duration: 0.041s ---

        A stderr section follows stdout when there is stderr, and a result section (the value of
        the last expression) when there is one; lines for truncation, for images and files that
        came back or did not, and for the reason a run did not end normally come before the
        closing line. A run with none of these renders exactly as the product description shows.
        """
        parts = [f"[request_id={self.request_id}]\n"]
        ran = self.exit_code is not None
        if ran or self.stdout.total_bytes:
            parts.append(_section("stdout", self.stdout))
        if self.stderr.total_bytes:
            parts.append(_section("stderr", self.stderr))
        if self.result is not None:
            cut = self.result_chars - len(self.result)
            body = self.result + (f"\n... [{cut:,} more characters]" if cut > 0 else "")
            parts.append(_section("result", StreamText(body, 0, 0)))
        for name, stream in (("stdout", self.stdout), ("stderr", self.stderr)):
            if stream.truncated:
                parts.append(
                    f"--- {name} truncated: {stream.dropped_bytes:,} of {stream.total_bytes:,} bytes dropped ---\n"
                )
        for label, attached in (("images", self.images), ("files", self.files)):
            if attached:
                parts.append(f"--- {label}: {', '.join(a.describe() for a in attached)} ---\n")
        for kept in self.kept:
            if kept.is_file:
                parts.append(f"--- linked, not inline: {kept.stream} ({kept.size:,} bytes): {kept.reason} ---\n")
        for omitted in self.omitted:
            size = f" ({omitted.size:,} bytes)" if omitted.size else ""
            parts.append(f"--- not returned: {omitted.name}{size}: {omitted.reason} ---\n")
        if self.status not in (Status.OK, Status.ERROR) and self.message:
            parts.append(f"--- {self.status}: {self.message} ---\n")
        if self.network:
            parts.append(f"--- network: {describe_network(self.network)} ---\n")
        if self.note:
            parts.append(f"--- note: {self.note} ---\n")
        if self.session is not None:
            parts.append(f"--- {self.session.describe()} ---\n")
        exit_code = "none"
        if ran:
            exit_code = f"{self.exit_code}" + (f" ({self.signal})" if self.signal else "")
        parts.append(f"--- exit_code: {exit_code} | duration: {self.duration:.3f}s ---")
        return "".join(parts)


def describe_network(uses: tuple[NetworkUse, ...]) -> str:
    """The text result's network line: ``pypi.org:443 (1.2 MB), refused: example.com:443``."""
    reached = [f"{use.host_port} ({_size(use.bytes_in + use.bytes_out)})" for use in uses if use.allowed]
    refused = [use.host_port for use in uses if not use.allowed]
    return ", ".join([*reached, *([f"refused: {', '.join(refused)}"] if refused else [])])


def _size(count: int) -> str:
    if count >= 1_000_000:
        return f"{count / 1_000_000:.1f} MB"
    if count >= 1_000:
        return f"{count / 1_000:.1f} kB"
    return f"{count} bytes"


def _section(name: str, stream: StreamText) -> str:
    body = stream.text
    if body and not body.endswith("\n"):
        body += "\n"
    return f"--- {name} ---\n{body}\n"


def signal_name(number: int) -> str:
    """SIGKILL for 9; a plain number for signals this platform does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A run's tool call that the broker checked and will forward (`RunTools.take`): what it names,
    its arguments, its frame's size and when it came (`anyio.current_time()`)."""

    server: str
    tool: str
    arguments: dict[str, Any]
    sent: int
    started: float


class RunTools(Protocol):
    """One run's tool calls (code mode: `import mcp_tools` in the run), as the broker answers them. The
    execution side hands it the body of each call frame the run sends on its job socket, as it comes
    (`take`), and writes back what it answers (at once, or once `forward` returns); the broker checks,
    forwards and counts."""

    @property
    def limit_bytes(self) -> int:
        """The largest call frame body the run may send: a larger one breaks its channel."""
        ...

    @property
    def most_frames(self) -> int:
        """The most call frames the run may send: past them it is flooding its channel (shut)."""
        ...

    @property
    def most_in_flight(self) -> int:
        """The most calls the run may have in flight downstream at once (more are refused at once)."""
        ...

    @property
    def calling(self) -> str:
        """The tool a call of the run is waiting for now (``server.tool``), for its progress; "" if none."""
        ...

    def take(self, body: bytes) -> bytes | ToolCall:
        """One call frame's `body`, checked: the answer's body at once (the module, a refusal, an
        error), or the call to `forward`, counted as in flight from now. Never raises."""
        ...

    async def forward(self, call: ToolCall) -> bytes:
        """The answer's body to `call`, made downstream; never raises but for cancellation."""
        ...

    def tell(self) -> None:
        """Log and count the calls answered so far and not yet told: called once an answer is written
        (or given up), so that the log line is not on the run's way to its answer."""
        ...

    def end(self, timed_out: bool = False) -> None:
        """The run is over and its calls' tasks done: each call taken and not answered (cancelled by the
        run's end, or before it was forwarded) is told as cancelled (as timed out where the run's
        timeout ended it: `timed_out`), with every call not told yet."""
        ...


class ToolGateway(Protocol):
    """The broker of the downstream servers' tools, as the execution side sees it."""

    def for_run(self, request_id: str, caller: str | None, deadline: float) -> RunTools | None:
        """The tool calls of one run of `caller`'s, which must end by `deadline` (`anyio.current_time()`'s
        clock); None if the caller may call no tool (then the run has no `mcp_tools`)."""
        ...

    def helper_marks(self) -> frozenset[bytes] | None:
        """The environment entries (``NAME=value``, secret) that mark its downstream servers' processes,
        children of the server each leading a session of its own (no stray of a run's can join one);
        None while one is starting."""
        ...


class RunEgress(Protocol):
    """One run's connections through the egress proxy (RUNNER_EGRESS_ALLOW), as the execution side sees
    them: it hands over the run's listening socket and cancels `serve` when the run ends."""

    async def serve(self, listener: socket.socket) -> None:
        """Accept and carry the run's connections on `listener` (taken over: closed on the way out) until
        cancelled; every connection is closed with it."""
        ...

    def reached(self) -> tuple[NetworkUse, ...]:
        """What the run reached and was refused, so far."""
        ...

    def spent(self) -> str:
        """Why the run's connections were all closed, if they were (its budget spent); else ''."""
        ...


class EgressGateway(Protocol):
    """The egress proxy, as the execution side sees it."""

    def for_run(self, request_id: str, caller: str | None) -> RunEgress:
        """The connections of one run (or one call of a session) of `caller`'s (a token's name, or None)."""
        ...
