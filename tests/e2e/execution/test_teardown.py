"""What a run leaves in its directory is removed after it, whatever it is, and nothing it leaves ends
the pool: in every mode, for one-shot runs and for a session's directory when the session ends.

(Where runs share the file system, later runs wait for earlier teardowns: `tests/e2e/test_returns.py`.)
"""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from runner.config import Config
from runner.execution.pool import Pool
from runner.outcome import NEW_SESSION, RunRequest, Status
from tests.helpers import MODES, checked, in_mode

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# 2,000 levels, a file at the bottom: shutil.rmtree recursed once per level (RecursionError past
# about a thousand), in the thread of the server's teardown, and that ended the pool.
DEEP = """
    import os
    for _ in range({levels}):
        os.mkdir("d")
        os.chdir("d")
    open("leaf.txt", "w").write("x")
    print("deep")
"""


@pytest.fixture
def deep_removed(work_dir: Path) -> Iterator[None]:
    """After no_leaks has looked (set up before it, so torn down after it): what a failed removal
    left is removed by rm, so that pytest's own removal of old temporary directories, shutil.rmtree,
    does not fail on it in a later session."""
    yield
    subprocess.run(["rm", "-rf", "--", *map(str, work_dir.iterdir())], check=True)


@pytest.fixture(params=MODES)
async def any_pool(
    request: pytest.FixtureRequest, config: Config, deep_removed: None, no_leaks: None
) -> AsyncIterator[Pool]:
    async with Pool.open(in_mode(config, request.param), reap_strays=True) as pool:
        yield pool


async def test_a_run_that_leaves_a_directory_two_thousand_levels_deep_is_removed_and_the_pool_serves_on(
    any_pool: Pool,
) -> None:
    code = textwrap.dedent(DEEP.format(levels=2_000))
    result = checked(await any_pool.run(RunRequest("0000dee9", code, 20)))
    assert (result.status, result.stdout.text) == (Status.OK, "deep\n"), result.to_text()
    for _ in range(2):  # the second after the first's teardown (a slot each, one slot)
        after = checked(await any_pool.run(RunRequest("0000a17e", "print('served')", 20)))
        assert (after.status, after.stdout.text) == (Status.OK, "served\n"), after.to_text()
    # no_leaks: nothing of the run's directory is left once the pool is closed


@pytest.mark.parametrize("mode", ["fork-server", "bwrap", "namespaces"])
async def test_a_session_whose_directory_is_a_thousand_levels_deep_ends_and_the_pool_serves_on(
    config: Config, deep_removed: None, no_leaks: None, mode: str
) -> None:
    # Below PATH_MAX from the session's directory, so that its calls are kept (`snapshot`).
    async with Pool.open(in_mode(config, mode), reap_strays=True) as pool:
        code = textwrap.dedent(DEEP.format(levels=1_200))
        first = await pool.run(RunRequest("0000dee9", code, 20, session=NEW_SESSION))
        assert (first.status, first.stdout.text) == (Status.OK, "deep\n"), first.to_text()
        assert first.session is not None
        assert first.session.kept, first.to_text()
        assert await pool.close_session(first.session.handle, None) is None
        after = checked(await pool.run(RunRequest("0000a17e", "print('served')", 20)))
        assert (after.status, after.stdout.text) == (Status.OK, "served\n"), after.to_text()
