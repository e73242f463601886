"""What each namespace costs a forked run: the numbers behind the namespaced fork server's choices.

    python bench/namespace_costs.py [--runs N]

A small parent (this interpreter, the standard library and runner/processes/namespaces.py loaded,
like the zygote) forks a child that makes one kind of namespace, or all of them as the zygote does
for a run, and exits; the parent waits for it. Every variant runs in the same invocation,
interleaved round by round, so that machine noise hits all of them alike. Printed per variant:
the wall time from fork to reaped (p50, p90: the namespace's set-up and the teardown the exit
waits for), the CPU time of the processes (p50 of utime + stime of the reaped children), and both
over plain fork. Kernel work done later on a worker thread (a network namespace's cleanup) is not
in them; the last line measures it the way it shows: back-to-back runs, with and without one
network namespace each. (One empty network namespace shared by every run costs what "without"
costs: it is made once. It is not an option: runs sharing it could meet on abstract unix sockets,
see tests/test_namespaces.py.)

Run as root, or where user namespaces are allowed (it enters one of its own first, as the zygote
does without CAP_SYS_ADMIN). This is a script that prints numbers; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runner" / "processes"))
import namespaces  # the zygote's own module, imported as the zygote imports it

TMP_BYTES = 32 << 20


def in_child(setup: Callable[[], None]) -> Callable[[], None]:
    """A variant: fork, run `setup` in the child, exit."""

    def one() -> None:
        pid = os.fork()
        if pid == 0:
            try:
                setup()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)

    return one


def with_pid_namespace(inner: Callable[[], None]) -> Callable[[], None]:
    """A variant with a PID namespace: the child makes it, and its own child (PID 1) runs `inner`."""

    def setup() -> None:
        namespaces.isolate_pids()
        init = os.fork()
        if init == 0:
            try:
                inner()
            finally:
                os._exit(0)
        os.waitpid(init, 0)

    return in_child(setup)


def mount_view() -> None:
    namespaces.unshare(namespaces.CLONE_NEWNS)
    namespaces.make_private_view(TMP_BYTES, [])


def whole_run(network: bool) -> Callable[[], None]:
    """What the zygote's init does for a run: every namespace, the private view, and the run's fork."""

    def init() -> None:
        namespaces.isolate_the_rest(network)
        namespaces.make_private_view(TMP_BYTES, [])
        run = os.fork()
        if run == 0:
            os._exit(0)
        os.waitpid(run, 0)

    return init


VARIANTS: dict[str, Callable[[], None]] = {
    "fork": in_child(lambda: None),
    "+ uts": in_child(lambda: namespaces.unshare(namespaces.CLONE_NEWUTS)),
    "+ ipc": in_child(lambda: namespaces.unshare(namespaces.CLONE_NEWIPC)),
    "+ net (one per run)": in_child(lambda: namespaces.unshare(namespaces.CLONE_NEWNET)),
    "+ pid (a second fork: PID 1)": with_pid_namespace(lambda: None),
    "+ pid + mount: read-only view, tmpfs, /dev, /proc": with_pid_namespace(mount_view),
    "the zygote's run: all, + the run's fork": with_pid_namespace(whole_run(network=True)),
    "the same, the host's network (no net namespace)": with_pid_namespace(whole_run(network=False)),
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200, help="rounds (each runs every variant once)")
    args = parser.parse_args(argv)
    if not namespaces.has_cap_sys_admin():
        namespaces.enter_user_namespace()
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
    with_net = back_to_back(VARIANTS["the zygote's run: all, + the run's fork"], args.runs)
    without_net = back_to_back(VARIANTS["the same, the host's network (no net namespace)"], args.runs)
    say(
        f"back to back, {args.runs} runs each: {with_net * 1e3:.2f} ms a run with a network namespace of its own, "
        f"{without_net * 1e3:.2f} ms without"
    )


if __name__ == "__main__":
    main()
