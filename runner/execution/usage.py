"""A run's CPU time and peak memory where `wait4` cannot tell: sampled from /proc while it runs.

wait4's ru_maxrss cannot be trusted on its own: posix_spawn starts the child in the server's address
space (vfork), and the kernel carries that address space's high-water mark across exec, so every run
would report at least the server's own size. VmHWM belongs to the run's own address space. A run
whose peak tops that size is measured exactly by wait4 instead. In a bwrap sandbox wait4 sees no CPU
time at all (bwrap does not reap its namespace's init), so the interpreter's own counters are sampled
too. A forked run needs neither: it has its own address space from the fork on (its peak counts the
zygote's pages it shares, as VmHWM would), and the zygote's wait4 reports both exactly.
"""

from __future__ import annotations

import os

import anyio

from runner.processes.child import Child

SAMPLE_INTERVAL = 0.01
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class UsageSamples:
    """The highest VmHWM seen and (in a sandbox) the latest CPU seconds of one run's interpreter."""

    def __init__(self, child: Child) -> None:
        self._child = child
        self.peak: int | None = None
        self.cpu = 0.0

    @staticmethod
    def needed(child: Child) -> bool:
        """Whether wait4 alone would get this run's numbers wrong."""
        return child.wrapped or child.inherited_peak > 0

    def take(self) -> bool:
        """Record the run's current VmHWM (and in a sandbox its CPU seconds); False once it is gone.

        Gone: exited, a zombie, or no procfs. Outside a sandbox wait4 reports the CPU time exactly,
        so /proc/PID/stat is read only in one.
        """
        pid = self._child.interpreter_pid
        try:
            if self._child.wrapped:
                with open(f"/proc/{pid}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
                # utime, stime, cutime, cstime are fields 14-17 of stat; fields[0] here is field 3.
                self.cpu = sum(int(tick) for tick in fields[11:15]) / CLOCK_TICKS
            with open(f"/proc/{pid}/status", "rb") as status:
                hwm = next((line for line in status if line.startswith(b"VmHWM:")), None)
        except (OSError, IndexError):
            return False
        if hwm is None:
            return False  # a zombie: its address space is gone
        self.peak = max(int(hwm.split()[1]) * 1024, self.peak or 0)
        return True


async def wait_exit_sampling(child: Child, samples: UsageSamples | None, deadline: float) -> bool:
    """Wait for the run to exit, sampling its usage every interval if given samples; False at the deadline.

    Sampling here rather than in a task of its own saves a task per run: a run that ends within
    the first interval costs one timer and no sample.
    """
    sampling = samples is not None
    while True:
        remaining = deadline - anyio.current_time()
        if remaining <= 0:
            return False
        with anyio.move_on_after(min(SAMPLE_INTERVAL, remaining) if sampling else remaining) as waiting:
            await child.wait_exit()
        if not waiting.cancelled_caught:
            return True
        if samples is not None and sampling:
            sampling = samples.take()  # False once there is nothing left to sample
