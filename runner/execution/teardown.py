"""Everything after a run: its interpreter's end (kill, reap, close, delete), at once or after the
answer, and the wait a later run owes the teardowns begun before it.

A run that tells its own end is answered as soon as its output and report are in; killing what is
left of it, reaping it, closing its fds and deleting its directory follow in the background, while
it still holds its admission slot. Where runs share the file system (no sandbox), a later run waits
for the teardowns begun before it took its interpreter, never for ones begun after (a steady stream of
ends cannot starve it). Any other run (killed, failed, cancelled) is ended before its answer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Protocol

import anyio
import anyio.abc

from runner.execution.driver import KILL_GRACE
from runner.logs import log_event
from runner.processes.child import REAP_TIMEOUT, Child, process_exists
from runner.processes.trees import remove_tree

# How long a run answered before its exit may take to be gone before its teardown gives up on it.
TEARDOWN_PATIENCE = 30.0


async def end_interpreter(child: Child, logger: logging.Logger) -> None:
    """Kill, reap, close and delete; safe to call more than once. One that does not die after SIGKILL
    is logged and left unreaped (`Child.reaped` stays False)."""
    if not child.reaped:
        child.kill_group()
        with anyio.move_on_after(REAP_TIMEOUT):
            await child.wait_exit()
        if child.still_running():
            log_event(logger, logging.ERROR, "process did not die after SIGKILL", pid=child.pid)
        else:
            child.reap()
    child.close_all()
    # The run's cgroup, once its processes are gone (bubblewrap's: the server made it). Its OOM kills
    # were read when the run's end was classified (`RunDriver.drive`).
    busy = child.reaped and not child.remove_cgroup() and child.cgroup is not None
    if busy and child.cgroup is not None and not await anyio.to_thread.run_sync(child.cgroup.remove, REAP_TIMEOUT):
        log_event(logger, logging.ERROR, "run cgroup still busy; removed with its parent", pid=child.pid)
    if child.workdir is not None:
        try:
            os.rmdir(child.workdir)  # most runs leave their directory empty: no thread needed
        except OSError:
            await anyio.to_thread.run_sync(remove_tree, child.workdir)


class Ends(Protocol):
    """What the teardowns need of the interpreters' supplies."""

    async def destroy(self, child: Child) -> None:
        """`child` ended (`end_interpreter`) and forgotten by the supply it came from."""
        ...

    async def unresponsive(self, child: Child) -> None:
        """`child` is gone but its source never said so: the source recovers, or raises."""
        ...


class Teardowns:
    """Ends runs (`end`), at once or after their answer (then in `task_group`, shielded: none is ever
    left half done). `ended` is told of every end (the stray sweep's cue)."""

    def __init__(
        self,
        task_group: anyio.abc.TaskGroup,
        ends: Ends,
        logger: logging.Logger,
        *,
        runs_share_files: bool,
        ended: Callable[[], None] = lambda: None,
    ) -> None:
        self._task_group = task_group
        self._ends = ends
        self._log = logger
        self._runs_share_files = runs_share_files
        self._ended = ended
        self._pending: set[anyio.Event] = set()

    async def end(self, child: Child, then: Callable[[], None] | None = None) -> None:
        """End `child`'s run: the one way a run's interpreter goes. With `then` (what frees the run's
        slot), a run that told its own end but is not reaped yet is answered first: what can go at
        once goes, the rest is ended in the background and `then` called once it is all gone. Any
        other (reaped already, failed, cancelled, or no `then`) is ended now, before the answer, and
        so is one whose background cannot be had any more; `then` is called either way."""
        if then is not None and not child.reaped:
            child.free_early()
            done = anyio.Event()
            try:
                self._task_group.start_soon(self._tear_down, child, then, done)
            except RuntimeError:
                pass  # the pool's task group has ended (the server stops): ended now, below
            else:
                self._pending.add(done)
                return
        with anyio.CancelScope(shield=True):
            try:
                await self._ends.destroy(child)
                self._ended()
            finally:
                if then is not None:
                    then()

    async def before_next_run(self) -> None:
        """Return when a run may get its code.

        Where runs share the file system, no process of an earlier run may still be alive then: a
        daemon left behind could write into its directory (usually the pool's sweep has seen to it
        already; the bootstrap then empties the directory of what was written before). A sandboxed
        run's leftovers see nothing of a later run (its own tmpfs, PID and network namespaces), so
        there it does not wait: that would put the earlier run's exit back on the path of a call
        that follows it at once.
        """
        if self._runs_share_files:
            await self.wait_for_earlier()

    async def wait_for_earlier(self) -> None:
        """Return once every teardown started before this call has finished."""
        for done in list(self._pending):
            await done.wait()

    async def _tear_down(self, child: Child, then: Callable[[], None], done: anyio.Event) -> None:
        """A run slow to exit is waited for; one gone but unreported means its zygote is stuck, and it
        is replaced. A fault here is logged, and the run ended all the same."""
        with anyio.CancelScope(shield=True):
            try:
                await self._wait_gone(child)
            except Exception:
                self._log.error(
                    "teardown after the answer failed", exc_info=True, extra={"request_id": "-", "fields": {}}
                )
            finally:
                try:
                    await self._ends.destroy(child)
                    self._ended()
                finally:
                    self._pending.discard(done)
                    done.set()
                    then()

    async def _wait_gone(self, child: Child) -> None:
        deadline = anyio.current_time() + TEARDOWN_PATIENCE
        seen_gone = False
        while child.still_running() and anyio.current_time() < deadline:
            with anyio.move_on_after(KILL_GRACE):
                await child.wait_exit()
            # Gone, and still unreported a whole grace later (not just between the zygote's reaping
            # and its report): the zygote is stuck.
            if child.still_running() and not process_exists(child.pid):
                if seen_gone:
                    await self._ends.unresponsive(child)
                seen_gone = True
