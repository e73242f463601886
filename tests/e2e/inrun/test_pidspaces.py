"""The zygote's kept PID namespaces (runner/inrun/pidspaces.py), driven directly in an interpreter of
their own: never more than the bound, whatever is asked.

The pool's own use of them (lent again only once clean, an init killed from outside) is in
test_namespaces.py; the bound the server tells its zygotes, in tests/unit/processes/test_isolation.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner.config import Config
from runner.processes.isolation import BOOTSTRAP
from tests.helpers import alive, in_mode, living, settled

pytestmark = pytest.mark.timeout(60)

# Forks runs that wait (their parent closes a pipe to end them) into a PidSpaces bounded at 2, and
# says what each step got: a third fork with both lent, a fork while one namespace is still being
# cleaned, and one more while one is ending (its init killed, not reaped yet).
AT_THE_BOUND = """
import json, os, signal, sys, time
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import namespaces, pidspaces
if not namespaces.has_cap_sys_admin():
    namespaces.enter_user_namespace()
spaces = pidspaces.PidSpaces([10, 1 << 30, 64, 1 << 20], 2)
spaces.prepare()
said = {}

def run():
    hold_r, hold_w = os.pipe()
    pid, space = spaces.fork()
    if pid == 0:
        os.dup2(hold_r, 0)
        os.closerange(1, 1 << 16)  # no other run's pipe end: each ends when its own is closed
        os.read(0, 1)
        os._exit(0)
    os.close(hold_r)
    return pid, space, hold_w

def end(pid, space, hold_w):
    os.close(hold_w)
    os.waitpid(pid, 0)
    spaces.clean(space)  # the init is told; its answer is not read here

first, second = run(), run()
started = time.monotonic()
try:
    run()
except OSError as exc:
    said["third"] = [exc.errno, str(exc), time.monotonic() - started]
said["inits_at_the_bound"] = len(spaces.by_init)
end(*first)
third = run()  # the first's namespace, once its init has answered
said["cleaned_one_lent_again"] = third[1] is first[1]
said["inits_after_cleaning"] = len(spaces.by_init)
end(*second)
spaces.finished(second[1], pidspaces.NOT_CLEAN)  # as if a process of it would not die: it is ended
fourth = run()  # made once the ended one's init is reaped
said["ended_one_replaced"] = fourth[1] is not second[1] and second[1].init not in spaces.by_init
said["inits_after_ending"] = len(spaces.by_init)
for one in (third, fourth):
    end(*one)
print(json.dumps(said))
"""


def _said(script: str) -> Any:
    """What `script` printed (JSON), run in an interpreter of its own beside the bootstrap's modules."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", script, BOOTSTRAP], capture_output=True, text=True, timeout=50, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_zygote_keeps_no_more_pid_namespaces_than_its_bound_and_waits_for_one_being_cleaned(
    config: Config,
) -> None:
    in_mode(config, "namespaces")  # skipped (failed in CI) where no namespace can be made
    said = _said(AT_THE_BOUND)
    errno_, message, waited = said["third"]
    assert errno_ == 11, said  # EAGAIN: refused, not made
    assert "all 2 kept PID namespaces of this zygote are in use" in message
    assert waited >= 1.0, "it waited for one to be cleaned before it refused"
    assert said["inits_at_the_bound"] == 2
    assert said["cleaned_one_lent_again"] is True
    assert said["inits_after_cleaning"] == 2
    assert said["ended_one_replaced"] is True
    assert said["inits_after_ending"] == 2


# Makes a namespace while its holder is killed between the two forks that make one: the maker, born in
# the holder's namespace, dies with it before it can make the init. Says what the fork raised.
HOLDER_DIES_WHILE_A_NAMESPACE_IS_MADE = """
import json, os, signal, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import namespaces, pidspaces
if not namespaces.has_cap_sys_admin():
    namespaces.enter_user_namespace()
# The killer is forked first: once runs' namespace is prepared, no thread can be started, and a
# child is born in the holder's namespace, whose init it may not kill.
holder_r, holder_w = os.pipe()
maker_r, maker_w = os.pipe()
killer = os.fork()
if killer == 0:
    holder = int(os.read(holder_r, 32))
    os.read(maker_r, 1)
    os.kill(holder, signal.SIGKILL)
    os._exit(0)
spaces = pidspaces.PidSpaces([10, 1 << 30, 64, 1 << 20], 2)
spaces.prepare()
os.write(holder_w, b"%d" % spaces.holder)
clone = namespaces.clone

def clone_once_the_holder_is_killed(flags):
    if flags & namespaces.CLONE_NEWPID:  # in the maker: it waits to be killed with its namespace
        os.write(maker_w, b"m")
        while True:
            signal.pause()
    return clone(flags)

namespaces.clone = clone_once_the_holder_is_killed
try:
    spaces.fork()
    said = "forked"
except pidspaces.HolderGone as exc:
    said = "HolderGone: " + str(exc)
except OSError as exc:
    said = "OSError: " + str(exc)
print(json.dumps(said))
"""


def test_a_holder_killed_while_a_namespace_is_made_ends_the_zygote_rather_than_failing_the_call(
    config: Config,
) -> None:
    # Found by CI: a holder killed as a call made a new namespace answered that call "no init came for
    # a new PID namespace" instead of handing it to a new zygote (test_namespaces.py's holder test).
    in_mode(config, "namespaces")
    said = _said(HOLDER_DIES_WHILE_A_NAMESPACE_IS_MADE)
    assert said.startswith("HolderGone: "), said


# Prepares runs' PID namespace, its holder held back from setting its parent-death signal until the
# zygote (this script) is dead: the holder says its pid in the file named, then waits for that.
HOLDER_ARMS_AFTER_ITS_ZYGOTE_DIED = """
import os, signal, sys, time
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import libc, namespaces, pidspaces
if not namespaces.has_cap_sys_admin():
    namespaces.enter_user_namespace()
zygote, told = os.getpid(), sys.argv[2]
arm = libc.die_with

def arm_once_the_zygote_is_dead(*args, **kwargs):
    with open(told, "w") as said:
        said.write(os.readlink("/proc/self"))  # its pid outside its namespace: /proc is the zygote's
    while True:
        try:
            with open(f"/proc/{zygote}/stat", "rb") as stat:
                if stat.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.001)
    arm(*args, **kwargs)

libc.die_with = arm_once_the_zygote_is_dead
pidspaces.PidSpaces([10, 1 << 30, 64, 1 << 20], 2).prepare()
signal.pause()
"""


def test_a_holder_whose_zygote_died_before_it_could_die_with_it_ends_all_the_same(
    config: Config, tmp_path: Path
) -> None:
    # Found by a review: a zygote or probe killed between forking its holder and the holder's
    # prctl(PR_SET_PDEATHSIG) left the holder paused forever (getppid() is 0 in its namespace, so its
    # check saw nothing), 8 of 30 probes and 17 of 30 zygotes killed as their holder appeared.
    in_mode(config, "namespaces")
    told = tmp_path / "holder"
    holder = 0
    with subprocess.Popen(
        [sys.executable, "-I", "-c", HOLDER_ARMS_AFTER_ITS_ZYGOTE_DIED, BOOTSTRAP, str(told)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as zygote:
        try:
            deadline = time.monotonic() + 30
            while not holder and zygote.poll() is None and time.monotonic() < deadline:
                said = told.read_text() if told.exists() else ""
                holder = int(said) if said else 0
                time.sleep(0.01)
            assert holder, zygote.stderr.read().decode() if zygote.poll() is not None else "no holder came"
            zygote.kill()
            zygote.wait()
            assert settled(lambda: living([holder]), timeout=10) == []
        finally:
            zygote.kill()
            if holder and alive(holder):
                os.kill(holder, signal.SIGKILL)
