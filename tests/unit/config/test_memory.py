"""What the server can hold, from /proc and cgroup texts, and the sessions' share of it: pure functions."""

from __future__ import annotations

import dataclasses

import pytest

from runner.config import Config
from runner.config.memory import available_bytes, cgroup_limit_files, sessions_budget
from runner.config.settings import MIB
from runner.errors import ConfigError

MEMINFO = "MemTotal:       24000000 kB\nMemFree:        20000000 kB\n"


def test_what_the_server_can_hold_is_the_least_of_the_machines_memory_and_its_cgroups_limit() -> None:
    assert available_bytes(MEMINFO, []) == 24_000_000 * 1024
    assert available_bytes(MEMINFO, ["536870912\n"]) == 512 * MIB  # a container's --memory=512m
    assert available_bytes(MEMINFO, ["max\n", "9223372036854771712\n"]) == 24_000_000 * 1024  # none set


def test_the_limit_is_looked_for_where_v1_and_v2_keep_it() -> None:
    assert cgroup_limit_files("0::/pod/server\n") == [
        "/sys/fs/cgroup/pod/server/memory.max",
        "/sys/fs/cgroup/memory.max",
    ]
    assert cgroup_limit_files("4:memory:/jobs/a\n1:cpu:/\n") == [
        "/sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]


def test_by_default_sessions_may_keep_half_of_what_the_server_holds_and_no_more_than_their_caps() -> None:
    config = Config()
    assert sessions_budget(config, 512 * MIB) == 256 * MIB
    assert sessions_budget(config, 64 * 1024 * MIB) == 16 * 256 * MIB  # RUNNER_MAX_SESSIONS x RUNNER_MAX_MEMORY_MB


def test_a_budget_set_beyond_what_the_server_can_hold_stops_it_naming_the_variable() -> None:
    config = dataclasses.replace(Config(), sessions_memory_mb=1024)
    assert sessions_budget(config, 2048 * MIB) == 1024 * MIB
    with pytest.raises(ConfigError, match="RUNNER_SESSIONS_MEMORY_MB: 1024 MiB is more than the 512 MiB"):
        sessions_budget(config, 512 * MIB)
