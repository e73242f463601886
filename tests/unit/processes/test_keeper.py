"""The server's side of a session's anchor, on a socket pair standing in for the anchor's job socket:
the next call handed its pipes in the verdict's own message, and each call's end told to that call."""

from __future__ import annotations

import array
import os
import socket
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

from runner.processes.child import Child
from runner.processes.keeper import SessionKeeper, SessionLost

pytestmark = pytest.mark.anyio


@pytest.fixture
def held() -> Iterator[list[int]]:
    fds: list[int] = []
    yield fds
    for fd in fds:
        os.close(fd)


@pytest.fixture
async def anchor_socket() -> AsyncIterator[tuple[SessionKeeper, socket.socket]]:
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
    keeper._received(b"S 101\n")
    keeper.give_verdict(True, arm=True)
    _received(anchor, held)
    _received(anchor, held)
    keeper._received(b"X 101 0 0.25 0.0 2048\n")  # the first call's end, told late
    assert first.report is not None
    assert first.report[0] == 0
    armed = await keeper.call()
    assert armed.report is None  # still ready for its job
    keeper._received(b"S 102\n")
    keeper._received(b"X 999 0 0.0 0.0 0\n")  # no call of this session's: told to none
    assert armed.report is None
    keeper._received(b"X 102 9 0.0 0.0 0\n")
    assert armed.report is not None
    assert armed.report[0] == -9
    first.close_all()
    armed.close_all()


# Whatever the anchor's socket carries: a call's code can have the anchor relay what it wrote, so each
# of these ends that one session (lost, its call ended, its waiters told) and raises nothing.
HOSTILE = {
    "not-numbers": b"X 101 0 abc def ghi\n",
    "wrong-count": b"X 101 0 1\n",
    "unknown-tag": b"Q 1 2 3\n",
    "binary": bytes(range(256)) + b"\n",
    "said-not-0-or-1": b"P 7 0 0 -\n",
    "second-pid": b"S 101\nS 102\n",
    "too-long-unfinished": b"x" * 5000,
    "too-long-line": b"E " + b"y" * 5000 + b"\n",
    "flood-unasked": b"V 1 0 0 -\n" * 100,
}


@pytest.mark.parametrize("sent", HOSTILE.values(), ids=HOSTILE.keys())
async def test_anything_but_the_wire_from_the_anchor_ends_that_session_and_raises_nothing(
    anchor_socket: tuple[SessionKeeper, socket.socket], held: list[int], sent: bytes
) -> None:
    keeper, anchor = anchor_socket
    first = await keeper.call()
    _received(anchor, held)
    keeper._received(sent)
    assert keeper.lost is not None
    assert first.report is not None  # its call is over, with the session
    with pytest.raises(SessionLost):
        await keeper.keepable()
    first.close_all()


async def test_the_reader_of_an_anchor_that_sends_garbage_ends_quietly_and_says_why(
    anchor_socket: tuple[SessionKeeper, socket.socket],
) -> None:
    keeper, anchor = anchor_socket
    anchor.sendall(b"X 1 0 abc def ghi\n")
    with anyio.fail_after(10):
        await keeper._read()  # returns: it never raises into the task group it runs in
    assert keeper.lost is not None
    assert "not its wire" in keeper.lost
    assert anchor.recv(10) == b""  # its end was shut: a real anchor ends the session on that


async def test_an_armed_call_that_died_waiting_is_rolled_back_and_what_the_session_holds_after_is_kept(
    anchor_socket: tuple[SessionKeeper, socket.socket], held: list[int]
) -> None:
    # Found by a review: that roll-back's V was dropped, and what the session's /dev/shm held after it
    # counted nowhere (`Sessions` ends a session it puts past the budget).
    keeper, anchor = anchor_socket
    (await keeper.call()).close_all()
    keeper._received(b"S 101\n")
    keeper.give_verdict(True, arm=True)
    _received(anchor, held)
    _received(anchor, held)
    os.close(held.pop())  # the armed call's job socket, the anchor's end: that call is gone
    keeper._received(b"X 101 0 0.25 0.0 2048\n")
    keeper._received(b"P 0 0 0 its code did not run to its end\nV 0 0 61440 -\n")
    assert keeper.rolled_back is None
    again = await keeper.call()
    assert keeper.rolled_back is not None
    assert keeper.rolled_back.held_bytes == 60 << 20
    again.close_all()


async def test_a_calls_pid_said_by_the_anchor_is_not_taken_for_a_host_pid(
    anchor_socket: tuple[SessionKeeper, socket.socket], held: list[int]
) -> None:
    """Its pid is the session's PID namespace's: `interpreter_pid` names a host pid wherever it is read
    (/proc/PID: another process). Found by looking: the anchor's pid was put in both."""
    keeper, anchor = anchor_socket
    call = await keeper.call()
    _received(anchor, held)
    keeper._received(b"S 7\n")
    assert (call.pid, call.interpreter_pid) == (7, 0)
    call.close_all()


async def test_a_start_cancelled_before_the_anchor_said_ready_leaves_no_reader_on_its_fd() -> None:
    # Found by a review: a `session: "new"` call cancelled while its session started left the keeper's
    # reader waiting on the anchor's fd, which was then closed; the next pipe of that number (a pooled
    # interpreter's) failed "another task is already reading", and that ended the whole server.
    primer, primed = socket.socketpair()
    primed.send(b"x")
    await anyio.wait_readable(primer)  # the task's fd waits are shared by the tasks it starts, as the server's
    ours, theirs = socket.socketpair()
    anchor = Child(pid=0, workdir=None, stdin=-1, stdout=-1, stderr=-1, code=ours.fileno())
    async with anyio.create_task_group() as tg:
        with anyio.move_on_after(0.05):
            await SessionKeeper.start(anchor, tg)  # the stand-in never says it is ready
        fd = ours.fileno()
        ours.close()
        again, other = socket.socketpair()
        try:
            assert again.fileno() == fd, "the next socket takes the closed fd's number"
            other.send(b"y")
            with anyio.fail_after(5):
                await anyio.wait_readable(again)
        finally:
            for each in (again, other, theirs, primer, primed):
                each.close()
