"""The tasks' bookkeeping and wire shapes, without a server or a process: ids, callers, TTLs, the per-caller bound, and
what SEP-2663 says a CreateTaskResult and a tasks/get answer carry."""

from __future__ import annotations

import re

import mcp_types as types
import pytest

from runner.protocol.tasks import POLL_INTERVAL_MS, Task, TaskStore, created_result, detailed_task

pytestmark = pytest.mark.anyio  # a task's event and cancel scope belong to a running loop

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def store(per_caller: int = 4, kept_seconds: int = 60, replica: str = "") -> tuple[TaskStore, Clock]:
    clock = Clock()
    return TaskStore(kept_seconds, per_caller, replica=replica, clock=clock), clock


def result(text: str = "done", is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


def published(tasks: TaskStore, request_id: str, caller: str | None, timeout: float) -> Task:
    task = tasks.new(request_id, caller, timeout)
    assert tasks.publish(task)
    return task


async def test_a_task_id_has_192_random_bits_after_the_replica_name_and_is_never_repeated() -> None:
    named, _ = store(replica="runner-1")
    plain, _ = store()
    task = published(named, "r1", None, 10)
    assert task is not None
    assert re.fullmatch(r"t-runner-1\.[A-Za-z0-9_-]{32}", task.task_id)
    ids = set()
    for _ in range(3):
        other = published(plain, "r", None, 10)
        assert other is not None
        ids.add(other.task_id)
    assert len(ids) == 3
    assert all(re.fullmatch(r"t-[A-Za-z0-9_-]{32}", task_id) for task_id in ids)


async def test_a_task_is_found_by_its_caller_only() -> None:
    tasks, _ = store()
    task = published(tasks, "r1", "alice", 10)
    assert task is not None
    assert tasks.find(task.task_id, "alice") is task
    assert tasks.find(task.task_id, "bob") is None
    assert tasks.find(task.task_id, None) is None
    assert tasks.find("t-never-made", "alice") is None


async def test_a_task_lasts_while_it_works_then_the_kept_output_seconds_and_its_ttl_says_so_exactly() -> None:
    tasks, clock = store(kept_seconds=60)
    task = published(tasks, "r1", None, 30)
    assert task.ttl_ms == 90_000  # the timeout and the kept seconds: what is known at the start
    clock.now += 500  # far past that: waiting for a slot or for its session's turn is not bounded by it
    assert tasks.find(task.task_id, None) is task, "a working task never expires"
    task.complete(result(), "ok after 1.000 s")
    assert task.ttl_ms == 560_000  # made exact: from its creation to its end, and the kept seconds
    clock.now += 59.9
    assert tasks.find(task.task_id, None) is task
    clock.now += 0.1
    assert tasks.find(task.task_id, None) is None
    assert len(tasks) == 0


async def test_a_task_is_in_the_store_only_once_published() -> None:
    tasks, _ = store()
    task = tasks.new("r1", None, 10)
    assert tasks.find(task.task_id, None) is None
    assert not task.published
    assert tasks.publish(task)
    assert task.published
    assert tasks.find(task.task_id, None) is task


async def test_one_task_more_than_a_caller_may_hold_makes_its_oldest_ended_one_go() -> None:
    tasks, clock = store(per_caller=2)
    first = published(tasks, "r1", "alice", 10)
    clock.now += 1
    second = published(tasks, "r2", "alice", 10)
    first.complete(result(), "ok")
    second.complete(result(), "ok")
    unpublished = tasks.new("q", "alice", 10)  # a call that never became a task takes no room
    bobs = published(tasks, "b1", "bob", 10)  # another caller's count is its own
    assert tasks.find(first.task_id, "alice") is first
    third = published(tasks, "r3", "alice", 10)
    assert tasks.find(first.task_id, "alice") is None
    assert tasks.find(second.task_id, "alice") is second
    assert tasks.find(third.task_id, "alice") is third
    assert tasks.find(bobs.task_id, "bob") is bobs
    assert tasks.find(unpublished.task_id, "alice") is None


async def test_a_caller_whose_tasks_are_all_working_cannot_publish_another_and_loses_none() -> None:
    tasks, _ = store(per_caller=2)
    first = published(tasks, "r1", "alice", 10)
    second = published(tasks, "r2", "alice", 10)
    third = tasks.new("r3", "alice", 10)
    assert not tasks.publish(third)
    assert not third.published
    assert tasks.find(first.task_id, "alice") is first
    assert tasks.find(second.task_id, "alice") is second
    assert tasks.find(third.task_id, "alice") is None


async def test_a_create_task_result_is_flat_with_integer_milliseconds_and_no_result() -> None:
    tasks, _ = store()
    task = published(tasks, "r1", None, 10)
    assert task is not None
    task.progress("running for 1s of 10s")
    shape = created_result(task)
    assert shape["resultType"] == "task"
    assert shape["taskId"] == task.task_id
    assert shape["status"] == "working"
    assert ISO.fullmatch(shape["createdAt"])
    assert ISO.fullmatch(shape["lastUpdatedAt"])
    assert shape["ttlMs"] == 70_000
    assert isinstance(shape["ttlMs"], int)
    assert shape["pollIntervalMs"] == POLL_INTERVAL_MS
    assert shape["statusMessage"] == "running for 1s of 10s"
    assert not {"task", "result", "error", "inputRequests", "requestState", "ttl", "pollInterval"} & set(shape)


async def test_tasks_get_inlines_the_result_once_completed_and_only_then() -> None:
    tasks, _ = store()
    task = published(tasks, "r1", None, 10)
    assert task is not None
    working = detailed_task(task)
    assert working["resultType"] == "complete"
    assert "result" not in working
    assert "error" not in working
    task.complete(result("boom", is_error=True), "error after 0.1 s")
    done = detailed_task(task)
    assert done["status"] == "completed"
    assert done["statusMessage"] == "error after 0.1 s"
    assert done["result"]["isError"] is True
    assert done["result"]["content"] == [{"type": "text", "text": "boom"}]
    assert "io.modelcontextprotocol/related-task" not in done["result"].get("_meta", {})
    assert "pollIntervalMs" not in done  # nothing left to poll for


async def test_a_cancelled_task_carries_no_result_and_a_failed_one_a_json_rpc_error() -> None:
    tasks, _ = store()
    cancelled = published(tasks, "r1", None, 10)
    failed = published(tasks, "r2", None, 10)
    assert cancelled is not None
    assert failed is not None
    cancelled.cancel("cancelled with tasks/cancel")
    cancelled.cancelled()
    failed.fail("the server failed (OSError) running this task")
    assert detailed_task(cancelled)["status"] == "cancelled"
    assert "result" not in detailed_task(cancelled)
    shape = detailed_task(failed)
    assert shape["status"] == "failed"
    assert shape["error"] == {"code": types.INTERNAL_ERROR, "message": failed.status_message}
    assert "result" not in shape


async def test_an_ended_task_takes_no_more_progress_and_ends_only_once() -> None:
    task = Task("t-x", "r", None, created=0.0, started=0.0, kept_seconds=10, ttl_ms=20_000)
    task.complete(result(), "ok after 1.000 s")
    task.progress("running for 2s")
    task.cancel("too late")
    task.cancelled()
    assert (task.status, task.status_message) == ("completed", "ok after 1.000 s")
    assert not task.scope.cancel_called
    assert task.ended.is_set()


async def test_a_task_with_a_leftover_that_goes_unread_is_told_and_one_read_is_not() -> None:
    clock = Clock()
    gone: list[str] = []
    tasks = TaskStore(60, 1, clock=clock, dropped=lambda task: gone.append(task.request_id))

    async def leftover() -> None:
        pass

    unread = published(tasks, "unread", "alice", 10)
    unread.leftover = leftover
    unread.complete(result(), "ok")
    published(tasks, "newer", "alice", 10).complete(result(), "ok")  # makes the unread one go
    assert gone == ["unread"]
    read = published(tasks, "read", "bob", 10)
    read.leftover = leftover
    read.complete(result(), "ok")
    detailed_task(read)  # tasks/get inlined its result
    clock.now += 61
    tasks.expire(clock.now)
    assert gone == ["unread"], "a read task's result named its leftover to its caller"
