"""A session's processes as its anchor sees them (`anchor`): walked, killed, measured, from /proc (a
sandboxed run's shows its own PID namespace). Standard library only.

The anchor is a child subreaper: whatever a process of the session leaves as it dies comes to it, so
every process of the session is under it, and a sweep (`sweep_tree`) that walks the whole tree, each
thread's children included, until nothing but what it spares is left, leaves nothing behind however
deep or quick its forks are (RLIMIT_NPROC bounds how many there can be at once).
"""

from __future__ import annotations

import os
import signal
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# How long a sweep goes on killing what a call left before it gives up (the session then ends).
SWEEP_SECONDS = 2.0
# The CPU time an idle session's keeper and the call it forked ahead may use (`idle_fault`): both only
# wait (a keeper made of a call that forged its candidate would run that call's code, and hand it on
# to fresh forks).
IDLE_CPU_SECONDS = 2.0


def sweep_tree(spare: set[int], reap: Callable[[], None]) -> bool:
    """Kill every process under this one but those in `spare` (not what is under them: only the
    spared themselves), until none is left; `reap` reaps this process's own children. False if some
    were still there after SWEEP_SECONDS. Zombies are no process here: they hold nothing but a pid,
    and are their parent's to reap."""
    deadline = time.monotonic() + SWEEP_SECONDS
    while True:
        reap()
        left = [pid for pid in descendants(os.getpid()) if pid not in spare]
        if not left:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in left:
            kill(pid)
        time.sleep(0.0005)


def descendants(root: int) -> list[int]:
    """Every live process under `root`, zombies left out (a zombie has no children: they went to the
    subreaper as it died)."""
    found: list[int] = []
    todo = children(root)
    while todo:
        pid = todo.pop()
        if state(pid) not in (b"Z", b"X", b""):
            found.append(pid)
            todo.extend(children(pid))
    return found


def children(pid: int | str) -> list[int]:
    """The children of `pid` ("self": this process's), of each of its threads: a child is listed under
    the thread that made it."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as listing:
                found.extend(int(child) for child in listing.read().split())
        except (OSError, ValueError):
            continue
    return found


def _stat(pid: int) -> list[bytes]:
    """/proc/PID/stat's fields after the name (comm may hold spaces and parentheses: the fields are
    counted from its last ")"), or none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()
    except OSError:
        return []


def state(pid: int) -> bytes:
    """`pid`'s state (R, S, D, T, t, Z, ...), or b'' if it is gone."""
    fields = _stat(pid)
    return fields[0][:1] if fields else b""


def parent(pid: int) -> int:
    """The parent of `pid` (0 if it cannot be read)."""
    try:
        return int(_stat(pid)[1])
    except (ValueError, IndexError):
        return 0


def cpu_seconds(pid: int) -> float:
    """The CPU time `pid` has used, user and system (0 if it is gone)."""
    try:
        fields = _stat(pid)
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (ValueError, IndexError):
        return 0.0


def anonymous_kb(pid: int) -> int:
    """The anonymous resident memory of `pid` in KiB (/proc/PID/statm: readable for a process that
    is not dumpable, and read in microseconds, where smaps_rollup takes a millisecond per 200 MB)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            fields = statm.read().split()
        return (int(fields[1]) - int(fields[2])) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, ValueError, IndexError):
        return 0


def tmpfs_kb(paths: tuple[str, ...]) -> int:
    """What the tmpfs mounts at `paths` hold, in KiB: memory, outside every process's."""
    held = 0
    for path in paths:
        try:
            usage = os.statvfs(path)
        except OSError:
            continue
        held += (usage.f_blocks - usage.f_bfree) * usage.f_frsize // 1024
    return held


def kill(pid: int) -> None:
    try:  # noqa: SIM105  (contextlib is not imported in runs)
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def idle_fault(waiting: tuple[int, int], dying: set[int], cpu_before: float) -> str:
    """Why an idle session must end, or '': between calls nothing of it runs but the anchor, and the
    keeper and the call it forked ahead (`waiting`), which wait. No other process may be there (but
    those killed already, `dying`): only a keeper made of a call that forged its candidate forks then
    (found by a review: it ran 16.6 s of CPU in 17 past a limit of 5, handing over to fresh forks).
    Nor may those two run (beyond what they had used, `cpu_before`, and IDLE_CPU_SECONDS) or be
    stopped. The session's end kills them all."""
    if [pid for pid in descendants(os.getpid()) if pid not in waiting and pid not in dying]:
        return "a process of it ran while it was idle"
    if sum(cpu_seconds(pid) for pid in waiting) > cpu_before + IDLE_CPU_SECONDS:
        return "its keeper ran while the session was idle"
    if any(state(pid) in (b"T", b"t") for pid in waiting):
        return "its keeper was stopped"
    return ""
