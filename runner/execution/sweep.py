"""The stray sweep: kill and reap whatever a run left behind and the kernel handed to the server.

The server is a child subreaper, so a run's orphans (a `setsid` daemon, a double fork) become its
children. Every child that is not an interpreter of ours is such an orphan: it is killed and reaped
soon after the run that made it ends, and once a second besides, with every process under it, each
stopped before its children are read (`stopped_tree`). The server's own helper processes
(`processes.helpers`) are known too: a round waits while one is being started, its pid not yet known.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable

import anyio

from runner.logs import log_event
from runner.processes.procctl import (
    children_of_self,
    command_line,
    is_child_subreaper,
    is_zombie,
    reap_if_exited,
    set_child_subreaper,
    stopped_tree,
)

SWEEP_INTERVAL = 1.0
# Runs ending back to back share a sweep: at most one per this many seconds (each reads /proc).
SWEEP_MIN_GAP = 0.05
ROUNDS = 10
GRACE = 0.02


class StraySweeper:
    """Sweeps the server's children that neither `known_pids` (its interpreters) nor `helpers` (its own
    helper processes; None while one is being started) name."""

    def __init__(
        self,
        known_pids: Callable[[], set[int]],
        helpers: Callable[[], set[int] | None],
        sandboxed: bool,
        logger: logging.Logger,
        said: str = "killing a process a run or a tool server left behind",
    ) -> None:
        self._said = said
        self._known_pids = known_pids
        self._helpers = helpers
        self._sandboxed = sandboxed
        self._log = logger
        self._wanted = anyio.Event()
        self._runs_ended = 0  # wanted() calls
        self._swept_through = 0  # runs ended before the start of the last sweep that left no stray

    def wanted(self) -> None:
        """Ask for a sweep soon (a run just ended)."""
        self._runs_ended += 1
        self._wanted.set()

    async def settle(self) -> None:
        """Return once no process of a run that has ended is left: at once if a sweep since saw none."""
        if self._swept_through < self._runs_ended:
            await self.sweep()

    async def sweep_forever(self) -> None:
        """Sweep when asked, and at least once a second."""
        while True:
            with anyio.move_on_after(SWEEP_INTERVAL):
                await self._wanted.wait()
            self._wanted = anyio.Event()
            await self.sweep()
            await anyio.sleep(SWEEP_MIN_GAP)

    async def sweep(self) -> None:
        """Kill and reap every child of ours that is neither a run nor a pooled interpreter.

        A killed stray's own children come to us next, hence the rounds.
        """
        ended = self._runs_ended
        for _ in range(ROUNDS):
            # The children first, then who is known: a helper started in between (from a thread) is
            # not listed, or is known by then. The other way round, it was listed and not known.
            children = children_of_self()
            helpers = self._helpers()
            if helpers is None:  # one of the server's own is being started: its pid is not known yet
                await anyio.sleep(GRACE)
                continue
            known = self._known_pids() | helpers
            strays = [pid for pid in children if pid not in known]
            if not strays:
                self._swept_through = max(self._swept_through, ended)
                return
            for pid in strays:
                if is_zombie(pid):
                    continue
                if not self._sandbox_own(pid):
                    log_event(
                        self._log,
                        logging.WARNING,
                        self._said,
                        pid=pid,
                        command=command_line(pid),
                    )
                # The stray and what it started, caught whole; in a thread: a tree of thousands took the
                # event loop 1.8 s (found by a second look).
                await anyio.to_thread.run_sync(_kill_tree, pid)
            await anyio.sleep(GRACE)
            for pid in strays:
                reap_if_exited(pid)

    def _sandbox_own(self, pid: int) -> bool:
        """True for a process of a sandbox being torn down: its namespace init or the interpreter.

        When a bwrap process is killed, those can outlive it for a moment and reach us as orphans.
        Nothing a sandboxed run leaves behind can: its namespace's init inherits it. So in sandbox
        mode an orphan from another PID namespace (or one already exiting) is the run itself, and
        is killed without a warning.
        """
        if not self._sandboxed:
            return False
        try:
            return os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
        except (FileNotFoundError, ProcessLookupError):
            return True  # exiting: its namespaces are already gone
        except OSError:
            return False


def _kill_tree(pid: int) -> None:
    for member in stopped_tree(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)


@contextlib.asynccontextmanager
async def strays_reaped(logger: logging.Logger) -> AsyncIterator[None]:
    """The server a child subreaper for as long as this lasts, then every child it still has killed and
    reaped. Entered before the tool servers start and left after they and the pool have stopped: found
    by a review, a tool server's daemon (`setsid`, or a double fork while it started, before the pool
    made the server a subreaper) outlived a graceful stop, whose held directory, removed, left no later
    start a trace to kill it by."""
    was_reaping = is_child_subreaper()
    reaping = set_child_subreaper(True)
    try:
        yield
    finally:
        if reaping:
            with anyio.CancelScope(shield=True):
                left = StraySweeper(set, set, False, logger, "killing a process left behind at the stop")
                await left.sweep()
            if not was_reaping:
                set_child_subreaper(False)
