"""The C library through ctypes, as the in-run code calls it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

PROBE = """
from runner.inrun import libc
def anon():
    for line in open('/proc/self/status'):
        if line.startswith('RssAnon:'):
            return int(line.split()[1]) // 1024
base = anon()
blobs = [bytes(1000) for _ in range(60_000)]
pinned = blobs[::100]
del blobs
freed = anon() - base
released = libc.trim_heap()
print(freed, anon() - base, released)
"""


def test_trim_heap_gives_back_the_pages_of_memory_freed_between_blocks_still_in_use() -> None:
    # In a process of its own: what the test process's heap holds is not this test's to change.
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60, cwd=REPO
    )
    freed, after, released = done.stdout.split()
    assert int(freed) >= 50, done.stdout  # free() leaves the holes between the kept blocks mapped
    assert int(after) < 15, done.stdout
    assert released == "True"


# Each in a process of its own, whose parent-death signal this test may set: `die_with` as each of its
# callers calls it. PR_GET_PDEATHSIG (2) says what it set.
DIES_WITH = """
import ctypes, os, socket, subprocess, sys
from runner.inrun import libc
def pdeathsig():
    value = ctypes.c_int(-1)
    libc.LIBC.prctl.argtypes = None
    libc.LIBC.prctl(2, ctypes.byref(value), 0, 0, 0)
    return value.value
case = sys.argv[1]
if case == "no-pid":  # the PID namespaces' holder and init, whose getppid() is 0: whoever the parent is
    print(libc.die_with(), pdeathsig())
elif case == "a-live-pid":  # a plain run under a RUNNER_PYTHON wrapper: its server, not its parent
    print(libc.die_with(os.getppid()), libc.die_with(1), pdeathsig())
elif case == "a-dead-pid":  # a plain run or the probe whose server died before it could ask
    gone = subprocess.Popen(["true"])
    gone.wait()
    libc.die_with(gone.pid)
    print("went on")
elif case in ("a-live-end", "a-hung-up-end"):  # the holder: its parent's end tells
    ours, theirs = socket.socketpair()
    if case == "a-hung-up-end":
        ours.close()
    print(libc.die_with(parent_end=theirs.fileno()), pdeathsig(), flush=True)
"""


def dies_with(case: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", DIES_WITH, case], capture_output=True, text=True, timeout=60, cwd=REPO)


def test_die_with_no_pid_told_sets_the_signal_for_whoever_the_parent_is() -> None:
    done = dies_with("no-pid")
    assert (done.returncode, done.stdout) == (0, "True 9\n"), done.stderr


def test_die_with_a_pid_that_is_not_the_parent_goes_on_while_that_process_lives() -> None:
    done = dies_with("a-live-pid")
    assert (done.returncode, done.stdout) == (0, "True True 9\n"), done.stderr


def test_die_with_a_pid_that_is_gone_exits_1_at_once_saying_so() -> None:
    done = dies_with("a-dead-pid")
    assert done.returncode == 1
    assert done.stdout == ""
    assert re.fullmatch(r"the server \(pid \d+\) is gone\n", done.stderr), done.stderr


def test_die_with_a_parent_s_end_goes_on_while_it_is_held_and_exits_1_once_it_is_hung_up() -> None:
    held = dies_with("a-live-end")
    assert (held.returncode, held.stdout) == (0, "True 9\n"), held.stderr
    hung_up = dies_with("a-hung-up-end")
    assert (hung_up.returncode, hung_up.stdout) == (1, ""), hung_up.stderr
