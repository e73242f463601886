"""The anchor's idle session (runner/inrun/anchor.py), driven step by step: its keeper's channel a
socket pair, the processes it looks at the test's."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import types
from collections.abc import Iterator

import pytest

from runner.inrun import bootstrap
from tests.helpers import settled

(anchor,) = bootstrap.load_siblings("anchor")
sweeps = anchor.sweeps  # the anchor's own: what a test replaces in it is what it calls


class Ended(Exception):
    """The anchor ended the session (it exits in a run)."""


@pytest.fixture
def idle(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[types.SimpleNamespace, socket.socket, socket.socket]]:
    """An anchor idle after a verdict, its A taken: the anchor, the keeper's end of its channel, and
    the server's end of its control socket."""

    def end() -> None:
        raise Ended

    monkeypatch.setattr(anchor, "_end_session", end)
    ours, keeper = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    control, server = socket.socketpair()
    wake_r, wake_w = os.pipe()
    held = object.__new__(anchor.Anchor)
    held.control, held.buffer, held.call, held.keeper_channel, held.wake = control, b"", None, ours, wake_r
    held.tmpfs = ()
    held.keeper, held.ready, held.awaiting, held.idle, held.next_check, held.tally = (
        0,
        0,
        False,
        sweeps.IdleMark(),
        0.0,
        sweeps.Tally(),
    )
    yield held, keeper, server
    for closing in (ours, keeper, control, server):
        closing.close()
    os.close(wake_r)
    os.close(wake_w)


def test_anything_the_keeper_says_while_the_session_is_idle_ends_the_session(
    idle: tuple[types.SimpleNamespace, socket.socket, socket.socket],
) -> None:
    # Found by a review: a forged keeper flooded its channel after its A, unread messages skipped the
    # idle check, and its processes ran on while the session idled.
    held, keeper, server = idle
    keeper.send(b"z")
    with pytest.raises(Ended):
        held.step(None)
    assert server.recv(4096) == b"E its keeper spoke while the session was idle\n"


def test_the_idle_check_ends_the_session_even_while_the_keepers_channel_has_something_unread(
    idle: tuple[types.SimpleNamespace, socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    held, keeper, server = idle
    looked = anchor.idle_fault

    def flooded(*args: object) -> str:  # the flood goes on while the anchor looks at its processes
        keeper.send(b"z")
        return str(looked(*args))

    monkeypatch.setattr(anchor, "idle_fault", flooded)
    left = subprocess.Popen(["sleep", "30"])  # a process but the keeper and its next call
    try:
        with pytest.raises(Ended):
            held.step(None)
    finally:
        left.kill()
        left.wait()
    assert server.recv(4096) == b"E a process of it ran while it was idle\n"


def test_one_wait_of_the_anchor_takes_a_bounded_number_of_the_keepers_messages(
    idle: tuple[types.SimpleNamespace, socket.socket, socket.socket],
) -> None:
    held, keeper, _ = idle
    held.awaiting = True  # its A awaited: what else the keeper says is not read as anything
    sent = 0
    for _ in range(anchor.MAX_DRAIN + 4):
        try:
            keeper.send(b"z", socket.MSG_DONTWAIT)
            sent += 1
        except BlockingIOError:
            break
    assert sent > anchor.MAX_DRAIN, "the channel's queue holds fewer messages than one wait takes"
    held.step(0.0)
    assert anchor._readable_now(held.keeper_channel)


def test_the_anchors_cpu_limit_is_the_runs_and_room_for_its_own_work_under_the_hard_limit_it_inherited() -> None:
    infinite = resource.RLIM_INFINITY
    room = anchor.ANCHOR_CPU_SECONDS
    # An hour of CPU: thousands of times what its idle checks of a 4-hour session cost.
    assert room >= 3600
    assert anchor.anchor_cpu_limits(1, infinite) == (1 + room, 2 + room)
    assert anchor.anchor_cpu_limits(1, 100) == (100, 100)  # a hard limit cannot be raised
    assert anchor.anchor_cpu_limits(infinite, infinite) == (infinite, infinite)


# A keeper just kept, waited for until it says its A (`_await_ready`): played by a process of the
# test's, whose children are what it forks.
KEEPERS = {
    "one-child": "import os, time\nif os.fork() == 0:\n    time.sleep(60)\ntime.sleep(60)",
    "two-children": "import os, time\nfor _ in 'ab':\n    if os.fork() == 0:\n        time.sleep(60)\ntime.sleep(60)",
    "burning": "while True:\n    pass",
}


@pytest.fixture
def waking(
    idle: tuple[types.SimpleNamespace, socket.socket, socket.socket], request: pytest.FixtureRequest
) -> Iterator[tuple[types.SimpleNamespace, socket.socket, socket.socket, list[int]]]:
    """`idle`, its keeper the process of KEEPERS[request.param], its children there, its A awaited."""
    held, keeper, server = idle
    process = subprocess.Popen([sys.executable, "-c", KEEPERS[request.param]])
    wanted = {"one-child": 1, "two-children": 2}.get(request.param, 0)
    forked = settled(lambda: [] if len(sweeps.children(process.pid)) == wanted else ["not yet"])
    assert forked == [], sweeps.children(process.pid)
    held.keeper = process.pid
    try:
        yield held, keeper, server, sweeps.children(process.pid)
    finally:
        for pid in sweeps.children(process.pid):
            os.kill(pid, 9)
        process.kill()
        process.wait()


@pytest.mark.parametrize("waking", ["one-child"], indirect=True)
def test_a_keeper_that_forks_its_next_call_and_waits_is_not_ended_however_late_its_a_comes(
    waking: tuple[types.SimpleNamespace, socket.socket, socket.socket, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    held, keeper, _, (ready,) = waking
    looked = sweeps.waking_fault
    looks = []

    def late(*args: object) -> str:  # its A comes after the anchor has looked three times
        looks.append(looked(*args))  # type: ignore[arg-type]
        if len(looks) == 3:
            keeper.send(b"A %d" % ready)
        return looks[-1]

    monkeypatch.setattr(sweeps, "waking_fault", late)
    anchor._await_ready(held)
    assert (held.ready, looks) == (ready, ["", "", ""])


@pytest.mark.parametrize(
    ("waking", "said"),
    [
        ("two-children", b"E a process of it ran before its keeper was ready\n"),
        ("burning", b"E its keeper ran before it was ready\n"),
    ],
    indirect=["waking"],
)
def test_a_keeper_that_does_more_than_fork_its_next_call_before_its_a_ends_the_session(
    waking: tuple[types.SimpleNamespace, socket.socket, socket.socket, list[int]], said: bytes
) -> None:
    # Found by a review: a keeper forged by a call's channel says no A, and ran its code (and forks of
    # it) until the anchor's wait for that A ended, 10 s on.
    held, _, server, _ = waking
    with pytest.raises(Ended):  # before: the wait ended without a word, 10 s on
        anchor._await_ready(held)
    assert server.recv(4096) == said
