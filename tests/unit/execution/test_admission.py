"""Admission on its own: the concurrency bound, FIFO order beyond it, `busy` past the queue, and the
callers' shares of the slots."""

from __future__ import annotations

import anyio
import pytest

from runner.execution.admission import Admission, fair_share

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


def test_a_fair_share_divides_the_slots_among_the_tokens() -> None:
    assert fair_share(4, 0, 0) == 0, "no tokens: no share to keep"
    assert fair_share(4, 1, 0) == 0, "one token may use every slot"
    assert fair_share(4, 2, 0) == 2
    assert fair_share(4, 3, 0) == 2, "rounded up: together they can fill every slot"
    assert fair_share(2, 8, 0) == 1
    assert fair_share(4, 2, 3) == 3, "configured"
    assert fair_share(4, 2, 9) == 4, "never more than every slot"


async def test_a_callers_line_is_bounded_and_a_cancelled_wait_holds_nothing() -> None:
    admission = Admission(max_concurrent=4, max_queue=1, share=1)
    assert await admission.enter("alice")
    async with anyio.create_task_group() as tg:
        entered = anyio.Event()

        async def second() -> None:
            assert await admission.enter("alice")
            entered.set()

        tg.start_soon(second)
        await anyio.wait_all_tasks_blocked()
        assert (admission.caller_waiting("alice"), admission.waiting) == (1, 0), "in alice's line, not the queue"
        with anyio.fail_after(1):
            assert not await admission.enter("alice"), "the line of 1 is full"
        assert admission.busy_message("alice") == (
            "server busy: 1 run of this client in progress and 1 waiting (RUNNER_HTTP_MAX_CONCURRENT_PER_TOKEN); "
            "retry later"
        )
        assert await admission.enter("bob"), "another caller is not held by alice's share"
        assert await admission.enter(None), "nor is a call without a caller"
        tg.cancel_scope.cancel()
    assert admission.caller_waiting("alice") == 0
    assert not entered.is_set()
    for caller in ("alice", "bob", None):
        admission.leave(caller)
    for caller in ("alice", "bob", None):
        assert await admission.enter(caller), "nothing is left held"
        admission.leave(caller)


async def test_a_caller_within_its_share_still_waits_in_the_queue_for_a_slot() -> None:
    admission = Admission(max_concurrent=1, max_queue=1, share=1)
    assert await admission.enter("alice")
    async with anyio.create_task_group() as tg:
        tg.start_soon(admission.enter, "bob")
        await anyio.wait_all_tasks_blocked()
        assert (admission.waiting, admission.caller_waiting("bob")) == (1, 0)
        with anyio.fail_after(1):
            assert not await admission.enter("carol"), "the queue of 1 is full"
        assert admission.busy_message("carol") == (
            "server busy: 1 run in progress and 1 waiting (RUNNER_MAX_QUEUE=1); retry later"
        )
        admission.leave("alice")  # bob takes the slot
    assert admission.waiting == 0
    admission.leave("bob")
    assert await admission.enter("carol"), "carol's share was given back when the queue turned her away"
    admission.leave("carol")


async def _never() -> None:
    raise AssertionError("a call turned away does not wait")


async def test_a_call_waiting_for_something_else_first_counts_in_the_queue_and_a_full_queue_turns_it_away() -> None:
    admission = Admission(max_concurrent=1, max_queue=2)
    ready = anyio.Event()
    done: list[bool] = []

    async def waiter() -> None:
        done.append(await admission.wait_counted(None, ready.wait))

    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        assert (admission.waiting, admission.queue_full) == (2, True)
        with anyio.fail_after(1):
            assert not await admission.wait_counted(None, _never)
        assert admission.busy_message() == (
            "server busy: 1 run in progress and 2 waiting (RUNNER_MAX_QUEUE=2); retry later"
        )
        assert await admission.enter(), "a free slot is still taken at once"
        with anyio.fail_after(1):
            assert not await admission.enter(), "a call that would wait for the slot finds the queue full"
        ready.set()
    assert done == [True, True]
    assert admission.waiting == 0
    admission.leave()


async def test_a_caller_with_a_share_waits_for_something_else_in_its_own_line_and_others_are_not_held() -> None:
    admission = Admission(max_concurrent=2, max_queue=1, share=1)
    ready = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(admission.wait_counted, "alice", ready.wait)
        await anyio.wait_all_tasks_blocked()
        assert (admission.caller_waiting("alice"), admission.waiting) == (1, 0), "alice's line, not the queue"
        with anyio.fail_after(1):
            assert not await admission.wait_counted("alice", _never), "alice's line of 1 is full"
        assert "RUNNER_HTTP_MAX_CONCURRENT_PER_TOKEN" in admission.busy_message("alice")
        assert await admission.enter("alice"), "her share was not taken by the waiting call"
        assert await admission.enter("bob")
        ready.set()
    assert admission.caller_waiting("alice") == 0
    admission.leave("alice")
    admission.leave("bob")


async def test_a_call_cancelled_while_it_waits_for_something_else_leaves_every_count_as_it_was() -> None:
    admission = Admission(max_concurrent=1, max_queue=1, share=1)
    for caller in (None, "alice"):
        with anyio.move_on_after(0.05) as scope:
            await admission.wait_counted(caller, anyio.Event().wait)
        assert scope.cancelled_caught
        assert (admission.waiting, admission.caller_waiting("alice")) == (0, 0)
    with anyio.fail_after(1):
        assert await admission.enter("alice"), "nothing is held"
    admission.leave("alice")
