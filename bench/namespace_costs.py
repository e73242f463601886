"""What each namespace costs a forked run: the numbers behind the namespaced fork server's choices.

    python bench/namespace_costs.py [--runs N]

A small parent (this interpreter, the standard library and runner/inrun/namespaces.py loaded,
and the view runs share prepared, like the zygote) clones a child into one kind of namespace, or
into all of them with an init that builds the run's view and forks the run, and the child exits; the
parent waits for it. Every variant runs in the same invocation, interleaved round by round, so that
machine noise hits all of them alike. Printed per variant: the wall time from fork to reaped (p50,
p90: the namespace's set-up and the teardown the exit waits for), the CPU time of the processes (p50
of utime + stime of the reaped children), and both over plain fork. Kernel work done later on a
worker thread (a network namespace's cleanup) is not in them; the next lines measure it the way it
shows: back-to-back runs, with and without one network namespace each, and with one lent from those
made before, as the zygote did until a lent one was found to carry its counters from run to run.
(One empty network namespace shared by every run costs what the host's network costs: it is made
once. It is not an option: concurrent runs sharing it could meet on abstract unix sockets, see
tests/e2e/inrun/test_namespaces.py, and read each other's counters.) The last lines compare a whole run
made with a PID namespace and an init of its own with the zygote's way (the run forked into a kept PID
namespace whose init cleans up after it, pidspaces.py), with a network namespace lent and with one of
the run's own (the zygote's way now), back to back, all CPU counted: this process's, its children's
and the kept inits', and the whole machine's from /proc/stat (which includes the kernel's teardown
of network namespaces on its worker threads, and whatever else the machine did meanwhile).

Run as root, or where user namespaces are allowed (it enters one of its own first, as the zygote
does without CAP_SYS_ADMIN). This is a script that prints numbers; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "runner" / "inrun"))
import cgroups  # noqa: E402  (the zygote's own modules, imported as the zygote imports them)
import libc  # noqa: E402
import namespaces  # noqa: E402
import pidspaces  # noqa: E402

sys.path.insert(1, str(REPO))
from runner.config import Config  # noqa: E402  (after the zygote's modules, as they are loaded there)
from runner.processes.cgroups import plan_cgroups  # noqa: E402

TMP_BYTES = 32 << 20


def in_child(setup: Callable[[], None], namespaces_flags: int | None = None) -> Callable[[], None]:
    """A variant: fork (os.fork), or clone into these namespaces as the zygote does, run `setup` in the
    child, exit."""

    def one() -> None:
        pid = os.fork() if namespaces_flags is None else namespaces.clone(namespaces_flags)
        if pid == 0:
            try:
                setup()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)

    return one


def nothing() -> None:
    pass


ISOLATION = namespaces.Isolation([str(TMP_BYTES), "isolated"])
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class NetworkLender:
    """The zygote's way until lent network namespaces were found to carry counters from run to run:
    empty network namespaces made once each, then lent to one run after another."""

    def __init__(self) -> None:
        self._free: list[int] = []
        self._home: int | None = None

    def lend(self) -> int:
        if self._free:
            return self._free.pop()
        if self._home is None:
            namespaces.unshare(namespaces.CLONE_NEWNET)
            self._home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        namespaces.unshare(namespaces.CLONE_NEWNET)
        try:
            return os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            namespaces.setns(self._home, namespaces.CLONE_NEWNET)

    def give_back(self, network: int) -> None:
        self._free.append(network)


LENDER = NetworkLender()


def private_view() -> None:
    namespaces.name_host()
    namespaces.make_private_view(ISOLATION)


def whole_run() -> None:
    """What the zygote's child does for a run: the private view, then the run's own fork."""
    private_view()
    run = os.fork()
    if run == 0:
        os._exit(0)
    os.waitpid(run, 0)


def lent_network_run() -> None:
    """The zygote's way before kept PID namespaces: a network namespace lent, the rest cloned anew with
    an init that forks the run."""
    network = LENDER.lend()
    pid = namespaces.clone(ALL)
    if pid == 0:
        try:
            namespaces.setns(network, namespaces.CLONE_NEWNET)
            whole_run()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    LENDER.give_back(network)


# A root server's runs, the steps issue 24 added: capabilities dropped as before, or a host uid of its own
# too (its working directory given to it first, as `bootstrap.give_home` does); a cgroup of its own,
# made before the fork, moved into by the child, removed after it (as the zygote does, off the call's path).
DROP = libc.privilege_dropper(bounding_set=False)
RUN_UID = 60000
SCRATCH = f"/run/namespace-costs-{os.getpid()}"  # given to the run's uid, through an fd opened before the view
SCRATCH_FD: list[int] = []


def dropped() -> None:
    DROP(None)


def own_uid() -> None:
    os.fchown(SCRATCH_FD[0], RUN_UID, RUN_UID)
    DROP(RUN_UID)


class CgroupRuns:
    """A parent cgroup like a zygote's (memory and pids, the server's limits), and the run cgroups made
    in it; its directories opened before the view is pivoted into (which has no /sys)."""

    def __init__(self) -> None:
        plan, self.reason = plan_cgroups(Config().limits)
        self.name = f"python-runner-{os.getpid()}-costs"
        self.holders: list[int] = []
        self.runs: cgroups.RunCgroups | None = None
        if plan is None:
            return
        paths = []
        for directory in plan.directories:
            os.mkdir(os.path.join(directory, self.name))
            paths.append(os.path.join(directory, self.name))
            self.holders.append(os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        self.runs = cgroups.RunCgroups(paths, list(plan.writes))
        self.reason = plan.describe()

    def one(self) -> None:
        assert self.runs is not None
        run = self.runs.make()
        pid = os.fork()
        if pid == 0:
            try:
                run.place_self()
            finally:
                os._exit(0)
        run.close_procs()
        os.waitpid(pid, 0)
        run.remove(patience=1.0)

    def close(self) -> None:
        if self.runs is not None:
            self.runs.close()
        for holder in self.holders:
            os.rmdir(self.name, dir_fd=holder)
            os.close(holder)


ALL = namespaces.CLONE_NEWPID | namespaces.CLONE_NEWNS | namespaces.CLONE_NEWIPC | namespaces.CLONE_NEWUTS
VARIANTS: dict[str, Callable[[], None]] = {
    "fork": in_child(nothing),
    "clone, no namespace": in_child(nothing, 0),
    "+ uts": in_child(nothing, namespaces.CLONE_NEWUTS),
    "+ ipc": in_child(nothing, namespaces.CLONE_NEWIPC),
    "+ net": in_child(nothing, namespaces.CLONE_NEWNET),
    "+ pid": in_child(nothing, namespaces.CLONE_NEWPID),
    "+ mount": in_child(nothing, namespaces.CLONE_NEWNS),
    "+ pid, mount and the private view": in_child(private_view, namespaces.CLONE_NEWPID | namespaces.CLONE_NEWNS),
    "a run, a new network namespace each": in_child(whole_run, ALL | namespaces.CLONE_NEWNET),
    "a run, on the host's network": in_child(whole_run, ALL),
    "a run, a network namespace lent, its own init": lent_network_run,
}


def say(line: str) -> None:
    sys.stdout.write(line + "\n")


def measure(one: Callable[[], None]) -> tuple[float, float]:
    before_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    one()
    wall = time.perf_counter() - started
    after_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after_cpu.ru_utime - before_cpu.ru_utime) + (after_cpu.ru_stime - before_cpu.ru_stime)
    return wall, cpu


def back_to_back(one: Callable[[], None], runs: int) -> float:
    started = time.perf_counter()
    for _ in range(runs):
        one()
    return (time.perf_counter() - started) / runs


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (user, nice, system, irq, softirq; guest is in user)."""
    with open("/proc/stat") as stat:
        fields = [int(field) for field in stat.readline().split()[1:8]]
    return (sum(fields[:3]) + fields[5] + fields[6]) / CLOCK_TICKS


def all_cpu_per_run(
    one: Callable[[], None], runs: int, spaces: pidspaces.PidSpaces | None = None
) -> tuple[float, float]:
    """CPU seconds per run of this process and every process it made, kept inits included (they are
    ended and reaped at the end, so that their time counts as their children's), and the whole
    machine's (a network namespace's teardown is a kernel worker's)."""

    def spent() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    before, machine_before = spent(), machine_busy()
    for _ in range(runs):
        one()
    if spaces is not None:
        for init, space in list(spaces.by_init.items()):
            spaces.retire(space)
            os.waitpid(init, 0)
            spaces.lost(init)
    time.sleep(0.2)  # the kernel's teardown of the last namespaces, on its own threads
    return (spent() - before) / runs, (machine_busy() - machine_before) / runs


def kept_namespace_run(spaces: pidspaces.PidSpaces, lent_network: bool) -> Callable[[], None]:
    """The zygote's way: the run forked into a kept PID namespace; the run makes the rest (with a
    network namespace of its own, or enters one lent to it) and its view; the namespace's init cleans
    up after it."""

    def one() -> None:
        network = LENDER.lend() if lent_network else None
        pid, space = spaces.fork()
        if pid == 0:
            try:
                if network is not None:
                    namespaces.setns(network, namespaces.CLONE_NEWNET)
                    namespaces.unshare(ISOLATION.unshared & ~namespaces.CLONE_NEWNET)
                else:
                    namespaces.unshare(ISOLATION.unshared)
                private_view()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        spaces.clean(space)
        answer = os.read(space.replies, 1) if select.select([space.replies], [], [], 5)[0] else b""
        spaces.finished(space, answer)
        if network is not None:
            LENDER.give_back(network)

    return one


def in_kept_namespaces(runs: int, lent_network: bool) -> tuple[float, float, float]:
    """(wall, CPU, the machine's CPU) per run the zygote's way, measured in a child of this process: kept
    PID namespaces are made in a PID namespace of the parent's own, after which it can clone no new
    one itself."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            spaces = pidspaces.PidSpaces([60, 1 << 40, 1 << 20, 1 << 40], 1)
            spaces.prepare()
            one = kept_namespace_run(spaces, lent_network)
            one()  # the namespace made, the first faults
            wall = back_to_back(one, runs)
            cpu, machine = all_cpu_per_run(one, runs, spaces)
            os.write(write_end, f"{wall} {cpu} {machine}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    said = os.read(read_end, 100).split()
    os.close(read_end)
    os.waitpid(child, 0)
    return float(said[0]), float(said[1]), float(said[2])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200, help="rounds (each runs every variant once)")
    args = parser.parse_args(argv)
    root = os.geteuid() == 0
    cgroup_runs = CgroupRuns() if root else None
    if root:
        SCRATCH_FD.append(os.open(SCRATCH, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        VARIANTS["+ capabilities dropped (a run's, as before)"] = in_child(dropped)
        VARIANTS["+ and a host uid of its own (a root server's run)"] = in_child(own_uid)
        if cgroup_runs is not None and cgroup_runs.runs is not None:
            VARIANTS["fork into a cgroup of its own (made, removed)"] = cgroup_runs.one
    if not namespaces.has_cap_sys_admin():
        namespaces.enter_user_namespace()
    scratch = os.open("/run", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if root else -1
    namespaces.prepare_shared_view(ISOLATION)  # as the zygote does once: this process's view is read-only now
    try:
        run_variants(args, cgroup_runs)
    finally:
        if cgroup_runs is not None:
            cgroup_runs.close()
        if scratch >= 0:
            os.unlink(os.path.basename(SCRATCH), dir_fd=scratch)
            os.close(scratch)
            os.close(SCRATCH_FD[0])


def run_variants(args: argparse.Namespace, cgroup_runs: CgroupRuns | None) -> None:
    if cgroup_runs is not None:
        say(f"cgroup: {cgroup_runs.reason}")
    walls: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpus: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for one in VARIANTS.values():
        one()  # warm: first faults, first mounts
    for round_number in range(args.runs):
        names = list(VARIANTS)
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            wall, cpu = measure(VARIANTS[name])
            walls[name].append(wall)
            cpus[name].append(cpu)
    base_wall, base_cpu = statistics.median(walls["fork"]), statistics.median(cpus["fork"])
    load = os.getloadavg()
    say(f"{args.runs} rounds, {os.cpu_count()} CPUs, load {load[0]:.2f}, uid {os.getuid()}")
    say(f"{'variant':46} {'wall p50':>9} {'p90':>7} {'over fork':>10} {'cpu p50':>8} {'over fork':>10}  (ms)")
    for name in VARIANTS:
        wall = statistics.median(walls[name])
        p90 = statistics.quantiles(walls[name], n=10)[-1]
        cpu = statistics.median(cpus[name])
        say(
            f"{name:46} {wall * 1e3:9.2f} {p90 * 1e3:7.2f} {(wall - base_wall) * 1e3:+10.2f} "
            f"{cpu * 1e3:8.2f} {(cpu - base_cpu) * 1e3:+10.2f}"
        )
    rates = {name: back_to_back(VARIANTS[name], args.runs) for name in VARIANTS if name.startswith("a run,")}
    say(f"back to back, {args.runs} runs each (wall per run, teardown included):")
    for name, seconds in rates.items():
        say(f"  {name:50} {seconds * 1e3:.2f} ms")
    # What a whole run costs in all, the ways before and the zygote's way now, alternated three times.
    totals: dict[str, list[tuple[float, float, float]]] = {
        "its own init, network lent": [],
        "a kept PID namespace, network lent": [],
        "a kept PID namespace, network its own": [],
    }
    for _ in range(3):
        wall = back_to_back(lent_network_run, args.runs)
        totals["its own init, network lent"].append((wall, *all_cpu_per_run(lent_network_run, args.runs)))
        totals["a kept PID namespace, network lent"].append(in_kept_namespaces(args.runs, lent_network=True))
        totals["a kept PID namespace, network its own"].append(in_kept_namespaces(args.runs, lent_network=False))
    say(f"a whole run, back to back, {args.runs} runs x 3 (wall, all CPU, the machine's CPU; ms):")
    for name, rows in totals.items():
        say(f"  {name:38} " + "  ".join(f"{w * 1e3:.2f}, {c * 1e3:.2f}, {m * 1e3:.2f}" for w, c, m in rows))


if __name__ == "__main__":
    main()
