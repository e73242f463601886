"""The rlimits a run is held to, worked out without processes: room for each sandbox's own processes."""

from __future__ import annotations

from runner.config import Config
from runner.processes.isolation import IsolationPlan
from runner.processes.limits import limits_for


def test_rlimit_nproc_leaves_room_for_each_sandbox_s_own_processes(config: Config) -> None:
    # Every pooled or running interpreter has its sandbox's processes beside it, of the same uid.
    interpreters = config.pool_size + config.max_concurrent
    plain = limits_for(config.limits, config.pool, 100, IsolationPlan("none", "")).nproc
    assert limits_for(config.limits, config.pool, 100, IsolationPlan("none-posix-spawn", "")).nproc == plain
    assert limits_for(config.limits, config.pool, 100, IsolationPlan("namespaces", "")).nproc == plain + interpreters
    assert limits_for(config.limits, config.pool, 100, IsolationPlan("bwrap", "")).nproc == plain + 2 * interpreters


def test_rlimit_nproc_leaves_room_for_the_preloading_zygote_s_pool_too(config: Config) -> None:
    lean = limits_for(config.limits, config.pool, 100, IsolationPlan("none", "")).nproc
    preloading = limits_for(config.limits, config.pool, 100, IsolationPlan("none", "", preload=("json",))).nproc
    assert preloading == lean + config.pool_size
