"""The in-run wire on its own: the frames between the server and a run interpreter, without processes."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from runner.inrun.wire import Budgets, ToolChannel, frame_answer, frame_job, frame_line, read_job, report_length


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


def test_a_tool_channel_the_runs_code_made_non_blocking_takes_an_answer_that_comes_in_parts() -> None:
    # The run's side of its channel is made once; another process of the run can make fd 3 non-blocking
    # while a call waits. The answer's second part is sent only once the run's side, having taken the
    # first, found nothing more and made the fd blocking again (before: BlockingIOError, a failed call).
    run_end, server_end = socket.socketpair()
    fd = run_end.fileno()
    sent_rest: list[bool] = []

    def server() -> None:
        request = b""
        while b"\n" not in request:
            request += server_end.recv(100)
        line = frame_line(request, b"tool")
        assert line is not None
        line_bytes, size, call_id = line
        while len(request) < line_bytes + size:
            request += server_end.recv(100)
        os.set_blocking(fd, False)  # the run's code, elsewhere
        answer = frame_answer(b"y" * 500_000, call_id)
        server_end.sendall(answer[:100_000])
        deadline = time.monotonic() + 5
        while not os.get_blocking(fd) and time.monotonic() < deadline:
            time.sleep(0.001)
        sent_rest.append(os.get_blocking(fd))
        server_end.sendall(answer[100_000:])

    with run_end, server_end:
        channel = ToolChannel(fd)
        thread = threading.Thread(target=server, daemon=True)
        thread.start()
        assert channel.exchange(b'{"op": "call"}', b"%d.1" % os.getpid()) == b"y" * 500_000
        thread.join(5)
    assert sent_rest == [True]
