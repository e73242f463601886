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
# While the anchor waits for a keeper just kept (or told to fork again) to say its A: how often it looks
# at the session's processes, and the CPU time that keeper and the one call it forks ahead may use from
# its first look on (`waking_fault`). A real keeper needs a fork and the ready call's warm-up (its
# directory walked: milliseconds); a forged one (a call's own child named as its candidate) ran the
# call's code until the wait's 10 s ended.
WAKING_CHECK_SECONDS = 0.1
WAKING_CPU_SECONDS = 0.5


def sweep_tree(spare: set[int], reap: Callable[[], None], parent: int = 0, tally: Tally | None = None) -> bool:
    """Kill every process under this one but those in `spare` (not what is under them: only the
    spared themselves) and the children of `parent` (a keeper that may be forking its next call as
    this looks), until none is left; `reap` reaps this process's own children. False if some
    were still there after SWEEP_SECONDS. Zombies are no process here: they hold nothing but a pid,
    and are their parent's to reap. What it kills is counted as dying in `tally`, if given."""
    deadline = time.monotonic() + SWEEP_SECONDS
    ours = b"%d" % parent
    while True:
        reap()
        found = _descendants_stat(os.getpid())
        left = [pid for pid, fields in found.items() if pid not in spare and not (parent and fields[1] == ours)]
        if not left:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in left:
            if tally is not None:
                tally.kill(pid, found[pid])
            else:
                kill(pid)
        time.sleep(0.0005)


def kill_below() -> None:
    """SIGKILL every process under this one, and those that come under it as others die (it is their
    subreaper), until none is left that was not sent one, SWEEP_SECONDS at most. Not waited for: a
    killed process runs no more code, and its teardown (gigabytes of a state's memory) may take a second
    (found by a second look: close_session waited for it, 1 s for a state of 2 GB)."""
    killed: set[int] = set()
    deadline = time.monotonic() + SWEEP_SECONDS
    while time.monotonic() < deadline:
        reap_any()
        left = [pid for pid in _descendants_stat(os.getpid()) if pid not in killed]
        if not left:
            return
        for pid in left:
            kill(pid)
        killed.update(left)
        time.sleep(0.0005)


def reap_any() -> None:
    """Reap every child of this process that has ended, waiting for none."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _descendants_stat(root: int) -> dict[int, list[bytes]]:
    """Every live process under `root`, zombies left out (a zombie has no children: they went to the
    subreaper as it died), each with its stat fields (`_stat`): read once, however many questions."""
    found: dict[int, list[bytes]] = {}
    todo = children(root)
    while todo:
        pid = todo.pop()
        fields = _stat(pid)
        if fields and fields[0][:1] not in (b"Z", b"X"):
            found[pid] = fields
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
            found.extend(int(child) for child in _read(f"/proc/{pid}/task/{task}/children").split())
        except (OSError, ValueError):
            continue
    return found


def _read(path: str) -> bytes:
    """The whole of a small file of /proc, read without a file object (the idle check reads several
    each second: found by a review, its CPU added up against the anchor's limit)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = [os.read(fd, 4096)]
        while chunks[-1]:
            chunks.append(os.read(fd, 65536))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _stat(pid: int) -> list[bytes]:
    """/proc/PID/stat's fields after the name (comm may hold spaces and parentheses: the fields are
    counted from its last ")"), or none."""
    try:
        return _read(f"/proc/{pid}/stat").rpartition(b")")[2].split()
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
    return _cpu(_stat(pid))


def _cpu(fields: list[bytes], reaped: bool = False) -> float:
    """The CPU time, user and system, of a process whose stat fields are `fields` (0 for none); or,
    `reaped`, that of the children it reaped."""
    first = 13 if reaped else 11
    try:
        return (int(fields[first]) + int(fields[first + 1])) / os.sysconf("SC_CLK_TCK")
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


class Tally:
    """What the anchor knows of the session's CPU time beyond a walk of its processes (`session_cpu`):
    the processes it killed (`dying`, each by pid: its start time, its parent, its CPU last seen) and
    what those used in all (`excused`). A killed process runs none of the session's code, but its
    teardown can take seconds of system CPU (a state of gigabytes), which is no fault of the session's
    (found by a review: a rolled-back 10 GB state's candidate, reaped by its keeper, ended the session
    as a keeper that "ran before it was ready")."""

    __slots__ = ("dying", "excused")

    def __init__(self) -> None:
        self.dying: dict[int, tuple[bytes, bytes, float]] = {}
        self.excused = 0.0

    def kill(self, pid: int, fields: list[bytes] | None = None) -> None:
        """Kill `pid` (its stat `fields`, if read already), and count it as dying from now on."""
        fields = fields if fields is not None else _stat(pid)
        if len(fields) > 19 and pid not in self.dying:
            self.dying[pid] = (fields[19], fields[1], _cpu(fields) + _cpu(fields, reaped=True))
        kill(pid)

    def look(self, stats: dict[int, list[bytes]]) -> None:
        """Note what each dying process has used by now (`stats`: every process of the session, zombies
        too); one gone since the last look was reaped by its parent: what it used then is excused (what
        it used after, at most a look's interval of it, counts), unless that parent is dying too (its
        own end is excused with it)."""
        for pid, (start, ppid, used) in list(self.dying.items()):
            fields = stats.get(pid, [])
            if len(fields) > 19 and fields[19] == start:
                self.dying[pid] = (start, fields[1], _cpu(fields) + _cpu(fields, reaped=True))
                continue
            del self.dying[pid]
            if int(ppid) not in self.dying:
                self.excused += used

    def reaped(self) -> list[tuple[int, bytes]]:
        """Every child of this process that ended, reaped now, each with its X line; a dying one's
        CPU, its own and its reaped children's (what goes into this process's), excused."""
        ended: list[tuple[int, bytes]] = []
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return ended
            if pid == 0:
                return ended
            if self.dying.pop(pid, None) is not None:  # a zombie holds its pid: the one killed
                self.excused += usage.ru_utime + usage.ru_stime
            ended.append((pid, b"X %d %d %r %r %d" % (pid, status, usage.ru_utime, usage.ru_stime, usage.ru_maxrss)))


# SIGCHLD's bit in /proc/PID/status's signal masks: a process that ignores it (or whose handler says
# SA_NOCLDWAIT) has its children reaped by the kernel, and their CPU reaches no one's count.
_SIGCHLD_BIT = 1 << (signal.SIGCHLD - 1)


def _ignores_sigchld(pid: int) -> bool:
    """Whether `pid` ignores SIGCHLD (not if it is gone; as if it did where its mask cannot be read). A
    keeper and its calls leave it as it is by default (`keeper._quiet_signals`). Not whether it catches
    it: a handler (a call's, until its keeper resets it) has its children reaped by a wait, counted,
    unless it says SA_NOCLDWAIT, which no mask shows (`idle_fault` sees the fork instead)."""
    try:
        status = _read(f"/proc/{pid}/status")
        start = status.index(b"\nSigIgn:\t") + len(b"\nSigIgn:\t")
        return bool(int(status[start : status.index(b"\n", start)], 16) & _SIGCHLD_BIT)
    except OSError:
        return False
    except ValueError:
        return True


def session_cpu(tally: Tally) -> tuple[float, dict[int, list[bytes]], bool]:
    """The CPU time the session has used, as a whole: what this process (its anchor) reaped, and each
    process under it, its own and what it reaped (a zombie's too, until it is reaped), but the dying
    (`tally`: what they used is excused). With it, every live process under this one and its stat
    fields (zombies left out: they run nothing), and whether one that is not dying ignores
    SIGCHLD (its children's CPU would reach no count). Found by a review: counting only a keeper's and
    its next call's own, a keeper forking short-lived burners ran 13 s of CPU in 20 s while idle."""
    live: dict[int, list[bytes]] = {}
    every: dict[int, list[bytes]] = {}
    todo = children(os.getpid())
    while todo:
        pid = todo.pop()
        fields = _stat(pid)
        if fields:
            every[pid] = fields
            if fields[0][:1] not in (b"Z", b"X"):
                live[pid] = fields
                todo.extend(children(pid))
    tally.look(every)
    used = _cpu(_stat_self(), reaped=True) - tally.excused
    used += sum(_cpu(fields) + _cpu(fields, reaped=True) for pid, fields in every.items() if pid not in tally.dying)
    ignoring = any(_ignores_sigchld(pid) for pid in live if pid not in tally.dying)
    return used, live, ignoring


def _stat_self() -> list[bytes]:
    return _read("/proc/self/stat").rpartition(b")")[2].split()


class IdleMark:
    """Where a session stood as it went idle (`idle_mark`): the CPU it had used, and the last pid its
    PID namespace had given (-1 where it has none of its own)."""

    __slots__ = ("cpu", "last_pid")

    def __init__(self, cpu: float = 0.0, last_pid: int = -1) -> None:
        self.cpu, self.last_pid = cpu, last_pid


def idle_mark(tally: Tally, own_pids: bool) -> IdleMark:
    """The session as it goes idle (`idle_fault` compares): `own_pids`, whether its processes have a PID
    namespace of their own (a sandboxed run's), whose last pid given then tells any fork or thread since."""
    return IdleMark(session_cpu(tally)[0], last_pid() if own_pids else -1)


def last_pid() -> int:
    """The last pid this process's PID namespace gave (-1 where it cannot be read)."""
    try:
        return int(_read("/proc/sys/kernel/ns_last_pid"))
    except (OSError, ValueError):
        return -1


def idle_fault(waiting: tuple[int, int], tally: Tally, mark: IdleMark) -> str:
    """Why an idle session must end, or '': between calls nothing of it runs but the anchor, and the
    keeper and the call it forked ahead (`waiting`), which wait. No other process may be there (but
    those killed already, `tally.dying`): only a keeper made of a call that forged its candidate forks
    then (found by a review: it ran 16.6 s of CPU in 17 past a limit of 5, handing over to fresh forks).
    Nor may the session (`session_cpu`) use more than IDLE_CPU_SECONDS beyond `mark.cpu`, or ignore
    SIGCHLD, or those two be stopped; where the session has a PID namespace of its own, nothing in it may
    have forked since (`mark.last_pid`): a child reaped by the kernel under a handler with SA_NOCLDWAIT,
    which no /proc mask shows, used CPU no count has (found by a second look). The session's end kills
    them all."""
    if mark.last_pid >= 0 and last_pid() != mark.last_pid:
        return "a process of it was started while it was idle"
    used, stats, ignoring = session_cpu(tally)
    if [pid for pid in stats if pid not in waiting and pid not in tally.dying]:
        return "a process of it ran while it was idle"
    if used > mark.cpu + IDLE_CPU_SECONDS:
        return "its keeper ran while the session was idle"
    if ignoring:
        return "its keeper ignored SIGCHLD while the session was idle"
    if any(stats.get(pid, [b""])[0][:1] in (b"T", b"t") for pid in waiting):
        return "its keeper was stopped"
    return ""


def waking_fault(keeper: int, tally: Tally, cpu_before: float) -> str:
    """Why a session must end while its anchor waits for its keeper's A, or '': once what the last call
    left is swept, nothing of it runs but the keeper and at most one child of it (the call it forks
    ahead), but what was killed already (`tally.dying`), and the session (`session_cpu`) uses at most
    WAKING_CPU_SECONDS beyond `cpu_before`, ignores no SIGCHLD, and those two are not stopped. Found by
    a review: a keeper forged by a call's channel ran its code, and fresh forks of it, until the wait
    for its A ended (10 s); and one that ignored SIGCHLD, its children reaped by the kernel, until then
    too (9 s of CPU)."""
    used, stats, ignoring = session_cpu(tally)
    forked = children(keeper)
    if len(forked) > 1 or [pid for pid in stats if pid != keeper and pid not in forked and pid not in tally.dying]:
        return "a process of it ran before its keeper was ready"
    if used > cpu_before + WAKING_CPU_SECONDS:
        return "its keeper ran before it was ready"
    if ignoring:
        return "its keeper ignored SIGCHLD before it was ready"
    if any(stats.get(pid, [b""])[0][:1] in (b"T", b"t") for pid in (keeper, *forked)):
        return "its keeper was stopped"
    return ""


def held_kb(state: int, baseline_kb: int, entries: dict[str, tuple[object, ...]], tmpfs: tuple[str, ...]) -> int:
    """What a state would hold, in KiB, as the anchor reads it (never as the call says, which could say
    anything): the anonymous memory of its process (`state`) beyond the session's start
    (`baseline_kb`), the copy of the session's files the anchor holds (a snapshot's `entries`), and
    what the session's own tmpfs mounts hold (`tmpfs`: a sandbox's directory, /dev/shm and /run,
    memory no process's count has; found by a review: 4 sessions held 4 x 60 MiB in /dev/shm under a
    budget of 64 MiB). Files are counted as held twice: the copy the snapshot holds of them (the
    anchor's memory, for a roll-back) and what the mounts hold (found by a second look: the larger of
    the two was counted, 60 MiB for the 120 MiB four files of 15 MiB held). The directory's mount is
    read too, not only its files' copy: a file with no name a state holds open is in no snapshot
    (found by a review: three sessions held 144 MiB so under a budget of 64 MiB; such a state is no
    longer kept, `sealing.nameless_file`, and the mount's count holds whatever else gets past that)."""
    copied = 0
    for entry in entries.values():
        if entry[0] == "f" and isinstance(entry[2], bytes):
            copied += len(entry[2])
    return max(0, anonymous_kb(state) - baseline_kb) + copied // 1024 + tmpfs_kb(tmpfs)


def beside(home: str, tmpfs: tuple[str, ...]) -> tuple[str, ...]:
    """The tmpfs mounts of `tmpfs` but the one `home` is on (the snapshot takes the files there as
    the directory's): a sandboxed session's /dev/shm and /run."""
    try:
        device = os.stat(home).st_dev
    except OSError:
        device = -1
    beside = []
    for path in tmpfs:
        try:
            if os.stat(path).st_dev != device:
                beside.append(path)
        except OSError:
            continue
    return tuple(beside)
