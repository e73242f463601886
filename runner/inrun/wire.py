"""The wire between the server and one run, both ends of it: the ready line the run says on stdout,
the job the server sends on the job socket (the code, the call's files, what the run may return),
and the report the run sends back on that socket once its code has ended.

Standard library only, and nothing of it imported at load time that a run would not need anyway:
every run interpreter loads this (`bootstrap.load_siblings`), and the server imports it as
`runner.inrun.wire`. Framing only: what a report says is checked by the server
(`runner.execution.report`), which trusts none of it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    Taken = TypeVar("Taken")

# The job socket is the run's fd 3: its code comes on it, its report goes back on it.
CODE_FD = 3
# The first bytes on a run's stdout, before any user output can exist: its limits are applied, and
# these (rlimit names) were refused by the OS.
READY_PREFIX = b"\x00runner-ready"
REPORT_HEAD = b"report"
# What one report lists at most (more is counted, not listed), and a name's most characters: the run
# keeps to them, and the server bounds the report it will take by them.
MAX_OMITTED = 50
MAX_FILES = 100
MAX_NAME_CHARS = 1024
MAX_LINKED = 20  # files and full-size figures sent for the server to keep and link
# The report header's most besides the result: at most MAX_FILES files, MAX_OMITTED more and MAX_LINKED
# linked, each name at most MAX_NAME_CHARS, 6 bytes a character at worst in JSON.
MAX_HEADER_BYTES = 64 * 1024 + (MAX_FILES + MAX_OMITTED + MAX_LINKED + 64) * (6 * MAX_NAME_CHARS + 600)


def ready_line(refused: list[str]) -> bytes:
    """What a run says on stdout once its limits are applied: the prefix and the refused limits."""
    return READY_PREFIX + b" " + ",".join(refused).encode() + b"\n"


def parse_ready(line: bytes) -> tuple[str, ...] | None:
    """The limits a ready line says were refused; None if `line` is not a ready line."""
    if not line.startswith(READY_PREFIX):
        return None
    return tuple(line[len(READY_PREFIX) :].decode(errors="replace").replace(",", " ").split())


class Budgets:
    """What one call may return: images, bytes per image, bytes in all, bytes of files that are not
    images (a client may read those as text, and count them against its limits), characters of the
    last expression's value, bytes of what is over those budgets but sent anyway for the server to
    keep and link (`kept_bytes`: files, full-size figures; 0 where the server keeps nothing), and rows
    of a last value that is a pandas DataFrame or Series, as a table for an app view (`table_rows`; 0
    where the caller's client shows none). All 0 (`NO_RETURNS`): the run returns its output only. Frozen."""

    __slots__ = ("call_bytes", "file_bytes", "image_bytes", "images", "kept_bytes", "result_chars", "table_rows")
    FIELDS = ("images", "image_bytes", "call_bytes", "file_bytes", "result_chars", "kept_bytes", "table_rows")

    images: int
    image_bytes: int
    call_bytes: int
    file_bytes: int
    result_chars: int
    kept_bytes: int
    table_rows: int

    def __init__(
        self,
        images: int,
        image_bytes: int,
        call_bytes: int,
        file_bytes: int,
        result_chars: int,
        kept_bytes: int = 0,
        table_rows: int = 0,
    ) -> None:
        values = (images, image_bytes, call_bytes, file_bytes, result_chars, kept_bytes, table_rows)
        for name, value in zip(self.FIELDS, values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Budgets are frozen: cannot set {name}")

    def numbers(self) -> tuple[int, ...]:
        """The budgets in `FIELDS` order, as the job frame carries them."""
        return tuple(getattr(self, name) for name in self.FIELDS)

    def replace(self, **changes: int) -> Budgets:
        """These budgets with some changed."""
        return Budgets(**{name: changes.pop(name, getattr(self, name)) for name in self.FIELDS}, **changes)

    def any(self) -> bool:
        """Whether the run returns anything besides its output."""
        return any(self.numbers())

    @property
    def table_bytes(self) -> int:
        """The most a table may take of the call's bytes: half, so that figures and files keep room."""
        return self.call_bytes // 2 if self.table_rows else 0

    @property
    def report_bytes(self) -> int:
        """The most a well-formed report can take on the wire."""
        return len(REPORT_HEAD) + 32 + MAX_HEADER_BYTES + 6 * self.result_chars + self.call_bytes + self.kept_bytes

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Budgets) and self.numbers() == other.numbers()

    def __hash__(self) -> int:
        return hash(self.numbers())

    def __repr__(self) -> str:
        return "Budgets(" + ", ".join(f"{name}={getattr(self, name)}" for name in self.FIELDS) + ")"


NO_RETURNS = Budgets(0, 0, 0, 0, 0, 0, 0)


class Job:
    """One call as the run gets it: its code, its files (`frame_inputs`), what it may return besides its
    output, and the directories of packages the server provided for it (`paths`, from its wheelhouse,
    to go on sys.path); or (`keeper`) no code: the interpreter is to hold a session (`keeper.py`)."""

    __slots__ = ("budgets", "code", "inputs", "keeper", "paths", "socket", "tools")

    def __init__(
        self,
        code: bytearray,
        inputs: bytes,
        budgets: Budgets,
        socket: tuple[int, int],
        keeper: bool = False,
        paths: tuple[str, ...] = (),
        tools: bool = False,
    ) -> None:
        self.code, self.inputs, self.budgets, self.socket = code, inputs, budgets, socket
        self.keeper, self.paths, self.tools = keeper, paths, tools


# The job of an interpreter that becomes a session's anchor instead of running code.
KEEPER_JOB = b"keeper\n"


def frame_job(
    code: bytes, inputs: bytes = b"", budgets: Budgets = NO_RETURNS, paths: tuple[str, ...] = (), tools: bool = False
) -> bytes:
    """What the server writes on the job socket: the sizes and budgets on one line, the code, the files,
    the package directories (NUL-separated: no path holds a NUL); and whether the run may call tools
    (`import mcp_tools`, brokered on this socket: `frame_tool`)."""
    listed = b"\0".join(os.fsencode(path) for path in paths)
    numbers = b" ".join(b"%d" % n for n in (len(code), len(inputs), *budgets.numbers(), len(listed), tools))
    return numbers + b"\n" + code + inputs + listed


def read_job(fd: int) -> Job | None:
    """Read the job the server framed with `frame_job`; None if the socket closed before all of it came.

    The sizes let the run start as soon as the last byte arrives (waiting for the server to close
    the socket would cost a second wake-up), and the job is read into one buffer of its size. The
    socket stays open, for the report, but no program the code starts inherits it.
    """
    head = b""
    while b"\n" not in head:
        chunk = os.read(fd, 128)
        if not chunk:
            return None
        head += chunk
    line, _, first = head.partition(b"\n")
    if head == KEEPER_JOB:
        info = os.fstat(fd)
        return Job(bytearray(), b"", NO_RETURNS, (info.st_dev, info.st_ino), keeper=True)
    numbers = tuple(int(n) for n in line.split())
    # code, inputs, the budgets, the package directories, tools: as `frame_job` writes them
    listed_at, tools_at = 2 + len(Budgets.FIELDS), 3 + len(Budgets.FIELDS)
    body = bytearray(numbers[0] + numbers[1] + numbers[listed_at])
    got = min(len(first), len(body))
    body[:got] = first[:got]
    view = memoryview(body)
    while got < len(body):
        n = os.readv(fd, [view[got:]])
        if not n:
            break
        got += n
    view.release()
    os.set_inheritable(fd, False)
    if got != len(body):
        return None
    ends = numbers[0] + numbers[1]
    paths = tuple(os.fsdecode(bytes(p)) for p in body[ends:].split(b"\0")) if numbers[listed_at] else ()
    inputs = bytes(body[numbers[0] : ends]) if numbers[1] else b""
    del body[numbers[0] :]
    info = os.fstat(fd)
    # The code not copied: decode() takes a bytearray.
    tools = len(numbers) > tools_at and numbers[tools_at] == 1
    budgets = Budgets(*numbers[2:listed_at])
    return Job(body, inputs, budgets, (info.st_dev, info.st_ino), paths=paths, tools=tools)


def same_socket(fd: int, job: Job) -> bool:
    """Whether `fd` is still the socket the job came on: the code may have closed it and opened a file."""
    try:
        info = os.fstat(fd)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == job.socket


def parse_inputs(blob: bytes | bytearray) -> list[tuple[str, bytes]]:
    """The call's files as the server framed them (`frame_inputs`): (relative path, content) pairs."""
    files = []
    view = memoryview(blob)
    at = 0
    while at < len(blob):
        end = blob.index(b"\n", at)
        path_size, data_size = (int(n) for n in bytes(view[at:end]).split())
        at = end + 1
        path = bytes(view[at : at + path_size]).decode("utf-8")
        at += path_size
        files.append((path, bytes(view[at : at + data_size])))
        at += data_size
    view.release()
    return files


def frame_inputs(files: list[tuple[str, bytes]]) -> bytes:
    """What `parse_inputs` reads: for each file, its path's and its content's sizes, a newline, both."""
    parts = []
    for path, data in files:
        encoded = path.encode("utf-8")
        parts += [b"%d %d\n" % (len(encoded), len(data)), encoded, data]
    return b"".join(parts)


def encode_header(header: dict[str, Any]) -> bytes:
    """A report's JSON header but its end (`encode_report` puts that first): made while the run's code
    may still run, before a session's call is sealed (`sealing.seal`), so that no JSON encoder runs
    after (its class is the state's to change: found by a review)."""
    import json  # not before: most runs return nothing but their end (`encode_end`)

    return json.dumps(header, ensure_ascii=True).encode("ascii")


def encode_report(end: dict[str, Any] | None, header: bytes, blobs: list[bytes]) -> bytes:
    """``report <header bytes> <blob bytes>``, a newline, the JSON header (`end`, written out here, then
    the rest of `header`, an `encode_header` object of one key at least), the blobs in order."""
    head = b'{"end": ' + _end(end) + b", " + header[1:]
    joined = b"".join(blobs)
    return REPORT_HEAD + b" %d %d\n" % (len(head), len(joined)) + head + joined


def encode_end(end: dict[str, Any]) -> bytes:
    """The report of a run that returns nothing but its end: no JSON encoder to run (and pages to copy)
    for it, in the one form `read_end` reads without the decoder."""
    head = b'{"end": ' + _end(end) + b"}"
    return REPORT_HEAD + b" %d 0\n" % len(head) + head


def _end(end: dict[str, Any] | None) -> bytes:
    """The run's end as JSON, written out (`END_ONLY`'s form)."""
    if end is None:
        return b"null"
    limit = LIMITS_MET.get(end.get("limit", ""), b"")
    return b'{"status": %d, "cpu": %r, "maxrss_kb": %d, "limit": "%s"}' % (
        end["status"],
        end["cpu"],
        end["maxrss_kb"],
        limit,
    )


# A run's tool call (`mcp_tools`), on the job socket before its report: ``tool <body bytes> <call id>``, a
# newline, the JSON body; the server's answer comes back on it the same way, headed ``answer`` with the
# same call id. A call id is the calling process's pid and a count (``1234.7``): the processes of a run
# share its socket, and each takes only its own answers (`toolchannel.ToolChannel`). The server bounds a body by
# RUNNER_TOOLS_MAX_MB, the run an answer by MAX_ANSWER_BYTES.
TOOL_HEAD = b"tool"
ANSWER_HEAD = b"answer"
MAX_ANSWER_BYTES = 1 << 32
MAX_FRAME_LINE = 64  # "answer <12 digits> <call id>\n" and then some
ATOMIC_BYTES = 16 * 1024  # a frame this small is written in one write, which no other write splits
_CALL_ID_CHARACTERS = frozenset(b"0123456789.")


# Egress (RUNNER_EGRESS_ALLOW): the message that hands the server a copy of the proxy's listening socket in
# the run's own network namespace, before its ready line (`hand_over_listener`, `Child.receive_listener`).
LISTENER_MESSAGE = b"egress-listener"


def proxy_listener(port: int) -> int:
    """A socket listening on 127.0.0.1:`port` of the caller's network namespace (its loopback, where
    HTTP_PROXY points): its fd."""
    import socket

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
    except BaseException:
        listener.close()
        raise
    return listener.detach()


def hand_over_listener(listener: int, fd: int = CODE_FD) -> None:
    """Before any code: hand the proxy's `listener` (in this process's network namespace) to the server
    over the job socket `fd`. The server accepts on it: each connection the run makes there is the
    proxy's. The caller closes its own copy before the code comes."""
    import socket

    channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, fd)
    try:
        socket.send_fds(channel, [LISTENER_MESSAGE], [listener])
    finally:
        channel.detach()


def frame_tool(body: bytes, call_id: bytes) -> bytes:
    """A tool call's frame, run to server."""
    return TOOL_HEAD + b" %d %s\n" % (len(body), call_id) + body


def frame_answer(body: bytes, call_id: bytes) -> bytes:
    """A tool call's answer's frame, server to run."""
    return ANSWER_HEAD + b" %d %s\n" % (len(body), call_id) + body


def frame_line(data: bytes | bytearray, head: bytes) -> tuple[int, int, bytes] | None:
    """The ``<head> <n> <call id>`` line `data` starts with, as (the line's length with its newline, the
    body's length, the call id); None until the line is whole; ValueError when `data` does not start
    like one."""
    line_end = data.find(b"\n", 0, MAX_FRAME_LINE)
    if line_end < 0:
        if len(data) >= MAX_FRAME_LINE or not (head + b" ").startswith(bytes(data[: len(head) + 1])):
            raise ValueError("not a frame")
        return None
    parts = bytes(data[:line_end]).split(b" ")
    if (
        len(parts) != 3
        or parts[0] != head
        or not parts[1].isdigit()
        or len(parts[1]) > 12
        or not 0 < len(parts[2]) <= 32
        or not _CALL_ID_CHARACTERS.issuperset(parts[2])
    ):
        raise ValueError("not a frame")
    return line_end + 1, int(parts[1]), parts[2]


def in_turn(fd: int, alone: bool, then: Callable[..., Taken], *args: Any) -> Taken:
    """`then(*args)` with the job socket `fd` taken, for writing (a frame, the report) or for dropping an
    answer: by this thread among its process's (a thread lock: a POSIX lock is the whole process's, so
    one thread's unlock would undo another's), then by this process among the run's (a POSIX lock:
    shared for a frame written in one write, `alone` otherwise). The thread lock is taken and let go by
    C's own enter and exit (`with`), which a signal handler's exception in the main thread cannot split:
    a Python __exit__ could be, the lock then held for ever and every call of the process waiting
    (found by a review, under a timer that raised every 0.7 ms)."""
    import _thread  # always loaded (the import system's own locks): threading's import is 1-4 ms of a run's
    import fcntl  # loaded by the zygote (`runner/inrun/zygote.py`): a forked run pays nothing for it

    pid = os.getpid()
    # Each process its own thread lock: a forked one's parent's may be held by a thread it lacks.
    turn = _TURNS.get(pid) or _TURNS.setdefault(pid, _thread.allocate_lock())
    with turn:
        fcntl.lockf(fd, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            return then(*args)
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN)


_TURNS: dict[int, Any] = {}  # each process's thread lock (`in_turn`), made in it when first needed


def write_whole(fd: int, data: bytes) -> None:
    """Write all of `data` to the job socket `fd`, blocking, also where the run's code made the fd
    non-blocking (then it is made blocking again: a frame or a report cut at EAGAIN would be lost)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            os.set_blocking(fd, True)


def report_length(data: bytes | bytearray) -> int | None:
    """The length of the whole report once its first line is in `data`; None until then, or -1 when
    `data` does not start like a report."""
    line_end = data.find(b"\n", 0, 64)
    if line_end < 0:
        return None if len(data) < 64 else -1
    parts = bytes(data[:line_end]).split(b" ")
    if len(parts) != 3 or parts[0] != REPORT_HEAD or not all(p.isdigit() for p in parts[1:]):
        return -1
    return line_end + 1 + int(parts[1]) + int(parts[2])


# Numbers as JSON spells them (no leading zeros) and short, so that this reads exactly what the
# decoder would; the declared header length must be the header's.
END_ONLY = (
    REPORT_HEAD + rb' ([0-9]{1,4}) 0\n\{"end": \{"status": (0|[1-9][0-9]{0,2}), '
    rb'"cpu": ((?:0|[1-9][0-9]{0,9})\.[0-9]{1,20}(?:e-[0-9]{1,3})?), "maxrss_kb": (0|[1-9][0-9]{0,14}), '
    rb'"limit": "(|memory|file_size|exit)"\}\}'
)
# The limits a run can say its code's exception met (`harvest.limit_met`), as the end names them; "exit":
# its code ended itself (sys.exit) with a failure, which may be a child's (a child interpreter's
# MemoryError, its status passed on), so the server reads the last line of stderr as for a run that
# told no end.
LIMITS_MET = {"": b"", "memory": b"memory", "file_size": b"file_size", "exit": b"exit"}


def read_end(data: bytes | bytearray) -> tuple[int, float, int, str] | None:
    """(status, CPU seconds, peak kB, the limit met or "") of a report in `encode_end`'s form, its values
    in range; None for any other report (which goes through the JSON decoder: `split_report`)."""
    import re  # the server's side only: re caches the compiled pattern

    end = re.fullmatch(END_ONLY, data)
    if end is None:
        return None
    header_bytes = len(data) - end.end(1) - len(b" 0\n")
    if int(end[1]) != header_bytes or int(end[2]) > 255 or float(end[3]) >= 1e9:
        return None
    return int(end[2]), float(end[3]), int(end[4]), end[5].decode()


def split_report(data: bytes | bytearray) -> tuple[int, int, bytes | bytearray, memoryview]:
    """A whole report's declared header and blob sizes, its JSON header's bytes and its blobs (none
    of it checked yet). Raises ValueError if the first line is not a report's."""
    line_end = data.index(b"\n")
    parts = data[:line_end].split(b" ")
    if len(parts) != 3 or parts[0] != REPORT_HEAD:
        raise ValueError("not a report")
    head_size, blob_size = int(parts[1]), int(parts[2])
    head = data[line_end + 1 : line_end + 1 + head_size]
    return head_size, blob_size, head, memoryview(data)[line_end + 1 + head_size :]
