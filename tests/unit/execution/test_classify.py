"""Classification of how a run ended, from observed facts only."""

from __future__ import annotations

import signal

import pytest

from runner.execution.classify import ProcessEnd, RunLimits, classify
from runner.outcome import Status

LIMITS = RunLimits(timeout=5, cpu_seconds=2, memory_mb=64, file_size_mb=1, output_bytes=1000)


def end(returncode: int, cpu: float = 0.1, **flags: bool) -> ProcessEnd:
    return ProcessEnd(returncode, cpu, 10_000_000, **flags)


@pytest.mark.parametrize(
    ("facts", "stderr", "status", "says"),
    [
        (end(0), b"", Status.OK, ""),
        (end(3), b"", Status.ERROR, "exited with status 3"),
        (end(1), b"Traceback...\nValueError: x\n", Status.ERROR, "exited with status 1"),
        (end(-signal.SIGKILL, timed_out=True), b"", Status.TIMEOUT, "wall-clock limit of 5s"),
        # Which setting, and that a timeout is not it (found by a first hour).
        (end(-signal.SIGXCPU, cpu=2.0), b"", Status.CPU_LIMIT, "2s exceeded (SIGXCPU; RUNNER_MAX_CPU_SECONDS, which a"),
        (end(-signal.SIGKILL, cpu=3.0), b"", Status.CPU_LIMIT, "(SIGKILL;"),
        (end(-signal.SIGKILL, cpu=0.5), b"", Status.SIGNAL, "killed by SIGKILL"),
        (end(1), b"Traceback (most recent call last):\nMemoryError\n", Status.MEMORY_LIMIT, "64 MiB"),
        (end(1), b"OSError: [Errno 12] Cannot allocate memory\n", Status.MEMORY_LIMIT, "64 MiB"),
        (end(1), b"OSError: [Errno 27] File too large\n", Status.FILE_SIZE_LIMIT, "1 MiB"),
        (end(-signal.SIGXFSZ), b"", Status.FILE_SIZE_LIMIT, "SIGXFSZ"),
        (end(-signal.SIGSEGV), b"", Status.SIGNAL, "killed by SIGSEGV"),
        (end(-signal.SIGKILL, output_exceeded=True), b"", Status.OUTPUT_LIMIT, "1,000 bytes"),
        (end(0), b"MemoryError\n", Status.OK, ""),
    ],
)
def test_each_way_a_run_can_end_gets_its_status(facts: ProcessEnd, stderr: bytes, status: Status, says: str) -> None:
    got, message = classify(facts, stderr, LIMITS)
    assert got is status
    assert says in message


def test_a_run_whose_time_ran_out_while_it_waited_for_a_tool_is_told_which() -> None:
    facts = ProcessEnd(-signal.SIGKILL, 0.1, 10_000_000, timed_out=True, calling="time.get_current_time")
    assert classify(facts, b"", LIMITS) == (
        Status.TIMEOUT,
        "wall-clock limit of 5s reached while waiting for the tool time.get_current_time; process group killed",
    )


def test_what_the_server_did_to_the_run_outranks_what_the_run_printed() -> None:
    facts = end(-signal.SIGKILL, cpu=10.0, timed_out=True, output_exceeded=True)
    assert classify(facts, b"MemoryError\n", LIMITS)[0] is Status.OUTPUT_LIMIT


@pytest.mark.parametrize(
    ("met", "stderr", "status"),
    [
        ("memory", b"numpy._core._exceptions._ArrayMemoryError: Unable to allocate 275. MiB\n", Status.MEMORY_LIMIT),
        ("memory", b"pandas says: something else entirely\n", Status.MEMORY_LIMIT),
        ("file_size", b"", Status.FILE_SIZE_LIMIT),
        ("", b"Traceback (most recent call last):\nMemoryError\n", Status.ERROR),  # the code raised it itself
        ("", b"OSError: [Errno 12] Cannot allocate memory\n", Status.ERROR),
        (None, b"Traceback (most recent call last):\nMemoryError\n", Status.MEMORY_LIMIT),  # no end told
        # sys.exit passing on a child interpreter's status (epicbox's test_run_memory_limit): its MemoryError
        ("exit", b"Traceback (most recent call last):\nMemoryError\n", Status.MEMORY_LIMIT),
        ("exit", b"something failed\n", Status.ERROR),
    ],
)
def test_the_limit_the_run_says_its_exception_met_decides_over_the_text_of_stderr(
    met: str | None, stderr: bytes, status: Status
) -> None:
    facts = ProcessEnd(1, 0.1, 10_000_000, limit_met=met)
    assert classify(facts, stderr, LIMITS)[0] is status
