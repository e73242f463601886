"""The in-run wire on its own: the frames between the server and a run interpreter, without processes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from runner.inrun.wire import Budgets, frame_job, read_job, report_length


def report(head: dict[str, object], blobs: bytes = b"") -> bytes:
    encoded = json.dumps(head).encode()
    return b"report %d %d\n" % (len(encoded), len(blobs)) + encoded + blobs


def test_a_report_is_whole_when_its_first_line_says_so() -> None:
    data = report({"result": "1"}, b"xy")
    assert report_length(data[:5]) is None
    assert report_length(data) == len(data)
    assert report_length(b"hello world\n") == -1
    assert report_length(b"x" * 100) == -1


def test_a_job_carries_its_code_files_budgets_and_package_directories_through_a_socket() -> None:
    budgets = Budgets(1, 2, 3, 4, 5, 6)
    paths = ("/cache/sympy-1.14.0-0123456789abcdef", "/cache/mpmath-1.3.0-fedcba9876543210")
    framed = frame_job(b"import sympy", b"files", budgets, paths)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.sendall(framed)
        job = read_job(theirs.fileno())
    assert job is not None
    assert (bytes(job.code), job.inputs, job.budgets, job.paths) == (b"import sympy", b"files", budgets, paths)


def test_a_job_without_package_directories_has_none() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.sendall(frame_job(b"pass"))
        job = read_job(theirs.fileno())
    assert job is not None
    assert (bytes(job.code), job.inputs, job.paths) == (b"pass", b"", ())


def test_taking_the_job_sockets_turn_imports_no_threading_module() -> None:
    # Every report of a run that may call tools is written in its turn: threading's import was 1-4 ms of
    # each such run's time, before its report.
    inrun = Path(__file__).parents[3] / "runner" / "inrun"
    probe = (
        f"import sys, socket; sys.path.insert(0, {str(inrun)!r}); import wire\n"
        "ours, theirs = socket.socketpair()\n"
        "wire.in_turn(ours.fileno(), True, wire.write_whole, ours.fileno(), b'report')\n"
        "print(theirs.recv(6), 'threading' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout == "b'report' False\n"
