"""The CPU time a session's anchor counts (runner/inrun/sweeps.py), this test's process as the anchor
and its forks as the session's processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from runner.inrun import bootstrap
from tests.helpers import settled

(sweeps,) = bootstrap.load_siblings("sweeps")

BURN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end:\n    pass\n"
# A keeper stand-in: on its first line of stdin it runs `middle` (indented once), says 'done', sleeps.
KEEPER = "import os, signal, sys, time\nsys.stdin.readline()\n{middle}print('done', flush=True)\ntime.sleep(60)\n"
MIDDLES = {
    # Found by a review: the idle check counted only the keeper's own CPU, not what it reaped.
    "reaped-by-the-keeper": f"if os.fork() == 0:\n    exec({BURN!r})\n    os._exit(0)\nos.wait()\n",
    # Its CPU in no count once the kernel reaps it: the process that ignores SIGCHLD is the fault.
    "sigchld-ignored": "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n",
}


@pytest.fixture
def keeper(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[str]]:
    middle = MIDDLES[request.param]
    code = KEEPER.format(middle=middle)
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            yield process
        finally:
            process.kill()


def _run(keeper: subprocess.Popen[str]) -> None:
    assert keeper.stdin is not None
    assert keeper.stdout is not None
    keeper.stdin.write("go\n")
    keeper.stdin.flush()
    assert keeper.stdout.readline() == "done\n"


@pytest.mark.parametrize("keeper", ["reaped-by-the-keeper"], indirect=True)
def test_what_a_keepers_short_lived_fork_used_counts_in_the_sessions_cpu(keeper: subprocess.Popen[str]) -> None:
    tally = sweeps.Tally()
    before, _, _ = sweeps.session_cpu(tally)
    _run(keeper)
    after, live, ignoring = sweeps.session_cpu(tally)
    assert after - before >= 0.25, (before, after)  # 0.3 s burned; before the fix: none counted
    assert keeper.pid in live
    assert not ignoring


@pytest.mark.parametrize("keeper", ["sigchld-ignored"], indirect=True)
def test_a_process_of_the_session_ignoring_sigchld_is_found(keeper: subprocess.Popen[str]) -> None:
    tally = sweeps.Tally()
    _run(keeper)
    assert sweeps.session_cpu(tally)[2]
    tally.kill(keeper.pid)  # what is dying is not asked
    assert not sweeps.session_cpu(tally)[2]


def test_what_a_killed_child_of_a_keeper_used_is_excused_once_its_keeper_reaped_it() -> None:
    # Found by a review: a rolled-back candidate, the keeper's child, torn down and reaped by the
    # keeper, counted as the keeper's CPU and ended a session as a keeper that ran.
    code = f"import os, time\nchild = os.fork()\nif child == 0:\n    exec({BURN!r})\n    time.sleep(60)\n"
    code += "print(child, flush=True)\nos.waitpid(child, 0)\nprint('reaped', flush=True)\ntime.sleep(60)\n"
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            child = int(process.stdout.readline())
            burned = settled(lambda: [] if sweeps.cpu_seconds(child) >= 0.25 else ["burning"], timeout=20)
            assert burned == []
            tally = sweeps.Tally()
            before, _, _ = sweeps.session_cpu(tally)
            tally.kill(child)
            assert process.stdout.readline() == "reaped\n"
            after, live, _ = sweeps.session_cpu(tally)
            assert child not in live
            assert child not in tally.dying
            assert after - before < 0.1, (before, after)  # its 0.3 s excused, not its keeper's now
        finally:
            process.kill()


def test_what_a_killed_child_of_this_process_used_is_excused_as_it_is_reaped() -> None:
    pid = os.fork()
    if pid == 0:
        try:
            exec(BURN)
            signal.pause()
        finally:
            os._exit(0)
    try:
        assert settled(lambda: [] if sweeps.cpu_seconds(pid) >= 0.25 else ["burning"], timeout=20) == []
        tally = sweeps.Tally()
        before, _, _ = sweeps.session_cpu(tally)
        tally.kill(pid)
        reaped = settled(lambda: [] if pid in [p for p, _ in tally.reaped()] else ["not yet"], timeout=20)
        assert reaped == []
        after, _, _ = sweeps.session_cpu(tally)
        assert after - before < 0.1, (before, after)
    finally:
        sweeps.kill(pid)


def test_the_last_pid_given_moves_with_every_fork_and_an_idle_mark_without_a_namespace_has_none() -> None:
    # The idle check's fork detection (`idle_fault`): where the session has a PID namespace of its own,
    # any fork since it went idle moves this number; here it is the host's, which forks move too.
    before = sweeps.last_pid()
    if before < 0:
        pytest.skip("/proc/sys/kernel/ns_last_pid cannot be read here")
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    assert sweeps.last_pid() != before
    assert sweeps.idle_mark(sweeps.Tally(), own_pids=False).last_pid == -1
