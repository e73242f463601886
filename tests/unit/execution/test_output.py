"""Reading a run's output from one task (`runner.execution.output`), on real pipes and a real socket,
without a run: what reaches the reader in one wakeup is what these tests arrange."""

from __future__ import annotations

import os
import socket

import anyio
import pytest

from runner.execution.capture import OutputCap
from runner.execution.channel import RunChannel
from runner.execution.output import RunOutput
from runner.processes.child import Child

pytestmark = pytest.mark.anyio


class Unkillable(Child):
    """A child with no process behind it: what the reader asks of it is recorded."""

    kills = 0

    def kill_group(self) -> None:
        self.kills += 1


def streams() -> tuple[Unkillable, int, int, socket.socket]:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ours, theirs = socket.socketpair()
    for fd in (out_r, err_r, ours.fileno()):
        os.set_blocking(fd, False)
    code = ours.detach()
    child = Unkillable(pid=-1, workdir=None, stdin=-1, stdout=out_r, stderr=err_r, code=code)
    child._open.update({out_r, err_r, code})
    return child, out_w, err_w, theirs


async def test_a_stream_ending_in_the_wakeup_that_blows_the_budget_ends_the_reading_cleanly() -> None:
    # A run's last write crosses the budget and its streams close together: stdout's chunk and
    # stderr's end come in one wakeup, and stderr was already let go when its end is seen.
    child, out_w, err_w, theirs = streams()
    try:
        os.write(out_w, b"x" * 5000)
        os.close(err_w)
        output = RunOutput(child, OutputCap(1000), OutputCap(1000), budget=4096, channel=RunChannel(1 << 20))
        theirs.close()  # no report
        with anyio.fail_after(5):
            await output.read_all()
        assert (output.output_exceeded, child.kills, output.stdout.total) == (True, 1, 5000)
    finally:
        os.close(out_w)
        child.close_all()


async def test_both_streams_and_a_whole_report_are_read_in_one_task() -> None:
    child, out_w, err_w, theirs = streams()
    try:
        os.write(out_w, b"1\n")
        os.write(err_w, b"warning\n")
        os.close(out_w)
        os.close(err_w)
        theirs.sendall(b"report 2 0\n{}")  # whole by its first line, while the socket stays open
        output = RunOutput(child, OutputCap(1000), OutputCap(1000), budget=4096, channel=RunChannel(1 << 20))
        with anyio.fail_after(5):
            await output.read_all()
        assert (output.stdout.total, output.stderr.total, bytes(output.report), output.report_whole) == (
            2,
            8,
            b"report 2 0\n{}",
            True,
        )
    finally:
        theirs.close()
        child.close_all()


async def test_a_report_over_its_limit_is_dropped_and_its_socket_closed() -> None:
    child, out_w, err_w, theirs = streams()
    try:
        os.close(out_w)
        os.close(err_w)
        theirs.sendall(b"report 5000 0\n" + b"x" * 100)
        output = RunOutput(child, OutputCap(1000), OutputCap(1000), budget=4096, channel=RunChannel(1000))
        with anyio.fail_after(5):
            await output.read_all()
        assert (bytes(output.report), output.report_whole) == (b"", False)
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            theirs.sendall(b"y" * (1 << 20))  # the run, still writing, is told at once
    finally:
        theirs.close()
        child.close_all()
