"""Why a run ended, decided from what the pool observed: a pure function, no I/O.

The pool fills in the facts (`ProcessEnd`); `classify` turns them into a status and a one-line
explanation. A run's outcome is data, never an exception.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from runner.outcome import Status, signal_name


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
    calling: str = ""  # the tool (server.tool) a call of the run waited for when its time was up
    output_exceeded: bool = False
    oom_kills: int = 0  # in the run's cgroup: its whole tree went over its memory budget
    # The limit the run said its code's uncaught exception met ("memory", "file_size", "": none, or
    # one the code raised itself); None where the run told no end of its own (its code closed the
    # socket, say), or "exit" where its code ended itself with a failure (passing on a child's, say):
    # then the last line of stderr is read instead, which a child's MemoryError ends.
    limit_met: str | None = None


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
    # Before the deadline: a run whose child the kernel killed at the budget may then wait out its time.
    if end.oom_kills:
        return Status.MEMORY_LIMIT, f"memory limit of {limits.memory_mb} MiB exceeded (the whole run's, cgroup)"
    if end.timed_out:
        waiting = f" while waiting for the tool {end.calling}" if end.calling else ""
        return Status.TIMEOUT, f"wall-clock limit of {limits.timeout:g}s reached{waiting}; process group killed"
    # A SIGXCPU the run sent itself early is a signal, not the limit (accounting may lag a little).
    spent = end.cpu_seconds >= limits.cpu_seconds * CPU_ACCOUNTING_SLACK
    if (signum == signal.SIGXCPU and spent) or (signum == signal.SIGKILL and end.cpu_seconds >= limits.cpu_seconds):
        # Which setting, and that a timeout is not it (found by a first hour: a run given `timeout: 300`
        # ended at 10 s, told nothing of why its timeout did not hold).
        return Status.CPU_LIMIT, (
            f"CPU time limit of {limits.cpu_seconds}s exceeded ({signal_name(signum)}; "
            "RUNNER_MAX_CPU_SECONDS, which a longer timeout does not raise)"
        )
    if signum == signal.SIGXFSZ:
        return Status.FILE_SIZE_LIMIT, f"file size limit of {limits.file_size_mb} MiB exceeded (SIGXFSZ)"
    if signum:
        return Status.SIGNAL, f"killed by {signal_name(signum)}"
    if code == 0:
        return Status.OK, ""
    met = end.limit_met
    if met is None or met == "exit":
        last = _last_line(stderr_tail)
        met = "memory" if _MEMORY_ERROR.match(last) else "file_size" if _FILE_TOO_LARGE.match(last) else ""
    if met == "memory":
        return Status.MEMORY_LIMIT, f"memory limit of {limits.memory_mb} MiB exceeded"
    if met == "file_size":
        return Status.FILE_SIZE_LIMIT, f"file size limit of {limits.file_size_mb} MiB exceeded"
    return Status.ERROR, f"exited with status {code}"
