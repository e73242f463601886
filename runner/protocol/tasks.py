"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663): a run_python call a client that
negotiated it may get back as a task, and the tasks themselves, with their TTL and their caller.

A call that has not ended within `TASK_AFTER_SECONDS` becomes a task: the client gets a
`CreateTaskResult` at once and polls `tasks/get`, whose `statusMessage` carries the run's latest
output while it works and whose `result` is, once it has ended, the very result the call would have
had. A shorter call is answered as if there were no tasks (the extension lets the server decide),
which spares the client a poll for the common quick run.

`TaskStore` is the bookkeeping, with no I/O of its own: what a task is, who may see it, when it
expires, which one goes when a caller holds too many. `Tasks` runs the calls that outlive their
request, in a task group of the server's lifetime. The wire shapes are pure functions.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import anyio
import mcp_types as types
from anyio.abc import TaskGroup

from runner.config import TasksConfig
from runner.logs import log_event

EXTENSION = "io.modelcontextprotocol/tasks"
# A call that has not ended by then becomes a task; one that has is answered as without tasks.
TASK_AFTER_SECONDS = 1.0
# What tasks/get's answer suggests between polls: progress changes once a second at most (driver.py).
POLL_INTERVAL_MS = 1000
ID_PREFIX = "t-"
# The shortest wait between two sweeps of expired tasks: a wake a little early must not spin.
MIN_SWEEP_WAIT = 0.05

# A task's run: the call's result and a one-line summary of it. It turns every fault into an isError
# result, as a call does; one that escapes anyway fails the task, not the server.
Work = Callable[[], Awaitable[tuple[types.CallToolResult, str]]]
Status = Literal["working", "completed", "cancelled", "failed"]
TERMINAL: frozenset[str] = frozenset({"completed", "cancelled", "failed"})


@dataclass(eq=False)
class Task:
    """One task: its identity, its caller and its state, which only its run (and tasks/cancel) moves on.

    It lasts as long as it works (the run's timeout bounds that, the wait for a slot or for its
    session's turn does not), then `kept_seconds` more: `ttl_ms` says so from the start as the
    timeout plus those seconds, and is made exact when the run ends (the extension lets it change)."""

    task_id: str
    request_id: str  # the call's, as in its result and the logs
    caller: str | None
    created: float  # wall clock (time.time()): createdAt
    started: float  # the store's clock
    kept_seconds: int
    ttl_ms: int
    clock: Callable[[], float] = time.monotonic  # the store's
    status: Status = "working"
    status_message: str | None = None
    updated: float = 0.0  # wall clock: lastUpdatedAt
    expires: float | None = None  # the store's clock, once ended: past it, the task is gone
    published: bool = False  # a client was told of it (CreateTaskResult): it is in the store
    result: types.CallToolResult | None = None  # once completed
    result_bytes: int = 0  # its JSON's, once completed: what a tasks/get answer inlining it is charged for
    # What its run left that only its result names (a session a call with session "new" opened: the
    # handle is in the result alone), ended if the task goes with its result never read (`read`).
    leftover: Callable[[], Awaitable[object]] | None = None
    read: bool = False  # its result was inlined in a tasks/get answer
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    ended: anyio.Event = field(default_factory=anyio.Event)

    @property
    def working(self) -> bool:
        return self.status not in TERMINAL

    def progress(self, message: str) -> None:
        """The run's latest state, for tasks/get."""
        if self.working:
            self.status_message = message
            self.updated = time.time()

    def complete(self, result: types.CallToolResult, message: str) -> None:
        """The run ended with `result` (an isError one included: that is still `completed`)."""
        if self.working:
            self.result = result
            self.result_bytes = len(result.model_dump_json(by_alias=True, exclude_none=True))
        self._end("completed", message)

    def cancel(self, message: str) -> None:
        """Stop the run (tasks/cancel, or the server stopping); it ends `cancelled` once it is killed."""
        if self.working:
            self.status_message = message
            self.scope.cancel()

    def cancelled(self) -> None:
        """The run was killed after `cancel`."""
        self._end("cancelled", self.status_message or "cancelled")

    def fail(self, message: str) -> None:
        """A fault of the server's own escaped the run: a JSON-RPC internal error, as SEP-2663's `failed`."""
        self._end("failed", message)

    def _end(self, status: Status, message: str) -> None:
        if self.working:
            self.status = status
            self.status_message = message
            self.updated = time.time()
            now = self.clock()
            self.expires = now + self.kept_seconds
            self.ttl_ms = int((now - self.started + self.kept_seconds) * 1000)
        self.ended.set()


class TaskStore:
    """The tasks clients were told of, by id. A task is seen only by its caller (over HTTP the token's
    name, over stdio the one connection) and lasts while it works, then `kept_seconds`; a caller holds
    at most `per_caller`, and one more makes its oldest ended one go. Ended tasks past their time go
    when it comes (`expire_forever`), and whenever the store is used."""

    def __init__(
        self,
        kept_seconds: int,
        per_caller: int,
        *,
        replica: str = "",
        clock: Callable[[], float] = time.monotonic,
        dropped: Callable[[Task], None] | None = None,
    ) -> None:
        self._kept_seconds = kept_seconds
        self._dropped = dropped  # told of each task that goes with a leftover and its result unread
        self._per_caller = per_caller
        # A replica's name leads its task ids (t-NAME.…), as it does session handles: a proxy routes
        # tasks/* on the Mcp-Name header, which carries the id.
        self._prefix = ID_PREFIX + (replica + "." if replica else "")
        self._clock = clock
        self._tasks: dict[str, Task] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def new(self, request_id: str, caller: str | None, timeout: float) -> Task:
        """A working task of `caller`'s for a run of at most `timeout` seconds, not yet in the store:
        a call becomes it only once it has outlasted TASK_AFTER_SECONDS (`publish`)."""
        wall = time.time()
        return Task(
            task_id=self._prefix + secrets.token_urlsafe(24),  # 192 random bits
            request_id=request_id,
            caller=caller,
            created=wall,
            started=self._clock(),
            kept_seconds=self._kept_seconds,
            ttl_ms=int((timeout + self._kept_seconds) * 1000),
            clock=self._clock,
            updated=wall,
        )

    def publish(self, task: Task) -> bool:
        """Put `task` in the store, making its caller's oldest ended one go if it holds `per_caller`;
        False (and nothing changed) when all of those still work: the call then waits for its run."""
        self.expire(self._clock())
        mine = [other for other in self._tasks.values() if other.caller == task.caller]
        if len(mine) >= self._per_caller:
            ended = [other for other in mine if not other.working]
            if not ended:
                return False
            self._drop(min(ended, key=lambda other: other.created))
        self._tasks[task.task_id] = task
        task.published = True
        return True

    def find(self, task_id: str, caller: str | None) -> Task | None:
        """The caller's task `task_id`; None if it never was, has expired, or is another caller's."""
        self.expire(self._clock())
        task = self._tasks.get(task_id)
        if task is None or task.caller != caller:
            return None
        return task

    def expire(self, now: float) -> None:
        """Drop the ended tasks past their time; a working one never goes."""
        for task in [task for task in self._tasks.values() if task.expires is not None and task.expires <= now]:
            self._drop(task)

    def _drop(self, task: Task) -> None:
        del self._tasks[task.task_id]
        if task.leftover is not None and not task.read and self._dropped is not None:
            self._dropped(task)

    def working(self) -> list[Task]:
        return [task for task in self._tasks.values() if task.working]

    async def expire_forever(self) -> None:
        """Drop each ended task when its time comes, whether or not the store is used then (found by a
        review: an idle server held expired tasks and their results until its next tasks/* or task).
        A task that ends while this waits expires no sooner than `kept_seconds` after the wait began."""
        while True:
            now = self._clock()
            self.expire(now)
            ends = [task.expires for task in self._tasks.values() if task.expires is not None]
            await anyio.sleep(max(MIN_SWEEP_WAIT, min(ends, default=now + self._kept_seconds) - now))


class Tasks:
    """The store, and the task group in which calls that outlive their request run. Open it with
    `Tasks.open`: leaving it cancels every run still working (their processes are killed and reaped
    by the runs themselves, as for a cancelled call), since nobody could fetch their results."""

    def __init__(self, store: TaskStore, group: TaskGroup, logger: logging.Logger) -> None:
        self.store = store
        self._group = group
        self._log = logger
        # Set when the server begins to stop: no call becomes a task from then on (its result could
        # not be fetched); it waits for its run, within the shutdown's grace, as without tasks.
        self.stopping = False

    def stop(self) -> None:
        self.stopping = True

    @classmethod
    @asynccontextmanager
    async def opened(cls, section: TasksConfig, logger: logging.Logger) -> AsyncIterator[Tasks | None]:
        """The server's tasks, as its configuration has them; None where it offers none."""
        if section.refused:
            yield None
            return
        async with cls.open(
            section.kept_output_seconds, section.max_tasks_per_caller, logger, replica=section.replica
        ) as tasks:
            yield tasks

    @classmethod
    @asynccontextmanager
    async def open(
        cls, kept_seconds: int, per_caller: int, logger: logging.Logger, *, replica: str = ""
    ) -> AsyncIterator[Tasks]:
        async with anyio.create_task_group() as group:

            def dropped(task: Task) -> None:
                group.start_soon(_end_leftover, task, logger)

            store = TaskStore(kept_seconds, per_caller, replica=replica, dropped=dropped)
            tasks = cls(store, group, logger)
            group.start_soon(tasks.store.expire_forever)
            try:
                yield tasks
            finally:
                for task in tasks.store.working():
                    task.cancel("the server stopped")
                group.cancel_scope.cancel()

    def start(self, task: Task, work: Work) -> None:
        """Run `work` (which returns the call's result and a one-line summary) as `task`'s run."""
        self._group.start_soon(self._run, task, work)

    async def _run(self, task: Task, work: Work) -> None:
        try:
            with task.scope:
                result, summary = await work()
                task.complete(result, summary)
        except Exception as exc:
            fields = {"request_id": task.request_id, "fields": {"error": type(exc).__name__}}
            self._log.error("internal error", exc_info=True, extra=fields)
            task.fail(f"the server failed ({type(exc).__name__}) running this task; its log has details")
        finally:
            task.cancelled()  # no-op once it has ended: it only marks a run that was stopped


async def _end_leftover(task: Task, logger: logging.Logger) -> None:
    """End what a task gone unread left (its session: found by a review, it held its caller's cap until
    it was idle 15 minutes, its handle in a result nobody read); a fault is logged, never raised."""
    if task.leftover is None:
        return
    try:
        if await task.leftover():
            log_event(logger, logging.INFO, "task gone unread: its session ended", task.request_id)
    except Exception:
        logger.warning("a task's session could not be ended", exc_info=True, extra={"request_id": task.request_id})


# --- The wire shapes (SEP-2663) ----------------------------------------------------------------------


def _iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _envelope(task: Task) -> dict[str, Any]:
    shape: dict[str, Any] = {
        "taskId": task.task_id,
        "status": task.status,
        "createdAt": _iso(task.created),
        "lastUpdatedAt": _iso(task.updated),
        "ttlMs": task.ttl_ms,
    }
    if task.working:
        shape["pollIntervalMs"] = POLL_INTERVAL_MS
    if task.status_message is not None:
        shape["statusMessage"] = task.status_message
    return shape


def created_result(task: Task) -> dict[str, Any]:
    """tools/call's answer when it became a task: `CreateTaskResult`, flat (Result & Task)."""
    return {"resultType": "task", **_envelope(task)}


def detailed_task(task: Task) -> dict[str, Any]:
    """tasks/get's answer: the task, with its result inlined once completed."""
    shape = {"resultType": "complete", **_envelope(task)}
    if task.status == "completed" and task.result is not None:
        result = task.result.model_dump(by_alias=True, mode="json", exclude_none=True)
        shape["result"] = {"resultType": "complete", **result}
        task.read = True
    elif task.status == "failed":
        shape["error"] = {"code": types.INTERNAL_ERROR, "message": task.status_message or "internal error"}
    return shape
