"""A run's cgroup on its own, with the host's real hierarchies (root, where the plan has cgroups)."""

from __future__ import annotations

import logging
import os
import tempfile

import pytest

from runner.config import Config
from runner.execution.supply import Supplies
from runner.inrun.cgroups import RunCgroups
from runner.processes.cgroups import CgroupPlan, Parent, plan_cgroups
from runner.processes.isolation import plan_isolation
from runner.processes.limits import Limits
from tests.helpers import in_mode

pytestmark = pytest.mark.anyio


@pytest.fixture
def cgroups() -> CgroupPlan:
    plan, why = plan_cgroups(Config().limits)
    if plan is None:
        pytest.skip(f"no cgroups here: {why}")
    return plan


def test_a_run_cgroup_that_outlives_its_parents_fds_is_still_removed_by_its_own(cgroups: CgroupPlan) -> None:
    # A source may stop before an interpreter it made is destroyed: the run's cgroup must not remove by
    # an fd the parents' closing freed (EBADF, or another file's once reused).
    parent = Parent(cgroups)
    try:
        runs = RunCgroups(parent.paths, list(cgroups.writes))
        run = runs.make()
        runs.close()
        reused = [os.open("/", os.O_RDONLY) for _ in range(4)]  # take the freed numbers
        try:
            assert run.remove()
        finally:
            for fd in reused:
                os.close(fd)
        assert not any(os.path.exists(os.path.join(path, run.name)) for path in parent.paths)
    finally:
        parent.remove()
    assert not any(os.path.exists(path) for path in parent.paths)


async def test_closing_the_supplies_ends_every_pooled_interpreter_before_its_source_s_cgroup_parent(
    config: Config, cgroups: CgroupPlan
) -> None:
    # The pool's shutdown runs before its refill task has stopped: one made meanwhile is still pooled
    # when the supplies close, and must end before the parent its cgroup is in is removed.
    sandboxed = in_mode(config, "bwrap", pool_size=1)
    plan = plan_isolation(sandboxed)
    if plan.cgroups is None:
        pytest.skip(f"no cgroups here: {plan.cgroup_reason}")
    limits = Limits(5, sandboxed.memory_bytes, sandboxed.max_processes, sandboxed.file_size_bytes)
    mark = f"python-runner-{os.getpid()}-"

    def parents() -> list[str]:
        assert plan.cgroups is not None
        return [name for d in plan.cgroups.directories for name in os.listdir(d) if name.startswith(mark)]

    with tempfile.TemporaryDirectory(dir=sandboxed.work_dir) as base:
        async with Supplies.opened(sandboxed, plan, base, limits, logging.getLogger("tests.cgroups")) as supplies:
            supply = supplies.all[0]
            child = await supply._start_ready()
            supply._ready.append(child)  # pooled, as a late refill leaves it
            assert parents(), "the source's parent, with the interpreter's cgroup in it"
        assert child.reaped
    assert parents() == []
