"""Readers of /proc (Linux) for a server's pid and the processes under it: VmRSS and VmHWM, PSS,
resetting the peak, CPU time of a process and of its whole tree, children and descendants, the
command name. A process may be gone by the time it is read: the readers then give an empty or
zero answer rather than fail.
"""

from __future__ import annotations

import contextlib
import os

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (bytes) of a process; empty if it is gone."""
    values: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith((b"VmRSS:", b"VmHWM:")):
                    name, value = line.split(b":", 1)
                    values[name.decode()] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return values


def stat_cpu(pid: int) -> tuple[float, float]:
    """(own utime+stime, reaped children's cutime+cstime) of a process, in seconds; zeros if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    # fields[0] is field 3 (state); utime, stime, cutime, cstime are fields 14-17.
    own = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    children = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
    return own, children


def machine_busy() -> float:
    """CPU seconds every core of the machine has spent running something since boot: user, nice,
    system, irq and softirq time. Not idle or I/O wait; not steal (the hypervisor running someone
    else); not guest time, which user time already holds."""
    with open("/proc/stat", "rb") as stat:
        user, nice, system, _idle, _iowait, irq, softirq = (int(n) for n in stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / CLOCK_TICKS


def proc_pss(pid: int) -> int | None:
    """Proportional set size in bytes (shared pages divided among their users), if readable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (clear_refs 5, Linux >= 4.0; needs owner or root)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as clear:
            clear.write("5")
        return True
    except OSError:
        return False


def children_of(pid: int) -> list[int]:
    """Direct children of a process (Linux)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as children:
                found += [int(kid) for kid in children.read().split()]
    return found


def tree_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds so far of a server (own) and of everything under it (children).

    Children: the server's reaped children (cutime+cstime) plus, for every live descendant, its own
    and its reaped children's time. A difference of two readings is the tree's CPU in between, also
    where runs are reaped by a descendant (a fork server's zygote) rather than by the server.
    """
    own, reaped = stat_cpu(pid)
    below = reaped
    for kid in descendants(pid):
        kid_own, kid_reaped = stat_cpu(kid)
        below += kid_own + kid_reaped
    return own, below


def descendants(pid: int) -> list[int]:
    """Every live descendant of a process."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as children:
                    kids = [int(kid) for kid in children.read().split()]
            except OSError:
                continue
            found += kids
            frontier += kids
    return found


def comm(pid: int) -> str:
    """The process's command name."""
    try:
        with open(f"/proc/{pid}/comm") as name:
            return name.read().strip()
    except OSError:
        return "?"


def proc_cmdline(pid: int) -> str:
    """The command line of `pid`, its arguments joined by spaces; '' if it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def run_nanoseconds(pid: int) -> int:
    """CPU time a process's threads have run so far, in nanoseconds (/proc/PID/task/*/schedstat); 0 if
    it is gone."""
    total = 0
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{task}/schedstat", "rb") as stat:
                total += int(stat.read().split()[0])
    return total


def tree_run_nanoseconds(pid: int) -> dict[int, int]:
    """`run_nanoseconds` of a process and of each of its descendants, by pid."""
    return {member: run_nanoseconds(member) for member in [pid, *descendants(pid)]}
