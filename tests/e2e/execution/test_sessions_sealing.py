"""What a state's code could still run as a process seals, or leave to run in its keeper, found by a
review of the seal made from C (`sealing._take_round`): each failed before the rounds of the fix."""

from __future__ import annotations

import dataclasses
import os
import subprocess

import pytest

from runner.config import Config
from runner.execution.pool import Pool
from tests.e2e.execution.test_sessions import call, new_session
from tests.e2e.execution.test_sessions_hostile import MARK_OUTSIDE, NEWER_PYTHONS
from tests.helpers import python_since

pytestmark = pytest.mark.anyio

# What a sealing process calls from Python, the state's profile, trace and sys.monitoring functions saw
# (a call each, some with every signal blocked already: found by a review), and a handler of the state's
# pending as it seals (run as the mask took hold, it unblocked a signal whose handler then ran in the
# keeper: below). Each notes itself; `noted` counts it as outside a call where every signal is blocked.
# A later call, rolled back, signals the keeper with SIGUSR1, whose handler the state left.
AS_IT_SEALS = {
    "profile": ("sys.setprofile(lambda *_: noted('profile'))", (3, 11)),
    "trace": ("def trace(*_):\n    noted('trace')\n    return trace\nsys.settrace(trace)", (3, 11)),
    "profile-all-threads": ("threading.setprofile_all_threads(lambda *_: noted('profile'))", (3, 12)),
    "monitoring-calls": (
        "m = sys.monitoring\nm.use_tool_id(3, 'calls')\n"
        "m.register_callback(3, m.events.CALL, lambda *_: noted('CALL'))\n"
        "m.register_callback(3, m.events.C_RETURN, lambda *_: noted('C_RETURN'))\n"
        "m.set_events(3, m.events.CALL)",  # (its C_RETURN events with it)
        (3, 12),
    ),
}
AS_IT_SEALS_SETUP = (
    "import signal, sys, threading, _thread\n"
    "signal.signal(signal.SIGUSR1, lambda *_: noted('SIGUSR1'))\n"
    "signal.signal(signal.SIGUSR2, lambda *_: noted('SIGUSR2'))\n"
)


@pytest.mark.parametrize("python", ["default", *NEWER_PYTHONS], ids=lambda path: os.path.basename(path))
@pytest.mark.parametrize("left", AS_IT_SEALS.values(), ids=AS_IT_SEALS.keys())
async def test_what_the_state_left_never_runs_as_a_process_seals_nor_after(
    config: Config, no_leaks: None, python: str, left: tuple[str, tuple[int, int]]
) -> None:
    code, since = left
    chosen = config if python == "default" else dataclasses.replace(config, python=python)
    asked = f"import sys; print(sys.version_info >= {since!r})"
    if subprocess.run([chosen.python, "-c", asked], capture_output=True, check=False).stdout != b"True\n":
        pytest.skip(f"Python {since[0]}.{since[1]} and later")
    async with Pool.open(chosen, reap_strays=True) as pool:
        handle = await new_session(pool, MARK_OUTSIDE + AS_IT_SEALS_SETUP + "x = 1")
        assert (await call(pool, code + "\nx = 2", handle)).session is not None
        signalled = "os.kill(os.getppid(), signal.SIGUSR1)\nraise RuntimeError('rolled back')"
        for later in (signalled, "y = 1", signalled):
            assert (await call(pool, later, handle)).session is not None
        seen = await call(pool, "sys.setprofile(None)\nsys.settrace(None)\nprint(x, outside[:3])", handle)
        assert seen.stdout.text == "2 []\n", seen


# A handler of the state's caught just before a process seals runs as the mask takes hold (Python
# runs the handlers of signals caught as pthread_sigmask returns): one that unblocked SIGUSR1 there left
# the keeper to run the state's SIGUSR1 handler, signalled by a later call (found by a review). Caught
# there by chance: a timer signals every 100 us, and its handler unblocks SIGUSR1 where it finds every
# other signal blocked (some 1 seal in 40 before the fix).
SPRAYED = (
    "def spray(*_):\n"
    "    if _len(_mask(0, ())) > 40:\n        _mask(_signal.SIG_UNBLOCK, [signal.SIGUSR1])\n"
    "signal.signal(signal.SIGALRM, spray)\nsignal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)\nx += 1"
)


async def test_a_handler_run_as_a_process_seals_never_leaves_one_of_the_states_to_run_in_its_keeper(
    config: Config, no_leaks: None
) -> None:
    async with Pool.open(config, reap_strays=True) as pool:
        handle = await new_session(pool, MARK_OUTSIDE + AS_IT_SEALS_SETUP + "x = 0")
        signalled = "os.kill(os.getppid(), signal.SIGUSR1)\nraise RuntimeError('rolled back')"
        for _ in range(120):
            assert (await call(pool, SPRAYED, handle)).session is not None
            assert (await call(pool, signalled, handle)).session is not None
        seen = await call(pool, "print(x, [o for o in outside if o[1] == 'SIGUSR1'][:3])", handle)
        assert seen.stdout.text == "120 []\n", seen


SIGNALLED = "os.kill(os.getppid(), signal.SIGUSR1)\nraise RuntimeError('rolled back')"


# A sys.monitoring tool whose name is falsy: tools picked by the truth of get_tool's result, not
# `is not None`, left a tool named '' its callbacks while sealed. A tool whose name is a str subclass
# with __bool__: that pick called it in the middle of the take-out (every signal blocked, the profile
# function already taken out), and the profile function it set stayed in the keeper.
TOOL_NAMES = {
    "empty-name": (
        "m = sys.monitoring\nm.use_tool_id(3, '')\n"
        "names, _add = set(), set.add\n"
        "def started(code, _):\n"
        "    if _len(_mask(0, ())) > 40:\n        _add(names, code.co_name)\n        noted('PY_START')\n"
        "m.register_callback(3, m.events.PY_START, started)\n"
        "m.set_events(3, m.events.PY_START)"
    ),
    "name-with-bool": (
        "class Name(str):\n"
        "    def __bool__(self):\n"
        "        noted('bool')\n"
        "        sys.setprofile(lambda *_: _add(hits, _getpid()))\n"
        "        return True\n"
        "hits, _add, _getpid = set(), set.add, os.getpid\nsys.monitoring.use_tool_id(2, Name('x'))"
    ),
}


@pytest.mark.parametrize("python", NEWER_PYTHONS, ids=lambda path: os.path.basename(path))
@pytest.mark.parametrize("left", TOOL_NAMES.values(), ids=TOOL_NAMES.keys())
async def test_a_tools_name_decides_nothing_as_a_process_seals(
    config: Config, no_leaks: None, python: str, left: str
) -> None:
    chosen = python_since(config, python, (3, 12))
    async with Pool.open(chosen, reap_strays=True) as pool:
        handle = await new_session(pool, MARK_OUTSIDE + AS_IT_SEALS_SETUP + "x = 1")
        for later in (left + "\nx = 2", "y = 1", "raise RuntimeError('rolled back')"):
            assert (await call(pool, later, handle)).session is not None
        # the profile function's pids (name-with-bool), the code started while sealed (empty-name)
        shown = (
            "sys.setprofile(None)\nprint(x, outside[:3], os.getppid() in globals().get('hits', ()),"
            " 'serve_as_keeper' in globals().get('names', ()))"
        )
        seen = await call(pool, shown, handle)
        assert seen.stdout.text == "2 [] False False\n", seen


# A finaliser of the state's garbage run by a collection in the middle of the take-out, after its
# signals were blocked (3.11: as a block's result set is allocated; 3.12 and later: the collection an
# allocation scheduled runs in PyErr_CheckSignals, or, on 3.12, even with gc disabled, at the next
# eval-breaker check): it unblocked SIGUSR1, whose handler then ran in the keeper. Each call tries
# another count of collections seen with every signal blocked.
COLLECTED = (
    "import gc\n"
    "keep, full, WHEN = [], [0], [1]\n"
    "class G:\n"
    "    def __init__(self):\n        self.me = self\n"
    "    def __del__(self):\n"
    "        if _len(_mask(0, ())) > 40:\n"
    "            full[0] += 1\n"
    "            if full[0] == WHEN[0]:\n"
    "                _mask(_signal.SIG_UNBLOCK, [signal.SIGUSR1])\n"
    "        else:\n"
    "            full[0] = 0\n"
    "        G()\n"
    "        keep.extend([[] for _ in range(5)])\n"
    "gc.set_threshold(1)\nG()\n"
)


@pytest.mark.parametrize("python", ["default", *NEWER_PYTHONS], ids=lambda path: os.path.basename(path))
async def test_a_finaliser_run_as_the_mask_takes_hold_leaves_no_signal_unblocked(
    config: Config, no_leaks: None, python: str
) -> None:
    chosen = python_since(config, python, (3, 11))
    async with Pool.open(chosen, reap_strays=True) as pool:
        handle = await new_session(pool, MARK_OUTSIDE + AS_IT_SEALS_SETUP + COLLECTED + "x = 0")
        for _ in range(6):
            assert (await call(pool, "x += 1\nWHEN[0] = x", handle)).session is not None
            assert (await call(pool, SIGNALLED, handle)).session is not None
        seen = await call(pool, "print(x, [o for o in outside if o[1] == 'SIGUSR1'][:3])", handle)
        assert seen.stdout.text == "6 []\n", seen


# `_thread.interrupt_main(signum)` trips a signal's Python handler whatever the mask: no signal is
# caught, so a block that finds every signal blocked proves nothing. Two handlers trip each other, each
# through a property access (no eval-breaker check between the trip and the return), the lower-numbered
# one last, so that one trip is always left pending after each check: they ran as the mask took hold
# (allowed), and again after the take-out, after the library was put back, and in the keeper, for
# ever, every signal blocked.
PING_PONG = (
    "import _thread\nnames, _add = set(), set.add\n"
    "class Trip(int):\n    now = property(_thread.interrupt_main)\n"
    "USR1, USR2 = Trip(signal.SIGUSR1), Trip(signal.SIGUSR2)\n"
    "def ping(*_):\n"
    "    if _len(_mask(0, ())) > 40:\n        noted('ping')\n"
    "        f = _getframe(1)\n"
    "        while f is not None:\n            _add(names, f.f_code.co_name)\n            f = f.f_back\n"
    "    return USR2.now\n"
    "def pong(*_):\n    return USR1.now\n"
    "signal.signal(signal.SIGUSR1, ping)\nsignal.signal(signal.SIGUSR2, pong)\n"
    "_thread.interrupt_main(signal.SIGUSR1)\n"
)


@pytest.mark.parametrize("python", ["default", *NEWER_PYTHONS], ids=lambda path: os.path.basename(path))
async def test_a_handler_tripped_by_interrupt_main_never_runs_once_sealed(
    config: Config, no_leaks: None, python: str
) -> None:
    chosen = python_since(config, python, (3, 11))
    async with Pool.open(chosen, reap_strays=True) as pool:
        handle = await new_session(pool, MARK_OUTSIDE + AS_IT_SEALS_SETUP + "x = 1")
        armed = await call(pool, PING_PONG + "x = 2", handle)
        assert armed.session is not None, armed
        assert armed.session.kept, armed
        for later in ("raise RuntimeError('rolled back')", "raise RuntimeError('rolled back')"):
            assert (await call(pool, later, handle)).session is not None
        # (what ran in a round's own checks, as its steps were called, is allowed: left out)
        kept = "{'serve_as_keeper', '_wait_to_be_kept', 'put_own'}"
        shown = f"print(x, sorted({{o for o in outside if o[0] != '_take_round'}}), sorted(names & {kept}))"
        seen = await call(pool, shown, handle)
        assert seen.stdout.text == "2 [] []\n", seen


# An exception midway through a round (a handler of the state's, tripped by interrupt_main, raising as a
# step checks for signals once collections are off): started over, the round recorded what its first try
# had taken out as the state's: the collector off, no profile function. Every later call then ran
# without the state's profile function and with gc disabled.
RAISED_ONCE = (
    "import _thread, gc\n"
    "def prof(*_):\n    pass\n"
    "class Trip(int):\n    now = property(_thread.interrupt_main)\n"
    "USR1, USR2, raised = Trip(signal.SIGUSR1), Trip(signal.SIGUSR2), []\n"
    "def ping(signum, frame):\n"
    "    if not raised and frame.f_code.co_filename.endswith('sealing.py') and not _isenabled():\n"
    "        raised.append(1)\n        raise KeyboardInterrupt\n"
    "    return USR2.now\n"
    "def pong(*_):\n    return USR1.now\n"
    "signal.signal(signal.SIGUSR1, ping)\nsignal.signal(signal.SIGUSR2, pong)\n"
    "_isenabled = gc.isenabled\n"
    "if PROFILED:\n    sys.setprofile(prof)\n"
    "_thread.interrupt_main(signal.SIGUSR1)\n"
)


@pytest.mark.parametrize("python", ["default", *NEWER_PYTHONS], ids=lambda path: os.path.basename(path))
@pytest.mark.parametrize("profiled", [False, True], ids=["gc", "gc-and-profile"])
async def test_what_a_resumed_round_records_is_still_the_states(
    config: Config, no_leaks: None, python: str, profiled: bool
) -> None:
    # (a profile function with the ping-pong running all through a call: too slow on 3.11)
    chosen = python_since(config, python, (3, 12) if profiled else (3, 11))
    async with Pool.open(chosen, reap_strays=True) as pool:
        handle = await new_session(pool, MARK_OUTSIDE + AS_IT_SEALS_SETUP + "x = 1")
        armed = await call(pool, f"PROFILED = {profiled}\n" + RAISED_ONCE + "x = 2", handle)
        assert armed.session is not None, armed
        assert armed.session.kept, armed
        shown = "print(x, raised, gc.isenabled(), sys.getprofile() is (prof if PROFILED else None))"
        seen = await call(pool, shown, handle)
        assert seen.stdout.text == "2 [1] True True\n", seen


# Found by a second review of the rounds. sys.monitoring.free_tool_id (3.12, 3.13) frees the tool's name
# only: its events stay set and its callbacks registered, and they fire. Tools picked by
# `get_tool(tool) is not None` left a freed tool's callbacks in place: they ran in every sealed process
# and in the keeper (PY_START of each function the keeper calls).
FREED_TOOL = (
    "m = sys.monitoring\nnames, _add = set(), set.add\n"
    "def started(code, _):\n"
    "    if _len(_mask(0, ())) > 40:\n        _add(names, code.co_name)\n        noted('PY_START')\n"
    "m.use_tool_id(3, 'x')\n"
    "m.register_callback(3, m.events.PY_START, started)\n"
    "m.set_events(3, m.events.PY_START)\n"
    "m.free_tool_id(3)\n"
)


@pytest.mark.parametrize("python", NEWER_PYTHONS, ids=lambda path: os.path.basename(path))
async def test_a_freed_tools_callbacks_never_run_once_sealed(config: Config, no_leaks: None, python: str) -> None:
    chosen = python_since(config, python, (3, 12))
    async with Pool.open(chosen, reap_strays=True) as pool:
        handle = await new_session(pool, MARK_OUTSIDE + AS_IT_SEALS_SETUP + "x = 1")
        for later in (FREED_TOOL + "x = 2", "y = 1", SIGNALLED):
            assert (await call(pool, later, handle)).session is not None
        shown = "print(x, outside[:3], sorted(names & {'serve_as_keeper', 'put_own', 'seal', 'unchanged'}))"
        seen = await call(pool, shown, handle)
        assert seen.stdout.text == "2 [] []\n", seen


# What a handler of the state's does as the first round swaps handlers (run there, in the call's time)
# was lost: the first round's reads alone were the state's, a later round's (what the handler set) only
# held. Here a handler run at a step's signal check, after SIGUSR1's handler was swapped, sets
# SIGUSR1's handler to `final`; the next call got the old one back (a second review).
LAST_WORD = (
    "import _thread, _operator\n"
    "class Trip(int):\n    now = property(_thread.interrupt_main)\n"
    "ALRM, TERM, done = Trip(signal.SIGALRM), Trip(signal.SIGTERM), []\n"
    "def final(*_):\n    pass\n"
    "def ping(*_):\n    return TERM.now\n"
    "def pong(*_):\n"
    "    if not done and signal.getsignal(signal.SIGUSR1) is _operator.is_:\n"
    "        done.append(1)\n        signal.signal(signal.SIGUSR1, final)\n"
    "    return ALRM.now\n"
    "signal.signal(signal.SIGALRM, ping)\nsignal.signal(signal.SIGTERM, pong)\n"
    "_thread.interrupt_main(signal.SIGALRM)\n"
)


@pytest.mark.parametrize("python", ["default", *NEWER_PYTHONS], ids=lambda path: os.path.basename(path))
async def test_what_a_handler_set_as_the_first_round_ran_is_what_the_next_call_gets(
    config: Config, no_leaks: None, python: str
) -> None:
    chosen = python_since(config, python, (3, 11))
    async with Pool.open(chosen, reap_strays=True) as pool:
        handle = await new_session(pool, MARK_OUTSIDE + AS_IT_SEALS_SETUP + "x = 1")
        armed = await call(pool, LAST_WORD + "x = 2", handle)
        assert armed.session is not None, armed
        assert armed.session.kept, armed
        seen = await call(pool, "print(x, done, signal.getsignal(signal.SIGUSR1) is final)", handle)
        assert seen.stdout.text == "2 [1] True\n", seen


# A handler swapped out and put back is installed anew (`_signal.signal`: sigaction with SA_ONSTACK
# alone): `signal.siginterrupt(n, False)` (SA_RESTART) no longer held in the next call (a second review).
SA_FLAGS = (
    "import ctypes\n"
    "class Sigaction(ctypes.Structure):\n"
    "    _fields_ = [('handler', ctypes.c_void_p), ('mask', ctypes.c_ulong * 16), ('flags', ctypes.c_int),"
    " ('restorer', ctypes.c_void_p)]\n"
    "def restarts():\n"
    "    old = Sigaction()\n"
    "    ctypes.CDLL(None).sigaction(signal.SIGUSR1, None, ctypes.byref(old))\n"
    "    return bool(old.flags & 0x10000000)\n"
)


async def test_a_handlers_siginterrupt_is_kept(config: Config, no_leaks: None) -> None:
    async with Pool.open(config, reap_strays=True) as pool:
        handle = await new_session(pool, MARK_OUTSIDE + AS_IT_SEALS_SETUP + SA_FLAGS + "x = 1")
        armed = await call(pool, "signal.siginterrupt(signal.SIGUSR1, False)\nprint(restarts())", handle)
        assert armed.stdout.text == "True\n", armed
        assert armed.session is not None, armed
        assert armed.session.kept, armed
        seen = await call(pool, "print(restarts())", handle)
        assert seen.stdout.text == "True\n", seen


# A thread of the call's, alive through a clean round, acted after the round's end reads and ended
# before `seal` counted the call's threads: found alone, the call became the keeper without sealing
# again, and the thread's gc callback ran there (found by a third review; won within 5 tries). The
# thread waits (under the GIL, which the main thread lets go in Python code only) for the round's
# take-out of gc.callbacks, then puts a gc callback of the state's in and collections back on, and ends
# (a _thread thread: not joined as the call ends).
RACE = (
    "import gc, _thread\n"
    "sys.setswitchinterval(1e-6)\n"
    "gc.set_threshold(5)\n"
    "def cb(*_):\n    noted('gc-callback')\n"
    "gc.callbacks.append(lambda *_: None)\n"
    "def after_the_round():\n"
    "    while gc.callbacks:\n        pass\n"
    "    gc.callbacks.append(cb)\n    gc.enable()\n"
    "_thread.start_new_thread(after_the_round, ())\n"
    "x += 1\n"
)
IN_THE_KEEPER = "KEEPER = {'serve_as_keeper', '_wait_to_be_kept', '_fork_ready'}\n"


async def test_a_thread_ended_between_a_clean_round_and_the_task_count_leaves_nothing_in_the_keeper(
    config: Config, no_leaks: None
) -> None:
    async with Pool.open(config, reap_strays=True) as pool:
        handle = await new_session(pool, MARK_OUTSIDE + IN_THE_KEEPER + "import gc\nx = 0")
        found = ""
        for _ in range(16):
            assert (await call(pool, RACE, handle)).session is not None
            for _ in range(2):
                assert (await call(pool, "raise RuntimeError('rolled back')", handle)).session is not None
            shown = "cbs = {o[0] for o in outside if o[1] == 'gc-callback'}\nprint(sorted(cbs & KEEPER), sorted(cbs))"
            seen = await call(pool, shown, handle)
            assert seen.session is not None, seen
            found = seen.stdout.text
            if not found.startswith("[]"):
                break
        assert found.startswith("[]"), found
