"""Whole-run limits through cgroups, checked from the host in both sandboxes: a run's tree is held to
its memory budget (tmpfs included) and its process count, its cgroup goes after it, the parent after
the server, and the run can neither see nor change its limits."""

from __future__ import annotations

import dataclasses
import glob
import os
import threading
from collections.abc import AsyncIterator

import anyio
import pytest

from runner.config import Config
from runner.execution.pool import Pool
from runner.inrun.cgroups import PARENT_PREFIX, RUN_PREFIX
from runner.outcome import Status
from runner.processes.isolation import IsolationPlan, plan_isolation
from tests.helpers import in_mode, settled_async
from tests.helpers import run_dedented as run

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["bwrap", "namespaces"])
def plan_and_config(config: Config, request: pytest.FixtureRequest) -> tuple[IsolationPlan, Config]:
    """Each sandbox, with no interpreter started ahead (so every run cgroup seen is a test's run's)."""
    sandboxed = in_mode(config, str(request.param), pool_size=0, max_concurrent=2)
    plan = plan_isolation(sandboxed)
    if plan.cgroups is None:
        pytest.skip(f"no cgroups here: {plan.cgroup_reason}")
    return plan, sandboxed


@pytest.fixture
async def pool(plan_and_config: tuple[IsolationPlan, Config], no_leaks: None) -> AsyncIterator[Pool]:
    plan, sandboxed = plan_and_config
    async with Pool.open(sandboxed, plan=plan, reap_strays=True) as pool:
        yield pool
    assert parents_of_this_server(plan) == []


def parents_of_this_server(plan: IsolationPlan) -> list[str]:
    assert plan.cgroups is not None
    mark = f"{PARENT_PREFIX}{os.getpid()}-"
    return sorted(path for d in plan.cgroups.directories for path in glob.glob(os.path.join(d, mark + "*")))


def run_cgroups(plan: IsolationPlan) -> list[str]:
    """Every run cgroup under this server's parents, in every hierarchy."""
    return sorted(path for parent in parents_of_this_server(plan) for path in glob.glob(f"{parent}/{RUN_PREFIX}*"))


async def no_run_cgroup_left(plan: IsolationPlan) -> list[str]:
    return await settled_async(lambda: run_cgroups(plan))


async def test_twelve_processes_of_150_mib_end_as_memory_limit_and_leave_nothing(
    pool: Pool, plan_and_config: tuple[IsolationPlan, Config]
) -> None:
    result = await run(
        pool,
        """
        import os, time
        for _ in range(12):
            if os.fork() == 0:
                block = bytearray(150 << 20)
                for i in range(0, len(block), 4096):
                    block[i] = 1
                time.sleep(30)
                os._exit(0)
        time.sleep(30)
        """,
        timeout=20,
    )
    assert result.status is Status.MEMORY_LIMIT, result
    assert "whole run" in result.message
    await pool.quiesced()
    assert await no_run_cgroup_left(plan_and_config[0]) == []


async def test_tmp_and_dev_shm_filled_count_against_the_same_budget(
    plan_and_config: tuple[IsolationPlan, Config], no_leaks: None
) -> None:
    # 2 x 80 MiB of tmpfs, then 120 MiB of the process's own: each fits its own limit (RLIMIT_AS of
    # 256 MiB, the tmpfs sizes), together they do not fit the run's 256 MiB.
    plan, sandboxed = plan_and_config
    config = dataclasses.replace(sandboxed, sandbox_tmp_mb=80)
    async with Pool.open(config, reap_strays=True) as pool:
        result = await run(
            pool,
            """
            for directory in ("/tmp", "/dev/shm"):
                try:
                    for n in range(20):  # files of 8 MiB: each within the file size limit
                        with open(f"{directory}/fill-{n}", "wb") as f:
                            f.write(b"x" * (8 << 20))
                except OSError:
                    pass  # full: the tmpfs's size
            block = bytearray(120 << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            print("fits")
            """,
            timeout=20,
        )
    assert result.status is Status.MEMORY_LIMIT, result
    assert "fits" not in result.stdout.text
    assert parents_of_this_server(plan) == []


async def test_a_fork_flood_never_has_more_than_max_processes_and_a_small_call_is_answered(
    pool: Pool, plan_and_config: tuple[IsolationPlan, Config]
) -> None:
    plan, config = plan_and_config
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        # From the host: the tasks (processes and threads) in every run cgroup's pids hierarchy.
        while not stop.is_set():
            for path in run_cgroups(plan):
                try:
                    with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as procs:
                        seen.append(len(procs.read().split()))
                except OSError:
                    continue
            stop.wait(0.005)

    flood = """
        import os, time
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            try:
                if os.fork() == 0:
                    time.sleep(10)
                    os._exit(0)
            except OSError:
                time.sleep(0.01)
        """
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        async with anyio.create_task_group() as tg:
            flooded: list[object] = []

            async def flood_run() -> None:
                flooded.append(await run(pool, flood, timeout=6))

            tg.start_soon(flood_run)
            await settled_async(lambda: not any(n > 2 for n in seen), timeout=10)
            small = await run(pool, "print(6 * 7)")
            assert small.status is Status.OK
            assert small.stdout.text.strip() == "42"
    finally:
        stop.set()
        watcher.join()
    assert seen, "the flood's cgroup was never seen"
    assert max(seen) <= config.max_processes
    assert max(seen) > config.max_processes // 2  # the flood did fill it


async def test_no_run_cgroup_is_left_after_300_runs_and_the_parent_goes_with_the_server(
    pool: Pool, plan_and_config: tuple[IsolationPlan, Config]
) -> None:
    async def one(n: int) -> None:
        result = await run(pool, f"print({n})")
        assert result.status is Status.OK

    for start in range(0, 300, 10):
        async with anyio.create_task_group() as tg:
            for n in range(start, start + 10):
                tg.start_soon(one, n)
    await pool.quiesced()
    assert await no_run_cgroup_left(plan_and_config[0]) == []
    # (the pool fixture checks that the parents are gone once the pool has stopped)


async def test_a_run_can_neither_see_nor_write_its_limits(
    pool: Pool, plan_and_config: tuple[IsolationPlan, Config]
) -> None:
    plan, _ = plan_and_config
    result = await run(
        pool,
        """
        import os
        print(os.path.isdir("/sys/fs/cgroup") and os.listdir("/sys/fs/cgroup"))
        print(open("/proc/self/cgroup").read())
        for path in ("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                     "/sys/fs/cgroup/memory.max"):
            try:
                open(path, "w").write("max")
                print("wrote", path)
            except OSError as exc:
                print("refused", exc.errno)
        """,
    )
    assert result.status is Status.OK, result
    first, *rest = result.stdout.text.splitlines()
    assert first == "False"  # no /sys/fs/cgroup in the view
    assert "wrote" not in result.stdout.text
    if plan.mode == "namespaces":
        # In a cgroup namespace of its own, rooted at its cgroup.
        lines = [line for line in rest if line.count(":") >= 2]
        assert lines
        assert all(line.split(":", 2)[2] == "/" for line in lines), lines
