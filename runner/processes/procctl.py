"""Linux process controls the server uses on itself: child subreaper, non-dumpable, its children;
and what /proc tells of a process tree (its proportional memory).

prctl(2) through the one libc wrapper (`runner.inrun.libc`); where there is none, these are no-ops
that say so by returning False.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal

from runner.inrun import libc
from runner.inrun.sweeps import children


def set_child_subreaper(enabled: bool) -> bool:
    """Adopt orphaned descendants (daemons that left a run's session) instead of letting init have them."""
    return libc.prctl(libc.PR_SET_CHILD_SUBREAPER, 1 if enabled else 0)


is_child_subreaper = libc.child_subreaper


def signal_on_parent_death(signal_number: int) -> bool:
    """Be sent `signal_number` when the parent (thread) that started us ends."""
    return libc.prctl(libc.PR_SET_PDEATHSIG, signal_number)


set_dumpable = libc.set_dumpable


def children_of_self() -> list[int]:
    """Our direct children, adopted orphans included (Linux; empty where /proc cannot tell)."""
    return children("self")


def stopped_tree(pid: int, most: int = 10_000) -> list[int]:
    """`pid` and the processes under it (`most` at most), each sent SIGSTOP before its children are
    read: a stopped process forks no more, so a tree killed whole after this leaves at most a child
    forked as its parent was being stopped, not a chain of setsid'd processes that rebuilds itself as
    fast as one level a round is killed (found by a review: one outlived every sweep, the server's stop
    and the next server's start, writing into later runs' directories).

    A child is stopped through a pidfd opened on it and only while it is still its parent's: one that
    exited and was reaped after its parent's children were read (its parent still running for a moment
    after SIGSTOP was sent) left its pid to any process of the host's, which a plain kill would stop."""
    found: list[int] = []
    todo: list[tuple[int, int | None]] = [(pid, None)]
    while todo and len(found) < most:
        member, parent = todo.pop()
        if not _stopped(member, parent):
            continue  # gone, or its pid another process's now
        found.append(member)
        todo.extend((child, member) for child in children(member))
    return found


def _stopped(pid: int, parent: int | None) -> bool:
    """SIGSTOP sent to `pid`, if it is still a child of `parent` (None: whoever's) once a pidfd holds it."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EPERM):
            return False  # gone
        # No pidfds here (a kernel before 5.3, or a seccomp filter that refuses them): as before them.
        if parent is not None and parent_of(pid) != parent:
            return False
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            return False
        return True
    try:
        if parent is not None and parent_of(pid) != parent:
            return False  # the pid is another process's: the pidfd holds that one, not the child
        signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
        return True
    except OSError:
        return False  # gone
    finally:
        os.close(pidfd)


def parent_of(pid: int) -> int | None:
    """The parent pid of `pid` (its /proc stat's), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def is_zombie(pid: int) -> bool:
    """True if `pid` has exited and waits to be reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def command_line(pid: int) -> str:
    """A process's command line for the log, or '?' once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200] or "?"
    except OSError:
        return "?"


def reap_if_exited(pid: int) -> None:
    """Collect a child that has exited; never waits (a child still dying is reaped by a later call)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def tree_pss_bytes(pid: int, most: int = 64) -> int:
    """The proportional set size of `pid` and of every process under it (smaps_rollup's Pss and
    SwapPss): the pages only they map in full, so a page two of them share (a keeper and the call it
    forked ahead) once, and of a page they share with others (the zygote's) their fraction. 0 for
    processes already gone; at most `most` processes are read."""
    total, todo, seen = 0, [pid], 0
    while todo and seen < most:
        current = todo.pop()
        seen += 1
        try:
            with open(f"/proc/{current}/smaps_rollup", "rb") as rollup:
                lines = rollup.read().splitlines()
        except OSError:
            continue
        for line in lines:
            name, _, rest = line.partition(b":")
            if name in (b"Pss", b"SwapPss"):
                total += int(rest.split()[0]) * 1024
        todo.extend(children(current))
    return total
