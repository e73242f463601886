"""The one teardown entry: a run answered first is ended in the background with its slot held until
then, and ended at once (its slot left all the same) where the background cannot take it."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator

import anyio
import pytest

from runner.execution.teardown import Teardowns
from runner.processes.child import Child

pytestmark = pytest.mark.anyio


class _Ends:
    """The supplies' part, recording. A teardown that fails is logged and ends the run all the same,
    which would hide a fault here: the tests look at the log too."""

    def __init__(self) -> None:
        self.destroyed: list[Child] = []

    async def destroy(self, child: Child) -> None:
        self.destroyed.append(child)

    async def unresponsive(self, child: Child) -> None:
        raise AssertionError("not asked here")


@pytest.fixture
def answered_first() -> Iterator[Child]:
    """A run that told its end and is not reaped yet: a process of ours that has exited, a zombie."""
    process = subprocess.Popen(["true"])
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
    yield Child(pid=process.pid, workdir=None, stdin=-1, stdout=-1, stderr=-1, code=-1)
    process.wait()


async def test_a_run_whose_teardown_cannot_be_started_after_the_answer_is_ended_now_and_its_slot_left(
    answered_first: Child, caplog: pytest.LogCaptureFixture
) -> None:
    # Review of issue 47: once the pool's task group had ended (the server stopping), start_soon raised,
    # the slot had been marked handed on, and nobody left it; the pending teardown was never done.
    ends, left = _Ends(), []
    async with anyio.create_task_group() as tg:
        pass
    teardowns = Teardowns(tg, ends, logging.getLogger("test"), runs_share_files=True)
    child = answered_first
    await teardowns.end(child, lambda: left.append(child))
    assert ends.destroyed == [child]
    assert left == [child]
    with anyio.fail_after(1):
        await teardowns.wait_for_earlier()  # nothing left pending
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_run_answered_first_is_torn_down_after_and_only_then_is_its_slot_left(
    answered_first: Child, caplog: pytest.LogCaptureFixture
) -> None:
    ends, left = _Ends(), []
    child = answered_first
    async with anyio.create_task_group() as tg:
        teardowns = Teardowns(tg, ends, logging.getLogger("test"), runs_share_files=True)
        await teardowns.end(child, lambda: left.append(child))
        assert left == [], "the answer goes first"
    assert ends.destroyed == [child]
    assert left == [child]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
