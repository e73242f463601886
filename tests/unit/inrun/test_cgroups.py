"""The cgroup layout decided from the text of /proc/self/cgroup and /proc/self/mountinfo, and the
limits and tokens every run's cgroup gets: pure functions, over fake text and control files."""

from __future__ import annotations

from runner.inrun.cgroups import (
    detect,
    limit_writes,
    parse_counter,
    parse_mountinfo,
    parse_proc_cgroup,
    parse_tokens,
    tokens,
)

HYBRID_CGROUP = "8:pids:/\n4:memory:/jobs/a\n1:cpu:/\n0::/\n"
HYBRID_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V2_MOUNTS = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def files(contents: dict[str, str]) -> object:
    def read(path: str) -> str:
        if path not in contents:
            raise FileNotFoundError(path)
        return contents[path]

    return read


def test_proc_cgroup_names_each_controllers_path_and_the_unified_one_as_empty() -> None:
    assert parse_proc_cgroup(HYBRID_CGROUP) == {"pids": "/", "memory": "/jobs/a", "cpu": "/", "": "/"}


def test_mountinfo_finds_the_cgroup_mounts_their_type_and_whether_read_only() -> None:
    mounts = parse_mountinfo(HYBRID_MOUNTS + "50 23 0:40 / /ro ro,relatime - cgroup cgroup rw,pids\n")
    assert [(m[0], m[2], m[3]) for m in mounts][-2:] == [
        ("/sys/fs/cgroup/unified", "cgroup2", False),
        ("/ro", "cgroup", True),
    ]
    assert "memory" in mounts[1][4]


def test_a_hybrid_machine_whose_v2_lacks_the_controllers_uses_v1_memory_and_pids() -> None:
    read = files(
        {"/sys/fs/cgroup/unified/cgroup.controllers": "hugetlb\n", "/sys/fs/cgroup/unified/cgroup.subtree_control": ""}
    )
    layout = detect(HYBRID_CGROUP, HYBRID_MOUNTS, root=True, read=read, writable=lambda _: True)
    assert layout.version == 1
    assert layout.dirs == {"memory": "/sys/fs/cgroup/memory/jobs/a", "pids": "/sys/fs/cgroup/pids"}
    assert "no memory, pids controller" in layout.reason


def test_a_delegated_v2_subtree_that_hands_nothing_down_yet_makes_the_server_move_into_a_leaf() -> None:
    own = "0::/system.slice/runner.service\n"
    base = "/sys/fs/cgroup/system.slice/runner.service"
    read = files({base + "/cgroup.controllers": "cpu memory pids\n", base + "/cgroup.subtree_control": "\n"})
    layout = detect(own, V2_MOUNTS, root=False, read=read, writable=lambda _: True)
    assert (layout.version, layout.leaf) == (2, True)
    assert layout.dirs == {"memory": base, "pids": base}
    assert "delegated" in layout.reason
    assert "moved into" in layout.reason


def test_a_delegated_v2_subtree_already_handing_down_needs_no_move() -> None:
    base = "/sys/fs/cgroup/x"
    read = files({base + "/cgroup.controllers": "memory pids", base + "/cgroup.subtree_control": "memory pids"})
    layout = detect("0::/x\n", V2_MOUNTS, root=False, read=read, writable=lambda _: True)
    assert (layout.version, layout.leaf) == (2, False)


def test_the_v2_root_cgroup_may_hand_controllers_down_while_holding_processes() -> None:
    read = files({"/sys/fs/cgroup/cgroup.controllers": "memory pids io", "/sys/fs/cgroup/cgroup.subtree_control": ""})
    layout = detect("0::/\n", V2_MOUNTS, root=True, read=read, writable=lambda _: True)
    assert (layout.version, layout.leaf) == (2, False)
    assert layout.reason == "v2 root"


def test_a_read_only_cgroup_file_system_gives_none_and_says_so() -> None:
    mounts = "30 23 0:27 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n"
    read = files({"/sys/fs/cgroup/cgroup.controllers": "memory pids", "/sys/fs/cgroup/cgroup.subtree_control": ""})
    layout = detect("0::/\n", mounts, root=False, read=read, writable=lambda _: False)
    assert layout.version == 0
    assert "/sys/fs/cgroup is read-only" in layout.reason


def test_a_non_root_server_without_a_delegated_subtree_gets_none() -> None:
    base = "/sys/fs/cgroup/user.slice"
    read = files({base + "/cgroup.controllers": "memory pids", base + "/cgroup.subtree_control": ""})
    layout = detect("0::/user.slice\n", V2_MOUNTS, root=False, read=read, writable=lambda _: False)
    assert layout.version == 0
    assert "not delegated" in layout.reason


def test_v1_with_only_a_writable_pids_hierarchy_holds_pids_and_says_why_not_memory() -> None:
    layout = detect(HYBRID_CGROUP, HYBRID_MOUNTS, root=False, read=files({}), writable=lambda p: "pids" in p)
    assert layout.dirs == {"pids": "/sys/fs/cgroup/pids"}
    assert "/sys/fs/cgroup/memory/jobs/a is not writable" in layout.reason


def test_no_cgroup_mount_at_all_gives_none() -> None:
    assert detect("", "", root=True, read=files({}), writable=lambda _: True).version == 0


def test_v2_limits_are_pids_memory_no_swap_and_the_whole_group_killed_together() -> None:
    assert limit_writes(2, 32, 1 << 28) == [
        ("pids.max", "32"),
        ("memory.max", str(1 << 28)),
        ("memory.swap.max", "0"),
        ("memory.oom.group", "1"),
    ]


def test_v1_limits_set_memsw_after_the_memory_limit_it_may_not_be_below() -> None:
    names = [name for name, _ in limit_writes(1, 32, 1 << 28)]
    assert names.index("memory.limit_in_bytes") < names.index("memory.memsw.limit_in_bytes")


def test_v1_limits_bound_the_runs_tcp_buffers_by_its_memory_limit() -> None:
    assert ("memory.kmem.tcp.limit_in_bytes", str(1 << 28)) in limit_writes(1, 32, 1 << 28)


def test_the_zygotes_tokens_round_trip_whatever_their_position() -> None:
    writes = limit_writes(1, 32, 1 << 28)
    made = tokens(["/sys/fs/cgroup/memory/p", "/sys/fs/cgroup/pids/p"], writes)
    assert parse_tokens(["/keep", "!hide", *reversed(made), "+/usr"]) == (
        ["/sys/fs/cgroup/pids/p", "/sys/fs/cgroup/memory/p"],
        writes,
    )
    assert tokens([], writes) == []


def test_oom_kills_are_read_from_memory_events_or_oom_control() -> None:
    assert parse_counter("low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\noom_group_kill 1\n", "oom_kill") == 1
    assert parse_counter("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill") == 3
    assert parse_counter("under_oom 0\n", "oom_kill") == 0
