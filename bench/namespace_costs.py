"""What each namespace costs a forked run: the numbers behind the namespaced fork server's choices.

    python bench/namespace_costs.py [--runs N]

A small parent (this interpreter, the standard library and runner/processes/namespaces.py loaded,
and the view runs share prepared, like the zygote) clones a child into one kind of namespace, or
into all of them as the zygote does
for a run (the child then builds the run's view and forks the run), and the child exits; the
parent waits for it. Every variant runs in the same invocation,
interleaved round by round, so that machine noise hits all of them alike. Printed per variant:
the wall time from fork to reaped (p50, p90: the namespace's set-up and the teardown the exit
waits for), the CPU time of the processes (p50 of utime + stime of the reaped children), and both
over plain fork. Kernel work done later on a worker thread (a network namespace's cleanup) is not
in them; the last line measures it the way it shows: back-to-back runs, with and without one
network namespace each, and with one lent from those made before as the zygote does. (One empty
network namespace shared by every run costs what the host's network costs: it is made once. It is
not an option: concurrent runs sharing it could meet on abstract unix sockets, see
tests/test_namespaces.py; a lent one is never any other live run's.)

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
    """The zygote's way: a network namespace lent from those made before, the rest cloned anew."""
    network = ISOLATION.lend_network()
    pid = namespaces.clone(ALL)
    if pid == 0:
        try:
            if network is not None:
                namespaces.setns(network, namespaces.CLONE_NEWNET)
            whole_run()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    ISOLATION.give_back(network)


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
    "a run, a network namespace lent (the zygote's way)": lent_network_run,
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
    namespaces.prepare_shared_view(ISOLATION)  # as the zygote does once: this process's view is read-only now
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


if __name__ == "__main__":
    main()
