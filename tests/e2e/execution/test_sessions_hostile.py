"""Sessions against hostile calls, in the plain fork server and both sandboxes: whatever a call writes on
the channels it can reach (its channel to the anchor, its job socket, its pipes), the server goes on
serving every other caller, and only that session can end."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from runner.config import Config
from runner.execution.pool import Pool
from runner.outcome import RunRequest, Status
from tests.e2e.execution.test_sessions import call, new_session
from tests.helpers import in_mode

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["fork-server", "bwrap", "namespaces"])
def session_config(config: Config, request: pytest.FixtureRequest) -> Config:
    return in_mode(config, str(request.param), max_concurrent=4)


@pytest.fixture
async def pool(session_config: Config, no_leaks: None) -> AsyncIterator[Pool]:
    async with Pool.open(session_config, reap_strays=True) as pool:
        yield pool


# What a call's code writes on its channel to the anchor (fd 254, one message a packet), then goes on:
# the review's reproduction first (a forged P naming the call, then a D whose numbers are not numbers).
CHANNEL = "import os, socket, time\ns = socket.socket(fileno=254)\n"
GARBAGE = {
    "forged-end-not-numbers": "s.send(b'P %d 0' % os.getpid()); time.sleep(.2); s.send(b'D abc def ghi')",
    "forged-end-wrong-count": "s.send(b'P %d 0' % os.getpid()); time.sleep(.2); s.send(b'D 1 2')",
    "forged-end-nan-inf": "s.send(b'P %d 0' % os.getpid()); time.sleep(.2); s.send(b'D nan inf -1')",
    "forged-end-huge": "s.send(b'P %d 0' % os.getpid()); time.sleep(.2); s.send(b'D 1e308 9' + b'9' * 400 + b' 1')",
    "forged-end-newlines": "s.send(b'P %d 0' % os.getpid()); time.sleep(.2); s.send(b'D 0 0 0\\nE x\\nV 1 0 -')",
    "candidate-not-a-pid": "s.send(b'P abc 0')",
    "candidate-too-big": "s.send(b'P ' + b'9' * 30 + b' 0')",
    "candidate-another-process": "s.send(b'P 1 0')",
    "candidate-the-keeper": "s.send(b'P %d 0' % os.getppid())",
    "binary": "s.send(bytes(range(256)) * 2)",
    "no-newline-huge": "s.send(b'x' * 60000)",
    "flood": "for _ in range(20000):\n    try: s.send(b'D 0 0 0', socket.MSG_DONTWAIT)\n    except OSError: pass",
    "job-socket": "os.write(3, b'\\xff' * 100000 + b'\\n' + b'garbage')",
    "closed-channel": "s.close()",
}


@pytest.mark.parametrize("written", GARBAGE.values(), ids=GARBAGE.keys())
async def test_garbage_on_a_calls_channels_never_stops_the_server_for_another_caller(pool: Pool, written: str) -> None:
    handle = await new_session(pool, "x = 41", caller="mallory")
    answers: dict[str, object] = {}

    async def hostile() -> None:
        answers["hostile"] = (await call(pool, CHANNEL + written + "\nx = 42", handle, caller="mallory")).status

    async def other() -> None:
        result = await pool.run(RunRequest("t", "print(6 * 7)", 10, caller="alice"))
        answers["other"] = (result.status, result.stdout.text)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hostile)
            tg.start_soon(other)
        # Once more, after: the pool is still there, and the hostile session is whole or ended alone.
        after = await pool.run(RunRequest("t", "print(6 * 7)", 10, caller="alice"))
        state = await call(pool, "print(x)", handle, caller="mallory")
    assert answers["other"] == (Status.OK, "42\n")
    assert (after.status, after.stdout.text) == (Status.OK, "42\n")
    whole = state.status is Status.OK and state.stdout.text in ("41\n", "42\n")
    assert whole or state.message.startswith("unknown session"), state
