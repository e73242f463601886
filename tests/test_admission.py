"""Admission on its own: the concurrency bound, FIFO order beyond it, and `busy` past the queue."""

from __future__ import annotations

import anyio
import pytest

from runner.execution.admission import Admission

pytestmark = pytest.mark.anyio


async def test_calls_beyond_the_bound_wait_and_get_their_slots_in_arrival_order() -> None:
    admission = Admission(max_concurrent=1, max_queue=0)
    assert await admission.enter()
    order: list[int] = []

    async def call(n: int) -> None:
        assert await admission.enter()
        order.append(n)
        admission.leave()

    async with anyio.create_task_group() as tg:
        for n in range(5):
            tg.start_soon(call, n)
            await anyio.wait_all_tasks_blocked()  # each is in line before the next arrives
        assert admission.waiting == 5
        admission.leave()
    assert order == [0, 1, 2, 3, 4]
    assert admission.waiting == 0


async def test_a_full_queue_turns_the_next_call_away_at_once() -> None:
    admission = Admission(max_concurrent=1, max_queue=1)
    assert await admission.enter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(admission.enter)
        await anyio.wait_all_tasks_blocked()
        assert admission.queue_full
        with anyio.fail_after(1):
            assert not await admission.enter()
        admission.leave()  # the waiting call takes the slot and the task group can end
    admission.leave()


async def test_a_call_cancelled_while_waiting_leaves_the_line_and_holds_no_slot() -> None:
    admission = Admission(max_concurrent=1, max_queue=0)
    assert await admission.enter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(admission.enter)
        await anyio.wait_all_tasks_blocked()
        assert admission.waiting == 1
        tg.cancel_scope.cancel()
    assert admission.waiting == 0
    admission.leave()
    with anyio.fail_after(1):
        assert await admission.enter()  # the slot is free: the cancelled call never took it


async def test_a_queue_bound_of_zero_means_no_bound() -> None:
    admission = Admission(max_concurrent=1, max_queue=0)
    assert await admission.enter()
    async with anyio.create_task_group() as tg:
        for _ in range(100):
            tg.start_soon(admission.enter)
        await anyio.wait_all_tasks_blocked()
        assert admission.waiting == 100
        assert not admission.queue_full
        tg.cancel_scope.cancel()
