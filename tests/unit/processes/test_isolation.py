"""The isolation plan without probing: each RUNNER_SANDBOX value one way to make and isolate runs, and
what the sandboxes bind into a run's view."""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from pathlib import Path

import pytest

from runner.config import Config, disk
from runner.config.disk import open_environment
from runner.errors import Unavailable
from runner.processes.cgroups import CgroupPlan
from runner.processes.isolation import (
    CERTIFICATES,
    HIDDEN,
    NETWORK_VIEW,
    IsolationPlan,
    _require_tcp_bound,
    plan_isolation,
    shown_in_run_directory,
    view_binds,
)
from tests.helpers import fake_env


def test_each_sandbox_value_is_one_way_to_make_and_isolate_runs(config: Config) -> None:
    # Forking and spawning are part of the value: bubblewrap with forked runs, or the zygote's
    # namespaces with spawned ones, cannot be asked for.
    preloading = dataclasses.replace(config, preload=("json",))
    forked = plan_isolation(dataclasses.replace(preloading, sandbox="none"))
    spawned = plan_isolation(dataclasses.replace(preloading, sandbox="none-posix-spawn"))
    assert (forked.forked, forked.sandboxed, forked.spawn_mode, forked.sandbox) == (True, False, "fork-server", "none")
    assert (spawned.forked, spawned.sandboxed, spawned.spawn_mode, spawned.sandbox) == (
        False,
        False,
        "posix-spawn",
        "none",
    )
    assert (forked.preload, forked.supplies, spawned.preload, spawned.supplies) == (("json",), 2, (), 1)
    assert (forked.runs_share_files, spawned.runs_share_files) == (True, True)
    assert (IsolationPlan("namespaces", "").forked, IsolationPlan("bwrap", "").forked) == (True, False)
    assert not IsolationPlan("namespaces", "").runs_share_files


def test_a_package_environment_under_a_directory_the_sandbox_hides_is_bound_back(tmp_path: Path) -> None:
    # /tmp is each sandboxed run's own tmpfs: an environment under it (a checkout in /tmp) was out of
    # the runs' sight, and matplotlib failed to draw.
    from runner.processes.isolation import bwrap_argv, namespace_args

    with tempfile.TemporaryDirectory(dir="/tmp") as under_tmp:
        packaged = open_environment(Config.from_env({"RUNNER_PACKAGES": str(fake_env(Path(under_tmp) / "env", {}))}))
        assert packaged.packages in namespace_args(packaged.isolation)
        argv = bwrap_argv("/usr/bin/bwrap", packaged.isolation)
        assert argv[argv.index(packaged.packages) - 1] == "--ro-bind"


def test_what_is_bound_back_under_a_run_s_directory_is_what_the_plan_says_it_shows(tmp_path: Path) -> None:
    # The tool's description names it; the wheelhouse cache's default stays out of the directories the
    # sandboxes replace (runner.config.disk cannot import them: they are tied here).
    assert (*HIDDEN, "/dev/shm") == disk.SANDBOX_REPLACED
    # A real interpreter (an empty `python` is the working directory's, /tmp's in a clone under it).
    assert shown_in_run_directory(dataclasses.replace(Config(), python=sys.executable).isolation) == ()
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="a-checkout-") as under_tmp:
        packaged = open_environment(Config.from_env({"RUNNER_PACKAGES": str(fake_env(Path(under_tmp) / "env", {}))}))
        assert shown_in_run_directory(packaged.isolation) == (os.path.basename(under_tmp),)


def test_the_view_holds_the_system_the_interpreter_and_the_packages_and_name_lookups_only_with_a_network(
    config: Config, tmp_path: Path
) -> None:
    packages = tmp_path / "env"
    packages.mkdir()
    binds = view_binds(dataclasses.replace(config, packages=str(packages)).isolation)
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(config.python)))
    assert binds[0] == "/usr"
    assert str(packages) in binds
    assert any(prefix == held or prefix.startswith(held + "/") for held in binds), "the interpreter's own prefix"
    assert not any(path.startswith(("/home", "/var", "/srv", "/opt")) for path in binds if path != str(packages))
    lookups = [path for path in NETWORK_VIEW if os.path.lexists(path)]
    assert not set(lookups) & set(binds), "no network: nothing to look names up with"
    shared = view_binds(dataclasses.replace(config, sandbox_network="shared").isolation)
    assert set(lookups) <= set(shared)
    # With egress, the certificate authorities, and still no name lookups: the proxy looks names up.
    egress = view_binds(dataclasses.replace(config.isolation, egress_port=3128))
    authorities = [path for path in CERTIFICATES if os.path.lexists(path)]
    assert set(authorities) <= set(egress)
    assert not (set(lookups) - set(authorities)) & set(egress)


def test_a_zygote_is_told_to_keep_one_pid_namespace_per_process_of_its_that_can_hold_one() -> None:
    from runner.inrun.namespaces import Isolation
    from runner.processes.isolation import kept_pid_namespaces, namespace_args

    config = Config(pool_size=3, max_concurrent=5, max_sessions=7)
    assert kept_pid_namespaces(config.isolation) == 3 + 5 + 7
    assert Isolation(list(namespace_args(config.isolation)[1:])).spaces == 15
    assert Isolation(list(namespace_args(dataclasses.replace(config, max_sessions=0).isolation)[1:])).spaces == 8


def test_egress_stops_the_server_where_no_memory_cgroup_bounds_a_runs_tcp_buffers(tmp_path: Path) -> None:
    isolation = Config.from_env({"RUNNER_EGRESS_ALLOW": "pypi.org"}).isolation
    with pytest.raises(Unavailable, match="cannot make the runs' cgroups here"):
        _require_tcp_bound(isolation, None, "not root")
    no_tcp = CgroupPlan(1, (("memory", str(tmp_path)),), (), "")
    with pytest.raises(Unavailable, match=r"has no memory\.kmem\.tcp\.limit_in_bytes"):
        _require_tcp_bound(isolation, no_tcp, "")
    (tmp_path / "memory.kmem.tcp.limit_in_bytes").write_text("0")
    _require_tcp_bound(isolation, no_tcp, "")
    _require_tcp_bound(isolation, CgroupPlan(2, (("memory", str(tmp_path)),), (), ""), "")
    with pytest.raises(Unavailable, match="memory controller"):
        _require_tcp_bound(isolation, CgroupPlan(2, (("pids", str(tmp_path)),), (), ""), "")
    _require_tcp_bound(Config.from_env({}).isolation, None, "not root")  # without egress: nothing asked
