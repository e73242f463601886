"""The server's event loop: asyncio's, which polls for a moment before it sleeps where a run's tool call
has earned it.

A brokered tool call crosses three processes (the run, the server, the downstream server) where a direct
client's call crosses two, and on a virtual machine each hand-over to a process whose CPU has gone idle
costs a wake of that CPU (some 35-40 us each here: `docs/performance.md`). So each call a run makes
grants the loop some polling (`RunPolling`): a call sent downstream two spins, to be spent while the
server waits for its answer, and an answer to a run that calls tool after tool one spin, for its next
call. At a sleep, the loop polls its fds (`epoll_wait` with a timeout of 0) for up to one spin of what
it was granted (RUNNER_TOOLS_SPIN_US), and sleeps as before once that is spent, so the polling a call
costs is bounded however long it lasts and whatever else wakes the loop meanwhile.

The poll is for idle CPUs only. It never yields the CPU: on a CPU another process wants, a yield hands
it over for that process's whole time slice, and an event that comes meanwhile waits for it (a review:
milliseconds late, with two CPU-bound processes beside the server). It does not start while more
processes could run than there are CPUs (/proc/loadavg), and a poll that finds itself preempted (a gap
between two polls) stops, and none starts for CALM after: a poll preempted leaves the loop runnable
but not running, where a sleeping one would be woken at once. And a server with fewer than two CPUs to
run on never polls: there its poll could only hold back the very processes it waits for
(`backend_options`). A server without code mode makes the stock loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import selectors
import time
from collections.abc import Callable

# At most this many spins granted and not yet spent: calls of many runs at once do not bank more.
MOST_SPINS = 4
# A poll that follows the one before by more than this was preempted: its CPU is someone else's too.
PREEMPTED = 0.000_05
# No poll for this long after one was preempted: a CPU another process wants now will likely be wanted
# again, and a poll preempted there leaves the loop runnable but not running, an event waiting behind
# the other process's time slice (a sleeping loop is woken at once).
CALM = 0.1
# How long a count of the processes that could run (`_PollingSelector._crowded`) is taken as still true.
CROWD_SECONDS = 0.001
# Spins granted a call sent downstream: the server waits for its answer after its own part of the call.
FORWARD_SPINS = 2


class _PollingSelector(selectors.EpollSelector):
    """The loop's selector: an epoll whose wait first polls, for what `budget` holds (at most a `spin`)."""

    def __init__(self, spin: float) -> None:
        super().__init__()
        self.spin = spin
        self.budget = 0.0  # seconds of polling granted and not yet spent
        self.calm = 0.0  # no poll before this (the loop's clock): the last one was preempted
        self._cpus = os.cpu_count() or 1
        self._counted, self._was_crowded = -math.inf, False
        try:
            self._loadavg = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._loadavg = -1  # no procfs: only a poll that finds itself preempted tells

    def _crowded(self, now: float) -> bool:
        """Whether more processes could run than there are CPUs (/proc/loadavg's fourth field), as seen
        at most CROWD_SECONDS ago (a reading costs some 2-5 us): one waits, and a poll would take a CPU
        it wants."""
        if now - self._counted < CROWD_SECONDS:
            return self._was_crowded
        running = 0
        if self._loadavg >= 0:
            with contextlib.suppress(OSError, ValueError, IndexError):
                running = int(os.pread(self._loadavg, 128, 0).split()[3].partition(b"/")[0])
        self._counted, self._was_crowded = now, running > self._cpus
        return self._was_crowded

    def close(self) -> None:
        if self._loadavg >= 0:
            os.close(self._loadavg)
            self._loadavg = -1
        super().close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if self.budget <= 0 or (timeout is not None and timeout <= 0):
            return super().select(timeout)
        start = last = time.monotonic()
        if start < self.calm or self._crowded(start):
            return super().select(timeout)
        end = start + min(self.budget, self.spin, math.inf if timeout is None else timeout)
        while True:
            ready = super().select(0)
            now = time.monotonic()
            if ready or now >= end:
                break
            if now - last > PREEMPTED:  # its CPU is wanted: an event would wait for another's time slice
                self.calm = now + CALM
                break
            last = now
        self.budget = max(0.0, self.budget - (now - start))
        if ready:
            return ready
        return super().select(None if timeout is None else max(0.0, timeout - (now - start)))


class PollingLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop on a `_PollingSelector`, granted its polling by `grant`."""

    def __init__(self, spin: float) -> None:
        self._polling = _PollingSelector(spin)
        super().__init__(self._polling)

    @property
    def spin(self) -> float:
        return self._polling.spin

    def grant(self, spins: float) -> None:
        """Let the loop poll for `spins` spins more at its next sleeps (at most MOST_SPINS banked)."""
        polling = self._polling
        polling.budget = min(polling.budget + spins * polling.spin, MOST_SPINS * polling.spin)


class RunPolling:
    """What one run's tool calls grant the server's loop (a `PollingLoop`; any other loop is left as it
    is): FORWARD_SPINS for each call sent downstream, and one spin after an answer when the run's last
    call came within a spin of the answer before it (it calls tool after tool; a run that does work
    between calls would have the loop poll for nothing, some 130 us a call)."""

    __slots__ = ("_answered", "_chaining", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop if isinstance(loop, PollingLoop) else None
        self._answered = -math.inf
        self._chaining = False

    def taken(self) -> None:
        """A call frame of the run's came."""
        if self._loop is not None:
            self._chaining = self._loop.time() - self._answered <= self._loop.spin

    def forwarding(self) -> None:
        """A call goes downstream: its answer is on its way back."""
        if self._loop is not None:
            self._loop.grant(FORWARD_SPINS)

    def answered(self) -> None:
        """The run was answered: its next call may be a few tens of microseconds away."""
        if self._loop is not None:
            self._answered = self._loop.time()
            if self._chaining:
                self._loop.grant(1)


def usable_cpus() -> float:
    """The CPUs this process may run on: its affinity, within its cgroup's CPU quota (v2's cpu.max)."""
    cpus = float(len(os.sched_getaffinity(0)))
    try:
        with open("/proc/self/cgroup", encoding="ascii") as file:
            path = next((line[3:].strip() for line in file if line.startswith("0::")), None)
        if path is not None:
            with open(f"/sys/fs/cgroup{path}/cpu.max", encoding="ascii") as file:
                quota, period = file.read().split()
            if quota != "max":
                cpus = min(cpus, int(quota) / int(period))
    except (OSError, ValueError):
        pass  # no cgroup v2, or no CPU controller there: the affinity alone
    return cpus


def backend_options(spin_us: int, cpus: float | None = None) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """`anyio.run`'s backend options for a server whose loop polls for up to `spin_us` microseconds a
    sleep where a tool call granted it: a `PollingLoop`'s factory; none (the stock loop) for 0, or
    with fewer than two `cpus` to run on (`usable_cpus`)."""
    if spin_us <= 0 or (usable_cpus() if cpus is None else cpus) < 2:
        return {}
    spin = spin_us / 1_000_000
    return {"loop_factory": lambda: PollingLoop(spin)}
