"""The zygote's own steps, in an interpreter of their own: a fork request that fails leaves nothing, and
its start-up probe goes with the server that started it."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.config import Config
from runner.inrun.cgroups import RUN_PREFIX
from runner.processes.cgroups import plan_cgroups
from runner.processes.isolation import BOOTSTRAP, plan_isolation
from tests.conftest import REPO
from tests.helpers import alive, children_of, in_mode, living, settled

FORK_FAILS = """
import os, resource, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import zygote
base = sys.argv[2]
before = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
# Room for three more fds: the directory and one pipe get made, the second pipe fails (EMFILE).
resource.setrlimit(resource.RLIMIT_NOFILE, (max(before) + 4, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
runs = {}
reply, fds = zygote._fork_run(base, [10, 1 << 28, 64, 1 << 20], runs)
after = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
print(reply.decode(), fds, runs, os.listdir(base), before == after, sep="|")
"""


def test_a_fork_request_that_fails_answers_an_error_and_leaves_nothing(tmp_path: Path) -> None:
    done = subprocess.run(  # the limit must not touch the test process
        [sys.executable, "-I", "-c", FORK_FAILS, BOOTSTRAP, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    reply, fds, runs, listing, same_fds = done.stdout.strip().split("|")
    assert reply.startswith("E [Errno 24] Too many open files")
    assert (fds, runs, listing, same_fds) == ("[]", "{}", "[]", "True")


# A server as far as its start-up probe: the plan of a namespaced sandbox.
PLANS = """
import dataclasses, sys
from runner.config import Config
from runner.processes.isolation import plan_isolation
plan_isolation(dataclasses.replace(Config(), python=sys.argv[1], sandbox="namespaces"))
"""


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as listed:
            return [int(child) for child in listed.read().split()]
    except OSError:
        return []


def _probe_of(server: int) -> int:
    for child in _children(server):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                if b"\0--probe\0" in cmdline.read():
                    return child
        except OSError:
            pass
    return 0


def _probe_stopped_once(server: subprocess.Popen[bytes], done: Callable[[int], bool]) -> int:
    """The start-up probe of `server` (a process running `PLANS`), stopped (SIGSTOP) once `done(probe)`:
    stepped there, each step letting it run a moment (stopped again at once, it would take the stop
    before any of its own code: on a quiet machine its probe then timed out, 237,507 steps in 10 s)."""
    deadline = time.monotonic() + 30
    probe = 0
    while not probe and server.poll() is None and time.monotonic() < deadline:
        probe = _probe_of(server.pid)
    assert probe, "no probe was seen"
    os.kill(probe, signal.SIGSTOP)
    while not done(probe) and time.monotonic() < deadline:
        os.kill(probe, signal.SIGCONT)
        time.sleep(0.001)
        os.kill(probe, signal.SIGSTOP)
    return probe


@pytest.mark.timeout(60)
def test_a_probe_whose_server_dies_dies_with_it_and_so_does_every_process_it_made(config: Config) -> None:
    # Found by a review: the probe had no parent-death signal, so a server killed while it probed left
    # it to run on alone: 10 of 10 outlived their server, to the end of the probe, or, stuck, forever.
    # Stopped once it has its first child (the holder of its runs' namespaces), a probe cannot end by
    # itself, as a slow one would not before its server's death; only dying with it ends it.
    in_mode(config, "namespaces")
    left: list[int] = []
    with subprocess.Popen([sys.executable, "-c", PLANS, config.python], cwd=REPO) as server:
        try:
            # Until it has forked the holder: the probe lives on (it runs two runs) long after.
            probe = _probe_stopped_once(server, lambda probe: bool(_children(probe)))
            left = [probe, *children_of(probe)]
            assert len(left) > 1, "the probe forked nothing"
            server.kill()
            server.wait()
            assert settled(lambda: living(left), timeout=10) == []
        finally:
            server.kill()
            for pid in left:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)


def _run_cgroups_of(probe: int, directories: list[str]) -> list[str]:
    """The probe's runs' cgroups (`run-<probe pid>-N`), wherever under the server's cgroups they are."""
    found = []
    for directory in directories:
        for top, subdirs, _ in os.walk(directory):
            found += [os.path.join(top, sub) for sub in subdirs if sub.startswith(f"{RUN_PREFIX}{probe}-")]
            if top != directory:
                subdirs.clear()  # two levels: the server's cgroup, and a parent in it
    return found


@pytest.mark.timeout(60)
def test_the_run_cgroups_of_a_probe_whose_server_was_killed_are_removed_by_the_next_start(config: Config) -> None:
    # Found by a review: the probe's runs' cgroups went right under the server's own cgroup, and a server
    # killed while one existed left it there for good: the next start removed only python-runner-<pid>-*.
    in_mode(config, "namespaces")
    cgroups, why = plan_cgroups(config.limits)
    if cgroups is None:
        pytest.skip(f"no cgroups for runs here: {why}")
    left: list[int] = []
    with subprocess.Popen([sys.executable, "-c", PLANS, config.python], cwd=REPO) as server:
        try:
            probe = _probe_stopped_once(server, lambda probe: bool(_run_cgroups_of(probe, cgroups.directories)))
            assert _run_cgroups_of(probe, cgroups.directories), "the probe made no run cgroup"
            left = [probe, *children_of(probe)]
            server.kill()
            server.wait()
            assert settled(lambda: living(left), timeout=10) == []
            plan_isolation(dataclasses.replace(Config(), python=config.python, sandbox="namespaces"))  # the next start
            assert _run_cgroups_of(probe, cgroups.directories) == []
        finally:
            server.kill()
            for pid in left:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
