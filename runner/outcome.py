"""How a run ended, as data: the request and result dataclasses and the pure classification.

The pool fills in the facts it observed (`ProcessEnd`); `classify` turns them into a status and a
one-line explanation. Exceptions are for the server's own faults, never for a run's outcome.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from enum import StrEnum

from runner.capture import StreamText


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
class RunRequest:
    """One run: the code, what to feed its stdin, and its wall-clock timeout in seconds."""

    request_id: str
    code: str
    timeout: float
    stdin: str = ""


@dataclass(frozen=True, slots=True)
class RunLimits:
    """The limits a run was held to, for the explanations in its result."""

    timeout: float
    cpu_seconds: int
    memory_mb: int
    file_size_mb: int
    output_bytes: int


@dataclass(frozen=True, slots=True)
class ProcessEnd:
    """What the pool observed when the run's process ended."""

    returncode: int
    cpu_seconds: float
    peak_memory_bytes: int
    timed_out: bool = False
    output_exceeded: bool = False


@dataclass(frozen=True, slots=True)
class Progress:
    """A running run's state, reported about once a second to callers that asked for it."""

    elapsed: float
    timeout: float
    stdout_bytes: int
    stderr_bytes: int
    last_line: str

    def describe(self) -> str:
        """One line for a progress notification."""
        output = self.stdout_bytes + self.stderr_bytes
        text = f"running for {self.elapsed:.0f}s of {self.timeout:g}s; output {output:,} bytes"
        return text + (f"; last line: {self.last_line}" if self.last_line else "")


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

    @property
    def signal(self) -> str | None:
        """The name of the signal that ended the process, if one did."""
        return signal_name(-self.exit_code) if self.exit_code is not None and self.exit_code < 0 else None

    @property
    def is_error(self) -> bool:
        """Whether MCP clients should see this result as a failed tool call."""
        return self.status is not Status.OK

    def to_text(self) -> str:
        """The human-readable result block (the format of the product description)."""
        from runner.render import render_text

        return render_text(self)


def signal_name(number: int) -> str:
    """SIGKILL for 9; a plain number for signals this platform does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


CPU_ACCOUNTING_SLACK = 0.5
_MEMORY_ERROR = re.compile(rb"^(MemoryError\b|OSError: \[Errno 12\]|.*Cannot allocate memory)")
_FILE_TOO_LARGE = re.compile(rb"^OSError: \[Errno 27\]")


def _last_line(data: bytes) -> bytes:
    lines = data.rstrip().splitlines()
    return lines[-1].strip() if lines else b""


def classify(end: ProcessEnd, stderr_tail: bytes, limits: RunLimits) -> tuple[Status, str]:
    """Decide why a run ended; the first matching reason wins, in order of what the server did to it."""
    code = end.returncode
    signum = -code if code < 0 else 0
    if end.output_exceeded:
        return Status.OUTPUT_LIMIT, f"output budget of {limits.output_bytes:,} bytes exceeded; process group killed"
    if end.timed_out:
        return Status.TIMEOUT, f"wall-clock limit of {limits.timeout:g}s reached; process group killed"
    # A SIGXCPU the run sent itself early is a signal, not the limit (accounting may lag a little).
    spent = end.cpu_seconds >= limits.cpu_seconds * CPU_ACCOUNTING_SLACK
    if (signum == signal.SIGXCPU and spent) or (signum == signal.SIGKILL and end.cpu_seconds >= limits.cpu_seconds):
        return Status.CPU_LIMIT, f"CPU time limit of {limits.cpu_seconds}s exceeded ({signal_name(signum)})"
    if signum == signal.SIGXFSZ:
        return Status.FILE_SIZE_LIMIT, f"file size limit of {limits.file_size_mb} MiB exceeded (SIGXFSZ)"
    if signum:
        return Status.SIGNAL, f"killed by {signal_name(signum)}"
    if code == 0:
        return Status.OK, ""
    last = _last_line(stderr_tail)
    if _MEMORY_ERROR.match(last):
        return Status.MEMORY_LIMIT, f"memory limit of {limits.memory_mb} MiB exceeded"
    if _FILE_TOO_LARGE.match(last):
        return Status.FILE_SIZE_LIMIT, f"file size limit of {limits.file_size_mb} MiB exceeded"
    return Status.ERROR, f"exited with status {code}"
