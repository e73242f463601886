"""What a run may send through `mcp_tools` that it should not, each found by a review and each once a
way to hurt more than the run's own call: arguments that take the event loop long to check, text no
UTF-8 holds, NaN, a flood of frames, bodies it reads no answer to, a report written while a thread
writes a call, an answer its process gave up; and a downstream's error that tells its credential.
Against tests/downstream/hostile_server.py, which checks no arguments itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.code_mode import hostile, run, run_measured, run_once, stdio_session, tools_file

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# A child forked now makes a call of its own, and its parent waits for it.
CHILD_CALLS = (
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    try:\n"
    "        print('child', said(lambda: h.backtracks(s='aa')), flush=True)\n"
    "    finally:\n"
    "        os._exit(0)\n"
    "os.waitpid(pid, 0)\n"
)
# A child forked now gives up a slow call (a signal's exception), its answer left at the head of the
# socket, and idles, calling no more; its parent goes on once it has.
CHILD_GIVES_UP = (
    "import os, signal, socket, time\n"
    "ready, told = os.pipe()\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "{imports}"
    "    def alarm(*_):\n"
    "        raise RuntimeError('gave up')\n"
    "    signal.signal(signal.SIGALRM, alarm)\n"
    "    signal.setitimer(signal.ITIMER_REAL, 0.3)\n"
    "    try:\n"
    "        {slow}(seconds=1)\n"
    "    except RuntimeError as exc:\n"
    "        print('child', exc, flush=True)\n"
    "    with socket.socket(fileno=os.dup(3)) as peek:\n"
    "        peek.recv(64, socket.MSG_PEEK)  # the answer given up is at the head now\n"
    "    os.write(told, b'.')\n"
    "    time.sleep(60)  # alive, and calling no more\n"
    "os.read(ready, 1)\n"
)
SAID = (
    "import mcp_tools\n"
    "h = mcp_tools.hostile\n"
    "def said(call):\n"
    "    try:\n"
    "        return call()\n"
    "    except mcp_tools.ToolError as exc:\n"
    "        return str(exc)\n"
)


async def test_many_arguments_are_checked_within_a_budget_and_what_is_past_it_is_left_to_the_downstream(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: 5,000,000 items held the event loop 48 s in the schema check (every error of
    # them gathered to rank), every other run's call and timeout with it. A check now takes at most
    # MOST_STEPS keyword evaluations (a schema whose $refs expand without end: test_hostile_servers)
    # of at most MOST_NODES values, and ranks the first 64 errors: a mismatch early in a long list is
    # still told, quickly; 300,000 values are the downstream's to check.
    code = SAID + (
        "print(said(lambda: h.texts(xs=[0])))\n"
        "print(said(lambda: h.texts(xs=[0] * 50_000))[:80])\n"
        "print(said(lambda: h.texts(xs=['a'] * 300_000)))\n"
        "print(said(lambda: h.texts(xs=[0] * 300_000)))\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", done
    assert done["stdout"].splitlines() == [
        "hostile.texts: the arguments do not match the tool's input schema: argument 'xs/0': 0 is not of type 'string'",
        "hostile.texts: the arguments do not match the tool's input schema: argument 'xs/",
        "texts 300000",
        "texts 300000",
    ]


async def test_a_lone_surrogate_in_the_arguments_is_refused_and_the_downstream_serves_on(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: JSON may spell a lone surrogate; the SDK's stdio writer could not encode it,
    # and its connection ended: the downstream restarted, every run's calls to it failed meanwhile.
    # Found by a third: json.loads takes bytes as UTF-8 with surrogates, or as UTF-16: no escape needed.
    code = SAID + (
        "print(said(lambda: h.backtracks(s='\\ud800')))\n"
        "print(said(lambda: h.backtracks(s='a\\U0001F600')))\n"
        "print(said(lambda: h.backtracks(s='aa')))\n"
        "import json, os\n"
        # The surrogate as UTF-8 bytes (which json.loads takes from bytes), and as a UTF-16 frame.
        'raw = b\'{"op": "call", "server": "hostile", "tool": "backtracks", "arguments": {"s": "\\xed\\xa0\\x80"}}\'\n'
        "for n, frame in enumerate((raw, raw.decode('utf-8', 'surrogatepass').encode('utf-16', 'surrogatepass'))):\n"
        "    print(json.loads(mcp_tools._mcp_exchange(frame, b'%d.90%d' % (os.getpid(), n))))\n"
        "print(said(lambda: h.backtracks(s='aaa')))\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", done
    assert done["stdout"].splitlines() == [
        "hostile.backtracks: the arguments hold a lone surrogate, which is not Unicode text",
        "backtracks ok",
        "backtracks ok",
        "{'ok': False, 'error': 'the run sent a call that is not JSON'}",
        "{'ok': False, 'error': 'the run sent a call that is not JSON'}",
        "backtracks ok",
    ]
    assert "tool server down" not in (tmp_path / "stderr.log").read_text()


async def test_nan_and_infinity_are_refused_not_sent_on_as_null(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: Python writes NaN and Infinity into JSON, which has neither; the SDK sent them
    # on as null. A frame of the run's own that holds one is refused by the server too, and one of a
    # number too large for a float (found by a review: 1e400 reached the tool as null).
    frame = b'{"op": "call", "server": "hostile", "tool": "measure", "arguments": {"x": %s}}'
    code = SAID + (
        "import json, os\n"
        "print(said(lambda: h.measure(x=float('nan'))))\n"
        "print(said(lambda: h.measure(x=1.5)))\n"
        f"for n, x in enumerate((b'Infinity', b'1e400', b'-1e400')):\n"
        f"    print(json.loads(mcp_tools._mcp_exchange({frame!r} % x, b'%d.90%d' % (os.getpid(), n))))\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", done
    refused, measured, *raw = done["stdout"].splitlines()
    assert refused.startswith("hostile.measure: the arguments are not JSON: Out of range float values"), refused
    assert measured == "measure 1.5"
    assert raw == [
        "{'ok': False, 'error': 'the run sent a call that is not JSON: Infinity is not JSON'}",
        "{'ok': False, 'error': 'the run sent a call that is not JSON: 1e400 is too large for a number'}",
        "{'ok': False, 'error': 'the run sent a call that is not JSON: -1e400 is too large for a number'}",
    ]


async def test_a_call_of_more_lists_than_the_bound_is_refused_undecoded_and_the_run_calls_on(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: one frame of 16 MiB of `[],`, within the run's budget, held the event loop
    # 3.5 s (a ping from another client 7 s) and took the server 450 MB more; four runs at once, 3.5 GB.
    code = SAID + (
        "import json, os\nprint(said(lambda: h.measure(x=[[]] * 4_000_000)))\nprint(said(lambda: h.measure(x=1.5)))\n"
    )
    done, grew = await run_measured(work_dir, tmp_path, tools_file(tmp_path, hostile=hostile()), code)
    assert done["status"] == "ok", done
    assert done["stdout"].splitlines() == [
        "hostile.measure: the run sent a call of more than 1,000,000 JSON values; send them in smaller calls",
        "measure 1.5",
    ]
    assert grew < 100 << 20, f"{grew >> 20} MiB more"


async def test_arguments_nested_past_the_bound_are_refused_at_once_and_within_it_reach_the_tool(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: arguments nested 199-250 deep passed our checks, but a Python SDK tool server
    # (pydantic parses a message 200 deep) dropped the call unanswered: it waited out the run's timeout.
    code = SAID + (
        "import time\n"
        "def nested(levels):\n"
        "    value = 0\n"
        "    for _ in range(levels):\n"
        "        value = [value]\n"
        "    return value\n"
        "started = time.monotonic()\n"
        "print(said(lambda: h.measure(x=1, y=nested(99))))\n"  # with the arguments' own object, 100
        "print(said(lambda: h.measure(x=2, y=nested(219))))\n"
        "print(said(lambda: h.measure(x=3)), time.monotonic() - started < 10)\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", done
    assert done["stdout"].splitlines() == [
        "measure 1",
        "hostile.measure: the arguments nest 220 levels deep, more than 100, which a tool server may not parse",
        "measure 3 True",
    ]


async def test_a_tools_own_error_has_the_credentials_of_its_entry_masked(work_dir: Path, tmp_path: Path) -> None:
    # Found by a review: why a server is down, or a call failed, was masked; the tool's own isError
    # text went to the run as the downstream wrote it.
    secret = "hostile-secret-" + os.urandom(8).hex()
    path = tools_file(tmp_path, hostile=hostile(HOSTILE_SECRET=secret))
    code = SAID + "print(said(h.leaks))\n"
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["stdout"] == "hostile.leaks: the tool failed: upstream refused the credential ***\n"
    assert secret not in (tmp_path / "stderr.log").read_text()


async def test_a_result_that_tells_a_credential_of_its_entry_has_it_masked_and_the_rest_as_it_is(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a first hour: code-mode.md's own example (server-everything, every tool, a key in its
    # env) let a run read the key through its get-env tool; errors and stderr were masked, results not.
    secret = "hostile-secret-" + os.urandom(8).hex()
    entry = hostile(HOSTILE_SECRET=secret, HOSTILE_API_KEY="12345678", HOSTILE_ZONE="Europe/Istanbul")
    path = tools_file(tmp_path, hostile=entry)
    code = SAID + "told = h.leaks(told=True)\nprint(sorted(told['environment'].items()), told['numbers'])\n"
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", done
    assert secret not in done["stdout"]
    # Masked where a credential's variable says it is one (in strings: a number of its digits stays one);
    # a value whose name says nothing of the kind is the tool's to tell.
    assert done["stdout"] == (
        "[('HOSTILE_API_KEY', '***'), ('HOSTILE_SECRET', '***'), ('HOSTILE_ZONE', 'Europe/Istanbul')] [12345678]\n"
    )


async def test_a_run_calling_and_reading_its_answers_loses_its_channel_past_its_frames(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: a flood of empty or refused frames, each answered and read, kept the event
    # loop busy for the run's whole timeout (empty frames never even reached the run's bytes limit).
    # Past 10 frames a call it may make (RUNNER_TOOLS_MAX_CALLS, here 100) and 1,000 besides, its
    # channel is shut: the module's frame is the first, so the 2,000th call is the one past them.
    code = (
        "import mcp_tools\n"
        "for n in range(3000):\n"
        "    try:\n"
        "        mcp_tools.call('hostile', 'no such tool', {})\n"
        "    except mcp_tools.ToolError as exc:\n"
        "        if 'channel' in str(exc):\n"
        "            print(n, exc)\n"
        "            break\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    done = await run_once(work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path))
    assert done["status"] == "ok", done
    assert done["stdout"].startswith("1999 hostile.no such tool: this run's channel to the server failed"), done


async def test_the_bodies_of_frames_a_run_reads_no_answer_to_are_not_held_by_the_server(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: each answer waiting to be written (the run reads none) held the body of its
    # frame, up to RUNNER_TOOLS_MAX_MB apiece, 1,024 frames a run: 74 MB -> 1.1 GB in 1.6 s. The small
    # frames' answers fill the socket first; each frame names a pid of its own, within the limits.
    code = (
        "import os, mcp_tools\n"
        'small = b\'{"op": "nothing"}\'\n'
        "for n in range(600):\n"
        "    os.write(3, b'tool %d %d.1\\n' % (len(small), 100000 + n) + small)\n"
        "large = b'x' * (8 << 20)\n"
        "for n in range(30):\n"
        "    os.write(3, b'tool %d %d.1\\n' % (len(large), 200000 + n) + large)\n"
        "print('sent')\n"
    )
    done, grown = await run_measured(work_dir, tmp_path, tools_file(tmp_path, hostile=hostile()), code)
    assert done["stdout"] == "sent\n", done
    assert grown < 100 << 20, f"the server's peak memory grew {grown >> 20} MiB for 240 MiB of frames"


async def test_the_report_comes_whole_while_a_thread_of_the_run_writes_a_large_call(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: a POSIX lock keeps processes apart, not threads: the report went out while a
    # daemon thread's large frame was being written, into the middle of it, and was lost.
    code = (
        "import threading, mcp_tools\n"
        "writing = threading.Event()\n"
        "def flood():\n"
        "    while True:\n"
        "        writing.set()\n"
        "        try:\n"
        "            mcp_tools.hostile.backtracks(s='b' * 6_000_000)\n"
        "        except mcp_tools.ToolError:\n"
        "            pass\n"
        "threading.Thread(target=flood, daemon=True).start()\n"
        "writing.wait()\n"
        "6 * 7\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path), RUNNER_TOOLS_MAX_MB="64") as client:
            results = [await run(client, code) for _ in range(3)]
    outcomes = [(done["status"], done["result"], done.get("not_returned") or []) for done in results]
    assert outcomes == [("ok", "42", [])] * 3


async def test_an_answer_its_process_gave_up_does_not_hold_up_the_calls_of_the_runs_other_processes(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: an answer whose process is alive but gave up its call (a signal's exception)
    # sat at the head of the socket, and a forked child's calls waited behind it until the timeout.
    code = SAID + (
        "import os, signal, socket\n"
        "def alarm(*_):\n"
        "    raise RuntimeError('gave up')\n"
        "signal.signal(signal.SIGALRM, alarm)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.3)\n"
        "try:\n"
        "    h.slow(seconds=1)\n"
        "except RuntimeError as exc:\n"
        "    print('parent', exc, flush=True)\n"
        "with socket.socket(fileno=os.dup(3)) as peek:\n"
        "    peek.recv(64, socket.MSG_PEEK)  # the answer given up is at the head now\n"
        + CHILD_CALLS
        + "print('parent done')\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            done = await run(client, code, timeout=10)
    assert done["status"] == "ok", (done["stdout"], done["stderr"])
    assert done["stdout"].splitlines() == ["parent gave up", "child backtracks ok", "parent done"]


async def test_a_process_that_gave_up_more_calls_than_eight_still_within_the_runs_limit_keeps_its_channel(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: past eight unanswered frames a process's channel was shut as flooding, its
    # calls still in flight downstream counted, so under RUNNER_TOOLS_MAX_CONCURRENT=12 a process that
    # gave up ten slow calls (a signal's exception each) lost the channel that its limit allowed.
    code = SAID + (
        "import signal\n"
        "def alarm(*_):\n"
        "    raise RuntimeError('gave up')\n"
        "signal.signal(signal.SIGALRM, alarm)\n"
        "for _ in range(10):\n"
        "    signal.setitimer(signal.ITIMER_REAL, 0.2)\n"
        "    try:\n"
        "        h.slow(seconds=20)\n"
        "    except RuntimeError:\n"
        "        pass\n"
        "signal.setitimer(signal.ITIMER_REAL, 0)\n"
        "print(said(lambda: h.backtracks(s='aa')))\n"
        "print(said(lambda: h.slow(seconds=1)))\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(
            work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path), RUNNER_TOOLS_MAX_CONCURRENT="12"
        ) as client:
            done = await run(client, code, timeout=20)
    assert done["status"] == "ok", (done["stdout"], done["stderr"])
    assert done["stdout"].splitlines() == ["backtracks ok", "slow ok"]


async def test_a_call_given_up_by_a_process_forked_before_mcp_tools_was_imported_is_dropped_all_the_same(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a third review: the memory that says which calls were given up was made at each
    # process's first import of mcp_tools, so processes forked before it did not share it: the
    # parent's call waited behind the child's answer until the child ended.
    code = CHILD_GIVES_UP.format(imports="    import mcp_tools\n", slow="mcp_tools.hostile.slow") + (
        "import mcp_tools\n"
        "print('parent', mcp_tools.hostile.backtracks(s='aa'), flush=True)\n"
        "os.kill(pid, signal.SIGKILL)\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            done = await run(client, code, timeout=10)
    assert done["status"] == "ok", (done["stdout"], done["stderr"])
    assert done["stdout"].splitlines() == ["child gave up", "parent backtracks ok"]


async def test_a_process_forked_while_a_thread_waits_for_an_answer_makes_calls_of_its_own(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the run waited for answers on one poll object, and a fork copies its "in use"
    # mark: a child forked while a thread of its parent waited could never poll, every call of its a
    # RuntimeError (not a ToolError), its call still sent and its answer dropped.
    code = SAID + (
        "import os, threading, time\n"
        "slow = threading.Thread(target=lambda: print('thread', said(lambda: h.slow(seconds=1)), flush=True))\n"
        "slow.start()\n"
        "time.sleep(0.3)  # the thread waits for its answer\n" + CHILD_CALLS + "slow.join()\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            done = await run(client, code, timeout=10)
    assert done["status"] == "ok", (done["stdout"], done["stderr"])
    assert done["stdout"].splitlines() == ["child backtracks ok", "thread slow ok"], done["stdout"]


async def test_a_signal_while_the_main_thread_reads_a_workers_answer_fails_the_main_threads_call_alone(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the main thread, waiting first, read for the worker too, and the alarm's
    # exception (raised only while it took the worker's 8 MB answer, to pick the moment) left the rest
    # of that answer at the head: the worker, and every later call of the run, waited until the run's
    # timeout. Now no thread takes another's answer (the reading is handed to its own thread).
    code = SAID + (
        "import signal, threading, time\n"
        "def alarm(signum, frame):\n"
        "    while frame is not None:\n"
        "        if frame.f_code.co_name == '_receive':\n"
        "            signal.setitimer(signal.ITIMER_REAL, 0)\n"
        "            raise RuntimeError('gave up')\n"
        "        frame = frame.f_back\n"
        "signal.signal(signal.SIGALRM, alarm)\n"
        "got = []\n"
        "def worker():\n"
        "    time.sleep(0.5)\n"
        "    got.append(len(said(lambda: h.huge(megabytes=8))))\n"
        "thread = threading.Thread(target=worker)\n"
        "thread.start()\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)\n"
        "try:\n"
        "    print('main', said(lambda: h.slow(seconds=4)), flush=True)\n"
        "except RuntimeError as exc:\n"
        "    print('main', exc, flush=True)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0)\n"
        "thread.join()\n"
        "print('worker', got, flush=True)\n"
        "print('after', said(lambda: h.backtracks(s='aa')))\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path), RUNNER_TOOLS_MAX_MB="64") as client:
            done = await run(client, code, timeout=15)
    assert done["status"] == "ok", (done["status"], done["stdout"], done["stderr"])
    main, *rest = done["stdout"].splitlines()
    assert main in ("main gave up", "main slow ok")  # a fix may never have the main thread take the worker's
    assert rest == ["worker [8000000]", "after backtracks ok"]


async def test_threads_past_the_limit_of_calls_in_flight_are_told_so_and_the_run_goes_on(
    work_dir: Path, tmp_path: Path
) -> None:
    code = SAID + (
        "import threading\n"
        "start = threading.Barrier(6)\n"
        "said_ = []\n"
        "def slow():\n"
        "    start.wait()\n"
        "    said_.append(said(lambda: h.slow(seconds=1.5)))\n"
        "threads = [threading.Thread(target=slow) for _ in range(6)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "print(sorted('ok' if s == 'slow ok' else 'refused' if 'in flight' in s else s for s in said_))\n"
        "print(said(lambda: h.backtracks(s='aa')))\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    done = await run_once(
        work_dir, tmp_path / "stderr.log", code, RUNNER_TOOLS_CONFIG=str(path), RUNNER_TOOLS_MAX_CONCURRENT="2"
    )
    assert done["status"] == "ok", (done["stdout"], done["stderr"])
    expected = ["['ok', 'ok', 'refused', 'refused', 'refused', 'refused']", "backtracks ok"]
    assert done["stdout"].splitlines() == expected, done


async def test_fifty_threads_calling_at_once_each_get_their_own_answers(work_dir: Path, tmp_path: Path) -> None:
    code = SAID + (
        "import threading\n"
        "threading.stack_size(256 * 1024)  # fifty within the run's memory\n"
        "wrong = []\n"
        "def many(n):\n"
        "    for i in range(20):\n"
        "        got = said(lambda: h.measure(x=n * 1000 + i))\n"
        "        if got != f'measure {n * 1000 + i}' and 'in flight' not in got:\n"
        "            wrong.append(got)\n"
        "threads = [threading.Thread(target=many, args=(n,)) for n in range(50)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "print('wrong', wrong[:3], len(wrong))\n"
    )
    path = tools_file(tmp_path, hostile=hostile())
    done = await run_once(
        work_dir,
        tmp_path / "stderr.log",
        code,
        RUNNER_TOOLS_CONFIG=str(path),
        RUNNER_TOOLS_MAX_CONCURRENT="4",
        RUNNER_TOOLS_MAX_CALLS="2000",
        RUNNER_MAX_PROCESSES="256",
    )
    assert done["status"] == "ok", (done["stdout"], done["stderr"])
    assert done["stdout"] == "wrong [] 0\n", done


async def test_a_session_call_after_one_that_left_a_thread_waiting_for_an_answer_calls_tools(
    work_dir: Path, tmp_path: Path
) -> None:
    # The next call is forked from the state the last one left, its waiting thread gone: it reads for itself.
    path = tools_file(tmp_path, hostile=hostile())
    first_code = SAID + (
        "import threading, time\n"
        "threading.Thread(target=lambda: h.slow(seconds=30), daemon=True).start()\n"
        "time.sleep(0.3)\n"
        "print(said(lambda: h.backtracks(s='a')))\n"
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            first = await run(client, first_code, session="new", timeout=10)
            second = await run(
                client,
                "print(said(lambda: h.backtracks(s='aa')), said(lambda: h.measure(x=1)))",
                session=first["session"],
                timeout=10,
            )
    assert first["stdout"] == "backtracks ok\n", first
    assert second["status"] == "ok", second
    assert second["stdout"] == "backtracks ok measure 1\n", second


async def test_a_call_given_up_by_a_forked_child_in_a_later_session_call_does_not_hold_up_its_parent(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found at a stop's look back: a kept state's shared memory is made private (`sealing.share_nothing`),
    # the memory that says which calls were given up with it, so in a later call a child's give-up went
    # unseen by its parent, whose calls waited behind the child's answer until the timeout.
    path = tools_file(tmp_path, hostile=hostile())
    second_code = CHILD_GIVES_UP.format(imports="", slow="h.slow") + (
        "print('parent', said(lambda: h.backtracks(s='aa')), flush=True)\nos.kill(pid, signal.SIGKILL)\n"
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            first = await run(client, SAID + "print(said(lambda: h.backtracks(s='a')))", session="new", timeout=10)
            second = await run(client, second_code, session=first["session"], timeout=10)
    assert first["stdout"] == "backtracks ok\n", first
    assert second["status"] == "ok", (second["stdout"], second["stderr"])
    assert second["stdout"].splitlines() == ["child gave up", "parent backtracks ok"]
