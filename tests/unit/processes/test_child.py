"""The egress listener an interpreter hands the server before its ready line, taken by `Child` only
when it is one: a listening IPv4 TCP socket sent with the listener's message."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from runner.inrun.wire import LISTENER_MESSAGE, hand_over_listener, proxy_listener
from runner.processes.child import Child


@pytest.fixture
def channel() -> Iterator[tuple[Child, socket.socket]]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    child = Child(pid=0, workdir=None, stdin=-1, stdout=-1, stderr=-1, code=ours.fileno())
    yield child, theirs
    child.close_all()
    ours.close()
    theirs.close()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_listener_handed_over_is_taken_and_closed_with_the_handle(channel: tuple[Child, socket.socket]) -> None:
    child, theirs = channel
    made = proxy_listener(0)
    hand_over_listener(made, theirs.fileno())
    os.close(made)
    child.receive_listener()
    listener = child.egress_listener
    assert listener is not None
    assert listener.getsockname()[0] == "127.0.0.1"
    child.close_all()
    assert child.egress_listener is None
    assert listener.fileno() == -1


@pytest.mark.parametrize("kind", ["connected", "udp", "no fd", "other message"])
def test_anything_else_is_refused_and_nothing_of_it_kept(channel: tuple[Child, socket.socket], kind: str) -> None:
    child, theirs = channel
    before = open_fds()
    if kind == "connected":
        a, b = socket.socketpair()
        socket.send_fds(theirs, [LISTENER_MESSAGE], [a.fileno()])
        a.close()
        b.close()
    elif kind == "udp":
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            socket.send_fds(theirs, [LISTENER_MESSAGE], [udp.fileno()])
    elif kind == "no fd":
        theirs.send(LISTENER_MESSAGE)
    else:
        with socket.socket() as tcp:
            tcp.bind(("127.0.0.1", 0))
            tcp.listen()
            socket.send_fds(theirs, [b"something-else"], [tcp.fileno()])
    with pytest.raises(OSError, match="did not hand over the egress proxy's listener"):
        child.receive_listener()
    assert child.egress_listener is None
    assert open_fds() == before


def test_nothing_sent_is_refused_without_waiting(channel: tuple[Child, socket.socket]) -> None:
    child, _ = channel
    with pytest.raises(OSError, match="did not hand over"):
        child.receive_listener()
