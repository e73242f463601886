"""The server's side of a session's anchor, on a socket pair standing in for the anchor's job socket:
the next call handed its pipes in the verdict's own message, and each call's end told to that call."""

from __future__ import annotations

import array
import os
import socket
from collections.abc import Iterator

import pytest

from runner.processes.child import Child
from runner.processes.keeper import SessionKeeper

pytestmark = pytest.mark.anyio


@pytest.fixture
def held() -> Iterator[list[int]]:
    fds: list[int] = []
    yield fds
    for fd in fds:
        os.close(fd)


@pytest.fixture
def anchor_socket() -> Iterator[tuple[SessionKeeper, socket.socket]]:
    ours, theirs = socket.socketpair()
    keeper = SessionKeeper(Child(pid=0, workdir=None, stdin=-1, stdout=-1, stderr=-1, code=ours.fileno()))
    yield keeper, theirs
    ours.close()
    theirs.close()


def _received(anchor: socket.socket, held: list[int]) -> tuple[bytes, int]:
    """What one message to the anchor carried: its text and how many fds, which are `held` (a call
    whose job socket's other end is closed is gone)."""
    message, ancillary, _, _ = anchor.recvmsg(4096, socket.CMSG_SPACE(8 * 4))
    fds = array.array("i")
    for _, _, data in ancillary:
        fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    held.extend(fds)
    return message, len(fds)


async def test_the_verdict_hands_the_next_call_its_pipes_in_the_same_message(
    anchor_socket: tuple[SessionKeeper, socket.socket], held: list[int]
) -> None:
    keeper, anchor = anchor_socket
    first = await keeper.call()
    assert _received(anchor, held) == (b"C\n", 4)  # stdin, stdout, stderr, the job socket
    keeper.give_verdict(True, arm=True)
    assert _received(anchor, held) == (b"V 1\nC\n", 4)
    assert await keeper.call() is not first  # the one armed with the verdict
    first.close_all()


async def test_without_arming_the_verdict_goes_alone(
    anchor_socket: tuple[SessionKeeper, socket.socket], held: list[int]
) -> None:
    keeper, anchor = anchor_socket
    (await keeper.call()).close_all()
    _received(anchor, held)
    keeper.give_verdict(False)
    assert _received(anchor, held) == (b"V 0\n", 0)


async def test_the_end_of_the_call_before_told_after_the_next_was_armed_ends_that_call_only(
    anchor_socket: tuple[SessionKeeper, socket.socket], held: list[int]
) -> None:
    keeper, anchor = anchor_socket
    first = await keeper.call()
    keeper._take(b"S 101")
    keeper.give_verdict(True, arm=True)
    _received(anchor, held)
    _received(anchor, held)
    keeper._take(b"X 101 0 0.25 0.0 2048")  # the first call's end, told late
    assert first.report is not None
    assert first.report[0] == 0
    armed = await keeper.call()
    assert armed.report is None  # still ready for its job
    keeper._take(b"S 102")
    keeper._take(b"X 999 0 0.0 0.0 0")  # no call of this session's: told to none
    assert armed.report is None
    keeper._take(b"X 102 9 0.0 0.0 0")
    assert armed.report is not None
    assert armed.report[0] == -9
    first.close_all()
    armed.close_all()
