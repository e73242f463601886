"""The interpreter supply on its own, with real interpreters: ready ones handed out, the pool kept
full, and every interpreter's end leaving nothing behind, in both spawn modes."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from runner.config import Config
from runner.errors import SpawnError
from runner.execution.supply import InterpreterSupply
from runner.inrun.wire import frame_job
from runner.processes.isolation import IsolationPlan
from runner.processes.limits import Limits, count_tasks_of_uid, limits_for
from runner.processes.source import InterpreterSource, opened_sources
from tests.helpers import alive

pytestmark = pytest.mark.anyio
LOG = logging.getLogger("tests.supply")


PLAIN = {"posix-spawn": IsolationPlan("none-posix-spawn", "tests"), "fork-server": IsolationPlan("none", "tests")}
SPAWNING = PLAIN["posix-spawn"]


@pytest.fixture(params=sorted(PLAIN))
def plan(request: pytest.FixtureRequest) -> IsolationPlan:
    return PLAIN[str(request.param)]


@pytest.fixture
def spawn_config(config: Config) -> Config:
    return dataclasses.replace(config, pool_size=2)


@contextlib.asynccontextmanager
async def lean_source(
    config: Config, plan: IsolationPlan, base_dir: str, limits: Limits
) -> AsyncIterator[InterpreterSource]:
    async with opened_sources(config, plan, base_dir, limits, LOG) as sources:
        [source] = sources
        yield source


@pytest.fixture
async def supply(
    spawn_config: Config, plan: IsolationPlan, work_dir: Path, no_leaks: None
) -> AsyncIterator[InterpreterSupply]:
    base_dir = tempfile.mkdtemp(dir=work_dir)
    limits = limits_for(spawn_config.limits, spawn_config.pool, count_tasks_of_uid(), plan)
    async with lean_source(spawn_config, plan, base_dir, limits) as source:
        supply = InterpreterSupply(spawn_config.pool, limits, source, LOG)
        try:
            yield supply
        finally:
            with anyio.CancelScope(shield=True):
                await supply.shutdown()
    os.rmdir(base_dir)


async def test_a_taken_interpreter_is_ready_for_code_and_its_end_leaves_nothing(supply: InterpreterSupply) -> None:
    child = await supply.take()
    assert supply.in_use == 1
    if child.server_is_parent:
        assert child.pid in supply.known_pids()  # not a stray to sweep
    else:
        # Forked: the server's child is the zygote; the run is the zygote's (orphaned to the server when
        # the zygote dies, it is a stray).
        assert len(supply.known_pids()) == 1
        assert child.pid not in supply.known_pids()
    assert child.workdir is not None
    assert os.path.isdir(child.workdir)
    os.write(child.code, frame_job(b"open('left.txt', 'w').write('x')"))
    with anyio.fail_after(10):
        await child.wait_exit()
    workdir, pid = child.workdir, child.pid
    await supply.destroy(child)
    await supply.destroy(child)  # a second time is a no-op
    assert supply.in_use == 0
    assert not os.path.exists(workdir)
    assert not alive(pid)
    assert pid not in supply.known_pids()


async def test_the_refill_keeps_the_pool_full_after_an_interpreter_is_taken(supply: InterpreterSupply) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(supply.refill_forever)
        with anyio.fail_after(20):
            while supply.ready < 2:  # the pool fills in the background
                await anyio.sleep(0.01)
        child = await supply.take()
        assert supply.ready == 1
        await supply.destroy(child)
        with anyio.fail_after(20):
            while supply.ready < 2:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()


async def test_an_interpreter_that_cannot_start_fails_the_take_and_leaves_nothing(
    config: Config, work_dir: Path, no_leaks: None
) -> None:
    broken = dataclasses.replace(config, python="/bin/true")
    base_dir = tempfile.mkdtemp(dir=work_dir)
    limits = limits_for(broken.limits, broken.pool, count_tasks_of_uid(), SPAWNING)
    async with lean_source(broken, SPAWNING, base_dir, limits) as source:
        supply = InterpreterSupply(broken.pool, limits, source, LOG)
        with pytest.raises(SpawnError, match="did not start"):
            await supply.take()
        assert (supply.in_use, supply.known_pids()) == (0, set())
    assert os.listdir(base_dir) == []
    os.rmdir(base_dir)


async def test_an_interpreter_that_outlives_its_kill_stays_known_and_is_not_swept_as_a_stray(
    config: Config, work_dir: Path, no_leaks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stands in for a process the kernel cannot kill at once (stuck in a system call): the SIGKILL is
    # never sent. It is still the supply's own, never a process a run left behind.
    monkeypatch.setattr("runner.execution.teardown.REAP_TIMEOUT", 0.2)
    spawning = config
    base_dir = tempfile.mkdtemp(dir=work_dir)
    limits = limits_for(spawning.limits, spawning.pool, count_tasks_of_uid(), SPAWNING)
    async with lean_source(spawning, SPAWNING, base_dir, limits) as source:
        supply = InterpreterSupply(spawning.pool, limits, source, LOG)
        child = await supply.take()
        real_kill = child.kill_group
        child.kill_group = lambda: None  # type: ignore[method-assign]
        await supply.destroy(child)
        assert child.pid in supply.known_pids()
        child.kill_group = real_kill  # type: ignore[method-assign]
        real_kill()
        os.waitpid(child.pid, 0)
    os.rmdir(base_dir)
