"""What /proc tells of a process tree, and a tree stopped whole (`runner.processes.procctl`), on real
processes the test starts and kills."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from runner.processes import procctl


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()[0].decode()


def _stops(pid: int) -> bool:
    """Whether `pid` is stopped within a deadline (a SIGSTOP takes effect as the process next runs)."""
    deadline = time.monotonic() + 10
    while _state(pid) != "T":
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def _sent_a_stop(pid: int) -> bool:
    """Whether `pid` is stopped or has a SIGSTOP pending (sent, not yet taken)."""
    with open(f"/proc/{pid}/status") as status:
        pending = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return _state(pid) == "T" or any(mask & (1 << (signal.SIGSTOP - 1)) for mask in pending)


def _children_when_there(pid: int, count: int) -> list[int]:
    """`pid`'s children once it has `count` of them (within a deadline)."""
    deadline = time.monotonic() + 10
    while len(found := procctl.children(pid)) < count:
        assert time.monotonic() < deadline, "the children never came"
        time.sleep(0.01)
    return found


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts, killed (their groups too) and reaped after it."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.kill()
        process.wait(timeout=10)


def test_a_tree_is_stopped_whole_its_children_each_before_theirs_are_read(
    started: list[subprocess.Popen[bytes]],
) -> None:
    tree = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    started.append(tree)
    kids = _children_when_there(tree.pid, 2)
    stopped = procctl.stopped_tree(tree.pid)
    assert sorted(stopped) == sorted([tree.pid, *kids])
    assert all(_stops(pid) for pid in stopped)


def test_a_pid_read_as_a_child_that_is_another_process_now_is_not_stopped(
    started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A child read from its parent's list that exited and was reaped before it was signalled (its
    # parent still running for a moment after SIGSTOP was sent) left its pid free for any process of the
    # host's (found by a review): here, a process of the test's stands for that one.
    tree = subprocess.Popen(["sleep", "60"], start_new_session=True)
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    started += [tree, other]
    listed = procctl.children
    monkeypatch.setattr(procctl, "children", lambda pid: [other.pid] if pid == tree.pid else listed(pid))
    assert procctl.stopped_tree(tree.pid) == [tree.pid]
    assert _stops(tree.pid)
    assert not _sent_a_stop(other.pid)


def test_the_parent_of_a_process_is_read_and_none_once_it_is_gone(started: list[subprocess.Popen[bytes]]) -> None:
    process = subprocess.Popen(["sleep", "60"])
    started.append(process)
    assert procctl.parent_of(process.pid) == os.getpid()
    process.kill()
    process.wait(timeout=10)
    assert procctl.parent_of(process.pid) is None
