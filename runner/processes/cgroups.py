"""Whole-run limits in cgroups, the server's side (runner/inrun/cgroups.py is the run's): the layout decided at start
(`plan_cgroups`, a field of the `IsolationPlan`), the per-source parent made and removed (`Parent`),
and a bubblewrap run's own cgroup (`Parent.make_run`).

The in-run half (runner/inrun/cgroups.py, stdlib only) parses the layout and makes each run's cgroup;
the namespaced zygote makes its runs' itself, under the parent's directories it is given as
``cgroup=`` tokens. Every cgroup made is removed: a run's after its last process is gone, a parent
when its source stops (its children first), and the parents a dead server left behind at the next
start.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from dataclasses import dataclass

from runner.config import LimitsConfig
from runner.inrun import cgroups as inrun
from runner.inrun.cgroups import PARENT_PREFIX, RunCgroup, RunCgroups

# How long a stopping source's leftovers (runs of a zygote that died, still exiting) are waited for.
PARENT_PATIENCE = 2.0


@dataclass(frozen=True, slots=True)
class CgroupPlan:
    """Where runs' cgroups go and what they get: the version, the server's own cgroup directory for
    each controller that holds (`dirs`: v2 one for both), and the limit files every run's gets."""

    version: int
    dirs: tuple[tuple[str, str], ...]  # (controller, directory)
    writes: tuple[tuple[str, str], ...]
    reason: str

    @property
    def held(self) -> tuple[str, ...]:
        """The controllers that bound runs: pids, memory, or both."""
        return tuple(sorted(controller for controller, _ in self.dirs))

    def tcp_unbounded(self) -> str:
        """Why a run's TCP buffers would not count against its memory limit ("" if they do): v2 counts them
        in memory.max; v1 only where the kernel still has memory.kmem.tcp.limit_in_bytes."""
        memory = dict(self.dirs).get("memory")
        if memory is None:
            return "the memory controller is not among the runs' cgroups"
        if self.version == 1 and not os.path.exists(os.path.join(memory, "memory.kmem.tcp.limit_in_bytes")):
            return "this kernel's cgroup v1 has no memory.kmem.tcp.limit_in_bytes"
        return ""

    @property
    def directories(self) -> list[str]:
        """The distinct directories (one per hierarchy) a parent is made in."""
        return list(dict.fromkeys(directory for _, directory in self.dirs))

    def describe(self) -> str:
        """The start-up line's ``cgroup`` field: which limits hold, where, and why the others do not."""
        where = ", ".join(self.directories)
        return f"v{self.version} at {where}: {', '.join(self.held)} ({self.reason})"


def plan_cgroups(limits: LimitsConfig) -> tuple[CgroupPlan | None, str]:
    """The cgroup layout for a sandboxed mode (None and why not where it cannot work). A v2 server
    that must hand controllers down moves itself into a leaf first (`inrun.LEAF_NAME`). Each
    directory is tried with a mkdir and rmdir before it is planned."""
    try:
        with (
            open("/proc/self/cgroup", encoding="ascii") as own,
            open("/proc/self/mountinfo", encoding="utf-8") as mounts,
        ):
            layout = inrun.detect(own.read(), mounts.read(), root=os.geteuid() == 0)
    except OSError as exc:
        return None, f"cannot read /proc: {exc.strerror}"
    if layout.version == 0:
        return None, layout.reason
    if layout.leaf:
        problem = _enter_leaf(layout.dirs["memory"])
        if problem:
            return None, problem
    dirs = []
    problems = []
    for controller, directory in layout.dirs.items():
        problem = _try_mkdir(directory)
        if problem:
            problems.append(f"{controller}: {problem}")
        else:
            dirs.append((controller, directory))
    if not dirs:
        return None, "; ".join(problems)
    # Threads count in pids.max ("PIDs used in this controller refer to TIDs"): the bootstrap's
    # OPENBLAS/OMP threads are one, and a run's set-up adds none (the kept PID namespace's init is the
    # zygote's child, outside the run's cgroup; bubblewrap and its init stay outside too), so the run's
    # interpreter and everything it starts share RUNNER_MAX_PROCESSES.
    writes = inrun.limit_writes(layout.version, limits.max_processes, limits.memory_bytes)
    held = {controller for controller, _ in dirs}
    wanted = tuple(write for write in writes if write[0].split(".")[0] in held)
    reason = "; ".join([layout.reason, *problems])
    return CgroupPlan(layout.version, tuple(dirs), wanted, reason), ""


def _try_mkdir(directory: str) -> str:
    probe = os.path.join(directory, f"{PARENT_PREFIX}probe-{os.getpid()}")
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError as exc:
        return f"cannot make a cgroup in {directory}: {exc.strerror}"
    return ""


def _enter_leaf(directory: str) -> str:
    """v2: move the server into a leaf of its own cgroup, then hand memory and pids down; why not, or ''."""
    leaf = os.path.join(directory, inrun.LEAF_NAME)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(leaf)
        with open(os.path.join(leaf, "cgroup.procs"), "w", encoding="ascii") as procs:
            procs.write("0")
        with open(os.path.join(directory, "cgroup.subtree_control"), "w", encoding="ascii") as control:
            control.write(" ".join("+" + c for c in inrun.WANTED))
    except OSError as exc:
        return f"v2: cannot hand memory and pids down from {directory}: {exc.strerror}"
    return ""


class Parent:
    """One source's parent cgroup, ``python-runner-<server pid>-<n>`` in each hierarchy: made when the
    source starts, removed (with whatever run cgroups are left in it) when it stops."""

    def __init__(self, plan: CgroupPlan) -> None:
        self.plan = plan
        remove_leftovers(plan.directories)
        name = f"{PARENT_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"  # one per source of this server
        self.paths: list[str] = []
        try:
            for directory in plan.directories:
                path = os.path.join(directory, name)
                os.mkdir(path, 0o755)
                self.paths.append(path)
                if plan.version == 2:
                    with open(os.path.join(path, "cgroup.subtree_control"), "w", encoding="ascii") as control:
                        control.write(" ".join("+" + c for c in plan.held))
            self._runs = RunCgroups(self.paths, list(plan.writes))
        except OSError:
            self.remove()
            raise

    def tokens(self) -> list[str]:
        """What the zygote is told of this parent (`inrun.tokens`)."""
        return inrun.tokens(self.paths, list(self.plan.writes))

    def make_run(self) -> RunCgroup:
        """A run's cgroup, made by the server (bubblewrap's runs: the bootstrap moves itself in)."""
        return self._runs.make()

    def remove_runs_of(self, zygote: int) -> None:
        """Remove the run cgroups a zygote that is gone left (its runs die with its namespaces)."""
        mark = f"{inrun.RUN_PREFIX}{zygote}-"
        for path in self.paths:
            with contextlib.suppress(OSError):
                for name in os.listdir(path):
                    if name.startswith(mark):
                        remove_cgroup_tree(os.path.join(path, name), PARENT_PATIENCE)

    def remove(self) -> None:
        """Remove the parent and every cgroup left in it, waiting a little for processes still exiting."""
        runs = getattr(self, "_runs", None)
        if runs is not None:
            runs.close()
        for path in self.paths:
            remove_cgroup_tree(path, PARENT_PATIENCE)
        self.paths = []


def remove_cgroup_tree(path: str, patience: float = 0.0) -> bool:
    """rmdir a cgroup and the cgroups below it, deepest first (a cgroup's files go with it); EBUSY
    (a process still in one) is tried again for `patience` seconds. True once it is gone."""
    deadline = time.monotonic() + patience
    while True:
        try:
            for top, subdirs, _ in os.walk(path, topdown=False):
                for sub in subdirs:
                    with contextlib.suppress(FileNotFoundError):
                        os.rmdir(os.path.join(top, sub))
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(path)
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def remove_leftovers(directories: list[str]) -> list[str]:
    """Remove the parents of servers that are gone (the pid in the name is no process); what was removed."""
    removed = []
    for directory in directories:
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            pid = name[len(PARENT_PREFIX) :].split("-")[0]
            if name.startswith(PARENT_PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                path = os.path.join(directory, name)
                if remove_cgroup_tree(path):
                    removed.append(path)
    return removed
