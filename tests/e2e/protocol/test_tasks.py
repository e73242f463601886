"""The tasks extension (SEP-2663) through the official Python client in process, against a real pool.

The conformance suite's tasks scenarios call fixture tools this server does not have (slow_compute,
failing_job, ...; tests/conformance/expected-failures.yml); each test here that stands for one of
their checks names it, with run_python in the fixture's place: a run that sleeps for slow_compute, one
that raises for failing_job."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError

from runner.config import Config
from runner.execution.pool import Pool
from runner.logs import SHOWN_CHARS, get_logger
from runner.protocol.handlers import build_server
from runner.protocol.tasks import TASK_AFTER_SECONDS, Tasks
from tests.helpers import check_structured
from tests.tasks_client import (
    ANY_RESULT,
    TaskParams,
    TasksExtension,
    cancel_task,
    get_task,
    update_task,
    wait_for_task,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
SLOW = "import time\nprint('started', flush=True)\ntime.sleep(1.5)\nprint('done')"  # outlasts TASK_AFTER_SECONDS
FOREVER = "import time\nprint('started', flush=True)\ntime.sleep(60)"


@dataclasses.dataclass
class Served:
    client: Client
    tasks: Tasks
    extension: TasksExtension | None
    pool: Pool


@asynccontextmanager
async def served(config: Config, *, extension: bool = True, mode: str = "auto") -> AsyncIterator[Served]:
    declared = TasksExtension() if extension else None
    async with (
        Pool.open(config) as pool,
        Tasks.open(config.kept_output_seconds, config.max_tasks_per_caller, get_logger()) as tasks,
        Client(
            build_server(config, pool, tasks=tasks),  # type: ignore[arg-type]
            mode=mode,
            extensions=[declared] if declared else None,
        ) as client,
    ):
        yield Served(client, tasks, declared, pool)


async def call_raw(client: Client, code: str, **arguments: Any) -> Any:
    """tools/call, giving back a claimed shape (the CreateTaskResult) rather than resolving it."""
    return await client.session.call_tool("run_python", {"code": code, **arguments}, allow_claimed=True)


async def test_a_run_that_outlasts_a_second_becomes_a_task_whose_result_is_the_calls(
    config: Config, no_leaks: None
) -> None:
    """Stands for tasks-lifecycle's sep-2663-result-type-task-on-create and
    sep-2663-tasks-get-status-completed, and tasks-wire-fields's three checks."""
    async with served(config) as s:
        created = await call_raw(s.client, SLOW)
        task = await wait_for_task(s.client.session, created.task_id)
        again = await get_task(s.client.session, created.task_id)  # still there once ended (no early expiry)
    wire = created.model_dump(by_alias=True, exclude_none=True)
    assert wire["resultType"] == "task"
    assert not {"task", "result", "error", "inputRequests", "requestState", "ttl", "pollInterval"} & set(wire)
    assert ISO.match(wire["createdAt"])
    assert ISO.match(wire["lastUpdatedAt"])
    assert wire["ttlMs"] == (config.default_timeout + config.kept_output_seconds) * 1000
    assert isinstance(wire["pollIntervalMs"], int)
    assert wire["pollIntervalMs"] > 0
    assert task["status"] == "completed"
    assert again["status"] == "completed"
    assert "requestState" not in task
    result = types.CallToolResult.model_validate(task["result"])
    structured = check_structured(result.structured_content)
    assert (structured["status"], structured["stdout"]) == ("ok", "started\ndone\n")
    assert result.is_error is False
    assert "io.modelcontextprotocol/related-task" not in (task["result"].get("_meta") or {})
    assert task["statusMessage"].startswith("ok after ")


async def test_the_client_that_declares_tasks_gets_the_same_result_from_call_tool_either_way(
    config: Config, no_leaks: None
) -> None:
    """A quick run is answered at once (tasks-immediate-result-shortcut); a long one through a task the
    client's extension polls: `call_tool` returns the run's result both times."""
    async with served(config) as s:
        quick = await s.client.call_tool("run_python", {"code": "print(6 * 7)"})
        assert s.extension is not None
        assert s.extension.created == []
        slow = await s.client.call_tool("run_python", {"code": SLOW})
        assert len(s.extension.created) == 1
        assert s.extension.polls >= 1
    assert check_structured(quick.structured_content)["stdout"] == "42\n"
    assert check_structured(slow.structured_content)["stdout"] == "started\ndone\n"


async def test_tasks_get_while_working_shows_the_latest_output_and_cancel_kills_the_run(
    config: Config, no_leaks: None
) -> None:
    """Stands for sep-2663-tasks-get-status-working, sep-2663-cancel-ack-empty-result,
    tasks-cancel-terminal-idempotent-ack and sep-2663-durable-create-strong-consistency. The run's
    processes are gone once the task says cancelled (no_leaks)."""
    async with served(config) as s:
        created = await call_raw(s.client, FOREVER, timeout=120)
        first = await get_task(s.client.session, created.task_id)  # at once: the task exists
        with anyio.fail_after(10):
            while "started" not in (working := await get_task(s.client.session, created.task_id)).get(
                "statusMessage", ""
            ):
                await anyio.sleep(0.1)
        ack = await cancel_task(s.client.session, created.task_id)
        right_after = await get_task(s.client.session, created.task_id)  # the ack waits for the kill
        ended = await wait_for_task(s.client.session, created.task_id)
        again = await cancel_task(s.client.session, created.task_id)
    assert first["taskId"] == created.task_id
    assert first["status"] == "working"
    assert working["status"] == "working"
    assert "result" not in working
    assert working["statusMessage"].endswith("latest stdout:\nstarted")
    for empty in (ack, again):
        assert not {"taskId", "status", "result", "error", "inputRequests"} & set(empty)
        assert empty.get("resultType", "complete") == "complete"
    assert right_after["status"] == ended["status"] == "cancelled"
    assert "result" not in ended
    assert "tasks/cancel" in ended["statusMessage"]


async def test_a_run_that_fails_is_a_completed_task_with_an_is_error_result(config: Config, no_leaks: None) -> None:
    """Stands for sep-2663-tool-error-uses-completed-status and tasks-server-directed-creation-no-hint:
    a run's failure is the tool's, not the protocol's."""
    async with served(config) as s:
        created = await call_raw(s.client, "import time\ntime.sleep(1.2)\nraise ValueError('no')")
        task = await wait_for_task(s.client.session, created.task_id)
    assert task["status"] == "completed"
    assert task["result"]["isError"] is True
    assert task["result"]["structuredContent"]["status"] == "error"
    assert "ValueError: no" in task["result"]["structuredContent"]["stderr"]


async def test_a_call_that_breaks_the_rules_is_refused_at_once_never_as_a_task(config: Config, no_leaks: None) -> None:
    async with served(config) as s:
        refused = await call_raw(s.client, "print(1)", timeout=10_000)
    assert isinstance(refused, types.CallToolResult)
    assert refused.is_error
    assert check_structured(refused.structured_content)["status"] == "invalid_arguments"


async def test_without_the_extension_a_long_run_is_answered_as_ever_and_tasks_methods_get_32021(
    config: Config, no_leaks: None
) -> None:
    """Stands for sep-2663-server-rejects-undeclared-client; sep-2663-tasks-methods-non-declaring passes
    in the suite itself."""
    async with served(config, extension=False) as s:
        result = await call_raw(s.client, SLOW)
        with pytest.raises(MCPError) as refused:
            await get_task(s.client.session, "t-anything")
    assert isinstance(result, types.CallToolResult)
    assert check_structured(result.structured_content)["stdout"] == "started\ndone\n"
    assert refused.value.code == -32021
    assert refused.value.data == {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}


async def test_an_older_protocol_version_gets_no_task_and_no_tasks_methods(config: Config, no_leaks: None) -> None:
    """Before 2026-07-28 a result cannot carry a task (the SDK sieves it to the version's own shape)."""
    async with served(config, mode="legacy") as s:
        result = await s.client.call_tool("run_python", {"code": SLOW})
        with pytest.raises(MCPError) as refused:
            await get_task(s.client.session, "t-anything")
    assert check_structured(result.structured_content)["stdout"] == "started\ndone\n"
    assert refused.value.code == -32601


async def test_a_task_never_made_or_past_its_ttl_is_32602_and_tasks_update_is_acknowledged(
    config: Config, no_leaks: None
) -> None:
    # A TTL of timeout (2 s) plus kept seconds (1 s), counted from the call.
    config = dataclasses.replace(config, kept_output_seconds=1)
    async with served(config) as s:
        created = await call_raw(s.client, SLOW, timeout=2)
        ack = await update_task(s.client.session, created.task_id, {"unknown-key": {"ignored": True}})
        assert (await wait_for_task(s.client.session, created.task_id))["status"] == "completed"
        gone: MCPError | None = None
        with anyio.fail_after(10):
            while gone is None:
                try:
                    await get_task(s.client.session, created.task_id)
                except MCPError as error:
                    gone = error
                await anyio.sleep(0.2)
        with pytest.raises(MCPError) as never:
            await get_task(s.client.session, "t-never-made")
        with pytest.raises(MCPError) as cancel_never:
            await cancel_task(s.client.session, "t-never-made")
    assert not {"taskId", "status"} & set(ack)
    assert created.ttl_ms == 3000
    assert gone is not None
    for error in (gone, never.value, cancel_never.value):
        assert error.code == -32602
        assert "task not found" in error.message


async def test_cancelling_a_completed_task_leaves_its_result_and_three_cancels_at_once_are_each_acknowledged(
    config: Config, no_leaks: None
) -> None:
    """tool.md: cancelling an ended task changes nothing and gets the same acknowledgement (a review of
    the claims: only a task already cancelled was cancelled again)."""
    async with served(config) as s:
        done = await call_raw(s.client, SLOW, timeout=10)
        completed = await wait_for_task(s.client.session, done.task_id)
        late = await cancel_task(s.client.session, done.task_id)
        after = await get_task(s.client.session, done.task_id)
        working = await call_raw(s.client, FOREVER, timeout=120)
        acks: list[dict[str, Any]] = []

        async def cancel() -> None:
            acks.append(await cancel_task(s.client.session, working.task_id))

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(cancel)
        cancelled = await get_task(s.client.session, working.task_id)
    assert completed["status"] == after["status"] == "completed"
    assert after["result"] == completed["result"]
    assert len(acks) == 3
    for empty in (late, *acks):
        assert not {"taskId", "status", "result", "error"} & set(empty)
    assert cancelled["status"] == "cancelled"


async def test_an_ended_task_goes_from_the_servers_memory_when_its_time_comes_though_nothing_asks_for_it(
    config: Config, no_leaks: None
) -> None:
    """Found by a review: an expired task and its result stayed until the next tasks/* or task."""
    config = dataclasses.replace(config, kept_output_seconds=1)
    async with served(config) as s:
        created = await call_raw(s.client, SLOW, timeout=5)
        assert (await wait_for_task(s.client.session, created.task_id))["status"] == "completed"
        assert len(s.tasks.store) == 1
        with anyio.fail_after(10):  # its time is 1 s after its end; nothing is asked of the server meanwhile
            while len(s.tasks.store):
                await anyio.sleep(0.05)


async def test_a_task_that_opened_a_session_and_goes_unread_ends_its_session_and_one_read_keeps_it(
    config: Config, no_leaks: None
) -> None:
    # Found by a review: a "new" session call that became a task has its handle in its result alone; gone
    # unread (expired, or made to go by its caller's newer tasks), the session held the caller's cap
    # until it was idle 15 minutes.
    config = dataclasses.replace(config, kept_output_seconds=1)
    async with served(config) as s:
        unread = await call_raw(s.client, SLOW, timeout=5, session="new")
        task = s.tasks.store.find(unread.task_id, None)
        assert task is not None
        with anyio.fail_after(10):
            await task.ended.wait()  # not asked for: its result is never read
        assert s.pool.state().sessions.open == 1
        with anyio.fail_after(10):
            while s.pool.state().sessions.open:
                await anyio.sleep(0.05)
        assert s.pool.state().sessions.closed == 1
        read = await call_raw(s.client, SLOW, timeout=5, session="new")
        done = await wait_for_task(s.client.session, read.task_id)  # its result read, with its handle
        assert done["result"]["structuredContent"]["session"].startswith("s-")
        with anyio.fail_after(10):
            while len(s.tasks.store):
                await anyio.sleep(0.05)
        assert s.pool.state().sessions.open == 1, "the caller has its handle: the session is its own to end"
        # One unread but used meanwhile (a caller at its cap is told its handles): found by a second look,
        # it was ended under its caller, "closed by close_session".
        used = await call_raw(s.client, SLOW, timeout=5, session="new")
        task = s.tasks.store.find(used.task_id, None)
        assert task is not None
        with anyio.fail_after(10):
            await task.ended.wait()
        assert task.result is not None
        handle = (task.result.structured_content or {})["session"]
        again = await s.client.call_tool("run_python", {"code": "x = 41", "session": handle})
        assert not again.is_error, again
        with anyio.fail_after(10):
            while len(s.tasks.store) > 0 and s.tasks.store.find(used.task_id, None) is not None:
                await anyio.sleep(0.05)
        await anyio.sleep(0.2)  # what its going does is done at once: given a moment, nothing ends
        assert s.pool.state().sessions.open == 2, "a session used meanwhile is its caller's"


class ResultTaskRequest(types.Request[TaskParams, Literal["tasks/result"]]):
    """tasks/result, of the tasks of 2025-11-25, which this server does not serve."""

    method: Literal["tasks/result"] = "tasks/result"


async def test_a_task_id_of_a_mebibyte_is_answered_small_and_the_longest_taken_is_said_back_whole(
    config: Config, no_leaks: None
) -> None:
    # An id is at most 200 characters (TaskParams), as many as an answer says of any value a client
    # sent (runner.logs.SHOWN_CHARS): a longer one is refused by the SDK's check, never said back.
    huge, longest = "t" * (1 << 20), "t" * SHOWN_CHARS
    refused: dict[str, MCPError] = {}
    async with served(config) as s:
        asked = {
            "get": lambda task_id: get_task(s.client.session, task_id),
            "cancel": lambda task_id: cancel_task(s.client.session, task_id),
            "update": lambda task_id: update_task(s.client.session, task_id, {}),
            "result": lambda task_id: s.client.session.send_request(
                ResultTaskRequest(params=TaskParams(task_id=task_id)), ANY_RESULT
            ),
        }
        for name, ask in asked.items():
            for task_id in (huge, longest):
                with pytest.raises(MCPError) as caught:
                    await ask(task_id)
                refused[f"{name} {len(task_id)}"] = caught.value
    for name, error in refused.items():
        assert len(error.message) + len(json.dumps(error.error.data)) < 1_000, name
    for name in ("get", "cancel", "update"):
        assert refused[f"{name} {len(huge)}"].code == -32602
        assert refused[f"{name} {len(huge)}"].message == "Invalid request parameters"
        assert refused[f"{name} {SHOWN_CHARS}"].message == f"task not found: {longest}"
        assert refused[f"{name} {SHOWN_CHARS}"].error.data == {"taskId": longest}
    assert refused[f"result {len(huge)}"].code == types.METHOD_NOT_FOUND


async def test_a_caller_at_its_limit_of_working_tasks_gets_its_next_call_answered_without_one(
    config: Config, no_leaks: None
) -> None:
    config = dataclasses.replace(config, max_tasks_per_caller=1)
    async with served(config) as s:
        first = await call_raw(s.client, FOREVER, timeout=120)
        second = await call_raw(s.client, SLOW)  # waits for its run, as without tasks
        await cancel_task(s.client.session, first.task_id)
        assert (await wait_for_task(s.client.session, first.task_id))["status"] == "cancelled"
        third = await call_raw(s.client, SLOW)  # the ended one makes room, and goes
        with pytest.raises(MCPError):
            await get_task(s.client.session, first.task_id)
        assert (await wait_for_task(s.client.session, third.task_id))["status"] == "completed"
    assert isinstance(second, types.CallToolResult)
    assert check_structured(second.structured_content)["stdout"] == "started\ndone\n"


async def test_a_task_that_waited_for_a_slot_past_its_first_ttl_still_ends_and_is_kept_after(
    config: Config, no_leaks: None
) -> None:
    """The timeout bounds a run, not the wait for a slot: a working task never expires, and its ttlMs
    is made exact when it ends (found by a review: the second task was dropped mid-run)."""
    config = dataclasses.replace(config, max_concurrent=1, kept_output_seconds=1)
    code = "import time\ntime.sleep(1.8)\nprint('ran')"
    async with served(config) as s:
        async with anyio.create_task_group() as tg:
            created: list[Any] = []

            async def one() -> None:
                created.append(await call_raw(s.client, code, timeout=2))

            tg.start_soon(one)
            tg.start_soon(one)
        ended = [await wait_for_task(s.client.session, c.task_id) for c in created]
    assert [task["status"] for task in ended] == ["completed", "completed"]
    assert all(c.ttl_ms == 3000 for c in created)  # timeout 2 s + 1 s kept, at the start
    assert max(task["ttlMs"] for task in ended) > 3000  # the one that waited: exact once ended


async def test_a_quick_call_at_the_limit_makes_no_task_and_drops_none(config: Config, no_leaks: None) -> None:
    config = dataclasses.replace(config, max_tasks_per_caller=1)
    async with served(config) as s:
        created = await call_raw(s.client, SLOW)
        await wait_for_task(s.client.session, created.task_id)
        quick = await call_raw(s.client, "print(1)")
        still = await get_task(s.client.session, created.task_id)  # not evicted by a call that made none
    assert isinstance(quick, types.CallToolResult)
    assert still["status"] == "completed"


async def test_a_call_cancelled_before_it_became_a_task_kills_its_run_and_leaves_no_task(
    config: Config, no_leaks: None
) -> None:
    async with served(config) as s:
        with anyio.move_on_after(TASK_AFTER_SECONDS / 2):
            await call_raw(s.client, FOREVER, timeout=120)
        with anyio.fail_after(10):
            while len(s.tasks.store):  # the server hears the cancel, kills the run, forgets the task
                await anyio.sleep(0.05)
        after = await s.client.call_tool("run_python", {"code": "print('next')"})
    assert check_structured(after.structured_content)["stdout"] == "next\n"


async def test_a_session_call_cancelled_as_a_task_is_rolled_back(config: Config, no_leaks: None) -> None:
    async with served(config) as s:
        opened = await s.client.call_tool("run_python", {"code": "x = 1", "session": "new"})
        handle = check_structured(opened.structured_content)["session"]
        created = await call_raw(s.client, "x = 2\n" + FOREVER, session=handle, timeout=120)
        await cancel_task(s.client.session, created.task_id)
        assert (await wait_for_task(s.client.session, created.task_id))["status"] == "cancelled"
        after = await s.client.call_tool("run_python", {"code": "print(x)", "session": handle})
        await s.client.call_tool("close_session", {"session": handle})
    assert check_structured(after.structured_content)["stdout"] == "1\n"


async def test_stopping_the_server_with_a_task_working_kills_its_run(config: Config, no_leaks: None) -> None:
    async with served(config) as s:
        created = await call_raw(s.client, FOREVER, timeout=120)
        [task] = s.tasks.store.working()
        assert task.task_id == created.task_id
    assert task.status == "cancelled"
    assert task.status_message == "the server stopped"
