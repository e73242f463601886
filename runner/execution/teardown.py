"""Runs answered before their processes are reaped: the teardowns still going, and a wait for them.

A run that tells its own end is answered as soon as its output and report are in; killing what is
left of it, reaping it, closing its fds and deleting its directory follow in the background, while
it still holds its concurrency slot. Where runs share the file system (no sandbox), a later run waits
for the teardowns begun before it took its interpreter, never for ones begun after (a steady stream of
ends cannot starve it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.abc


class Teardowns:
    """Teardowns run in `task_group`, each shielded from cancellation: none is ever left half done."""

    def __init__(self, task_group: anyio.abc.TaskGroup, *, runs_share_files: bool = True) -> None:
        self._task_group = task_group
        self._pending: set[anyio.Event] = set()
        self._runs_share_files = runs_share_files

    def start(self, teardown: Callable[[], Awaitable[None]]) -> None:
        """Run `teardown` in the background."""
        done = anyio.Event()
        self._pending.add(done)
        self._task_group.start_soon(self._run, teardown, done)

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

    async def _run(self, teardown: Callable[[], Awaitable[None]], done: anyio.Event) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await teardown()
            finally:
                self._pending.discard(done)
                done.set()
