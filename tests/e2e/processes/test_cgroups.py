"""Whole-run limits through cgroups, checked from the host in both sandboxes: a run's tree is held to
its memory budget (tmpfs included) and its process count, its cgroup goes after it (or, in the
namespaced zygote, is kept empty with its kept PID namespace and lent to a later run with its whole
budget), the parent after the server, and the run can neither see nor change its limits."""

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
from runner.processes.isolation import IsolationPlan, kept_pid_namespaces, plan_isolation
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


def left_behind(plan: IsolationPlan, config: Config) -> list[str]:
    """Run cgroups left behind: any with a process in it; and, for bubblewrap (a cgroup made per run),
    any at all; the namespaced zygote keeps one with each kept PID namespace, empty between its runs,
    and no more than it may keep namespaces."""
    paths = run_cgroups(plan)
    busy = [path for path in paths if _processes_in(path)]
    if plan.mode != "namespaces":
        return paths
    names = {os.path.basename(path) for path in paths}
    return busy or (paths if len(names) > kept_pid_namespaces(config.isolation) else [])


def _processes_in(path: str) -> bool:
    try:
        with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as procs:
            return bool(procs.read().split())
    except OSError:
        return False  # gone meanwhile


async def no_run_cgroup_left(plan: IsolationPlan, config: Config) -> list[str]:
    return await settled_async(lambda: left_behind(plan, config))


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
    assert await no_run_cgroup_left(*plan_and_config) == []


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


async def test_a_run_lent_an_earlier_run_s_cgroup_has_its_whole_budget_and_none_of_its_oom_kills(
    plan_and_config: tuple[IsolationPlan, Config], no_leaks: None
) -> None:
    # One call at a time, no interpreter started ahead, no session: the namespaced zygote keeps one PID
    # namespace, and every run is lent it and its cgroup. The first ends killed for memory; the second fills its
    # tmpfs (2 x 70 MiB, all of the run's budget but 116 MiB) and ends; the third then takes 200 MiB of
    # its own 256: it fits only if nothing of the second's tmpfs is still charged; and none of them, nor a
    # fourth killed by a signal, is said to have met the memory limit for the first's OOM kill.
    plan, sandboxed = plan_and_config
    config = dataclasses.replace(sandboxed, sandbox_tmp_mb=80, max_concurrent=1, max_sessions=0)
    async with Pool.open(config, reap_strays=True) as pool:
        killed = await run(
            pool,
            """
            import os, time
            for _ in range(4):  # 4 x 100 MiB: each within its own RLIMIT_AS, together past the cgroup's
                if os.fork() == 0:
                    block = bytearray(100 << 20)
                    for i in range(0, len(block), 4096):
                        block[i] = 1
                    time.sleep(30)
            time.sleep(30)
            """,
            timeout=20,
        )
        filled = await run(
            pool,
            """
            for directory in ("/tmp", "/dev/shm"):
                for n in range(7):
                    with open(f"{directory}/fill-{n}", "wb") as f:
                        f.write(b"x" * (10 << 20))
            print("filled")
            """,
            timeout=20,
        )
        took = await run(
            pool,
            """
            block = bytearray(200 << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            print("fits")
            """,
            timeout=20,
        )
        # A run that does not tell its own end is answered from its exit, with its cgroup's OOM kills.
        signalled = await run(pool, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        if plan.mode == "namespaces":
            names = {os.path.basename(path) for path in run_cgroups(plan)}
            assert len(names) == 1, f"the three runs were not lent one cgroup: {names}"
    assert killed.status is Status.MEMORY_LIMIT, killed
    assert "whole run" in killed.message  # the cgroup's OOM kill, not one process's MemoryError
    assert (filled.status, filled.stdout.text) == (Status.OK, "filled\n"), filled
    assert (took.status, took.stdout.text) == (Status.OK, "fits\n"), took
    assert signalled.status is Status.SIGNAL, signalled
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
    assert await no_run_cgroup_left(*plan_and_config) == []
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
