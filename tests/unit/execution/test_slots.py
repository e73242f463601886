"""A call's slot: left exactly once, with what the call holds freed first; handed on, left by whatever
ends the run after the answer, not at the call's end (busy refusals: test_admission, and e2e)."""

from __future__ import annotations

import logging

import anyio
import anyio.abc
import pytest

from runner.execution.admission import Admission
from runner.execution.slots import Slot, Slots
from runner.execution.teardown import Teardowns
from runner.outcome import RunRequest
from runner.processes.child import Child

pytestmark = pytest.mark.anyio


def test_a_slot_frees_what_the_call_held_before_the_slot_itself_and_only_once() -> None:
    freed: list[str] = []
    slot = Slot(0.5, lambda: freed.append("slot"))
    slot.also(lambda: freed.append("packages"))
    slot.leave()
    slot.leave()
    assert freed == ["packages", "slot"]
    assert slot.waited == 0.5


class _NoEnds:
    async def destroy(self, child: Child) -> None:
        raise AssertionError("no run here")

    async def unresponsive(self, child: Child) -> None:
        raise AssertionError("no run here")


async def _free(admission: Admission) -> bool:
    """Whether a slot is free now: `enter` takes a free one before its first checkpoint."""
    with anyio.CancelScope() as scope:
        scope.cancel()
        entered = await admission.enter()
        admission.leave()
        return entered
    return False


def _slots(tg: anyio.abc.TaskGroup, admission: Admission) -> Slots:
    logger = logging.getLogger("test")
    return Slots(admission, Teardowns(tg, _NoEnds(), logger, runs_share_files=False), logger)


async def test_a_held_slot_is_left_at_the_block_s_end_unless_it_was_handed_on() -> None:
    admission = Admission(1, 0)
    request = RunRequest("r", "pass", 1.0)
    async with anyio.create_task_group() as tg:
        slots = _slots(tg, admission)
        async with slots.held(request) as slot:
            assert isinstance(slot, Slot)
            assert not await _free(admission)
        assert await _free(admission), "left at the block's end"
        async with slots.held(request) as slot:
            assert isinstance(slot, Slot)
            leave = slot.hand_on()
        assert not await _free(admission), "handed on: still held after the block"
        leave()
        assert await _free(admission)
