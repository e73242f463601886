"""Sessions through the pool with real interpreters, in the plain fork server and both sandboxes:
state kept by a call that ends ok, everything else rolled back, files included; handles bound to
their caller; the caps; a keeper killed from inside a call."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from runner.config import Config
from runner.execution.pool import Pool
from runner.outcome import NEW_SESSION, RunRequest, RunResult, Status
from tests.helpers import in_mode

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["fork-server", "bwrap", "namespaces"])
def session_config(config: Config, request: pytest.FixtureRequest) -> Config:
    return in_mode(config, str(request.param))


@pytest.fixture
async def pool(session_config: Config, no_leaks: None) -> AsyncIterator[Pool]:
    async with Pool.open(session_config, reap_strays=True) as pool:
        yield pool


async def call(pool: Pool, code: str, session: str, caller: str | None = None, timeout: float = 10) -> RunResult:
    return await pool.run(RunRequest("t", code, timeout, session=session, caller=caller))


async def new_session(pool: Pool, code: str = "pass", caller: str | None = None) -> str:
    result = await call(pool, code, NEW_SESSION, caller)
    assert result.status is Status.OK, result
    assert result.session is not None
    assert result.session.kept
    return result.session.handle


async def test_a_call_that_ends_ok_keeps_its_state_for_the_next_call_in_a_process_of_its_own(pool: Pool) -> None:
    handle = await new_session(pool, "import os\nx = 41\nfirst = os.getpid()")
    result = await call(pool, "x += 1\nprint(x, os.getpid() != first)", handle)
    assert result.stdout.text == "42 True\n"
    assert result.session is not None
    assert result.session.kept
    assert "--- session: " + handle + " | kept ---" in result.to_text()


@pytest.mark.parametrize(
    "failing",
    [
        "x = 0\nraise ValueError('boom')",
        "x = 0\nwhile True: pass",
        "x = 0\nimport sys\nsys.exit(0)",
        "x = 0\nimport os\nos._exit(0)",
        "x = 0\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
        "x = 0\nprint('y' * 30_000_000)",
        "x = 0\nb = bytearray(2**31)",
    ],
    ids=["exception", "timeout", "sys-exit", "os-exit", "killed", "output-limit", "memory"],
)
async def test_a_call_that_does_not_end_ok_is_rolled_back_and_the_result_says_so(pool: Pool, failing: str) -> None:
    handle = await new_session(pool, "x = 41")
    result = await call(pool, failing, handle, timeout=2)
    assert result.session is not None
    assert not result.session.kept, result
    assert "rolled back" in result.to_text()
    after = await call(pool, "print(x)", handle)
    assert after.stdout.text == "41\n", after


async def test_files_a_rolled_back_call_wrote_changed_or_removed_are_put_back(pool: Pool) -> None:
    handle = await new_session(pool, "open('kept.txt', 'w').write('kept')\nimport os\nos.mkdir('d')")
    code = (
        "open('kept.txt', 'w').write('changed')\nopen('new.txt', 'w').write('new')\n"
        "import os\nos.rmdir('d')\nraise RuntimeError"
    )
    result = await call(pool, code, handle)
    assert result.session is not None
    assert not result.session.kept
    after = await call(pool, "import os\nprint(open('kept.txt').read(), sorted(os.listdir('.')))", handle)
    assert after.stdout.text == "kept ['d', 'kept.txt']\n", after


async def test_an_unknown_handle_one_character_off_runs_nothing_and_says_unknown_session(pool: Pool) -> None:
    handle = await new_session(pool, "x = 1")
    off = handle[:-1] + ("A" if handle[-1] != "A" else "B")
    result = await call(pool, "x = 2", off)
    assert result.status is Status.INVALID_ARGUMENTS
    assert result.message.startswith("unknown session")
    assert (await call(pool, "print(x)", handle)).stdout.text == "1\n"


async def test_another_callers_handle_counts_as_unknown(pool: Pool) -> None:
    handle = await new_session(pool, "secret = 1", caller="alice")
    result = await call(pool, "print(secret)", handle, caller="bob")
    assert result.status is Status.INVALID_ARGUMENTS
    assert result.message.startswith("unknown session")


async def test_a_closed_session_is_unknown_and_says_why(pool: Pool) -> None:
    handle = await new_session(pool)
    assert await pool.sessions.close(handle, None)
    result = await call(pool, "pass", handle)
    assert result.message.startswith("unknown session")
    assert "closed" in result.message


async def test_a_call_that_kills_its_keeper_is_kept_and_the_session_goes_on(pool: Pool) -> None:
    handle = await new_session(pool, "x = 5")
    result = await call(pool, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nx += 1", handle)
    assert result.session is not None
    assert result.session.kept, result
    assert (await call(pool, "print(x)", handle)).stdout.text == "6\n"


async def test_a_failed_call_that_killed_its_keeper_ends_that_session_alone(pool: Pool) -> None:
    other = await new_session(pool, "y = 7")
    handle = await new_session(pool, "x = 5")
    await call(pool, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nraise ValueError", handle)
    result = await call(pool, "print(x)", handle)
    assert result.message.startswith("unknown session"), result
    assert "keeper" in result.message, result
    assert (await call(pool, "print(y)", other)).stdout.text == "7\n"


async def test_one_more_session_than_a_caller_may_hold_is_refused_naming_the_limit(
    session_config: Config, no_leaks: None
) -> None:
    config = dataclasses.replace(session_config, max_sessions_per_caller=1)
    async with Pool.open(config, reap_strays=True) as pool:
        await new_session(pool, caller="alice")
        refused = await call(pool, "pass", NEW_SESSION, "alice")
        assert refused.status is Status.BUSY
        assert "RUNNER_MAX_SESSIONS_PER_CALLER=1" in refused.message
        await new_session(pool, caller="bob")


async def test_the_kept_state_continues_its_random_streams_and_a_retry_after_a_roll_back_draws_the_same(
    pool: Pool,
) -> None:
    handle = await new_session(pool, "import random\nrandom.seed(3)")
    failed = await call(pool, "print(random.random())\nraise ValueError", handle)
    retried = await call(pool, "print(random.random())", handle)
    assert failed.stdout.text == retried.stdout.text
    import random

    random.seed(3)
    assert retried.stdout.text == f"{random.random()}\n"
