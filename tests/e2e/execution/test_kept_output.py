"""Kept output through the pool, in every mode: a cut stream read back whole by its caller, and out of
every sandboxed run's reach."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest

from runner.config import Config
from runner.execution.pool import Pool
from runner.outcome import RunRequest, Status
from tests.helpers import SIX_MB_CODE, SIX_MB_OUTPUT, in_mode

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ["fork-server", "bwrap", "namespaces"])
async def test_a_cut_stream_is_kept_for_its_caller_alone_and_a_sandboxed_run_cannot_reach_it(
    config: Config, mode: str, no_leaks: None
) -> None:
    async with Pool.open(in_mode(config, mode)) as pool:
        result = await pool.run(RunRequest("k", SIX_MB_CODE, 30, caller="alice"))
        assert result.status is Status.OK, result.to_text()
        [kept] = result.kept
        assert (kept.stream, kept.size, kept.complete) == ("stdout", len(SIX_MB_OUTPUT), True)
        found = await pool.read_output(kept.uri, "alice")
        assert found is not None
        assert found[1] == SIX_MB_OUTPUT
        assert await pool.read_output(kept.uri, "bob") is None
        assert [k.uri for k in pool.kept_outputs("alice")] == [kept.uri]
        probe = f"import glob\nprint(glob.glob({config.work_dir!r} + '/python-runner-kept-*'))"
        looked = await pool.run(RunRequest("p", probe, 30, caller="bob"))
        if mode != "fork-server":  # a plain run is the server's uid: it could (docs/security.md)
            assert looked.stdout.text == "[]\n", looked.to_text()
        short = await pool.run(RunRequest("s", "print('short')", 10, caller="alice"))
        assert short.kept == ()


async def test_kept_output_is_deleted_when_its_time_comes_though_no_call_uses_the_store(
    config: Config, work_dir: Path, no_leaks: None
) -> None:
    """Found by a review: an expired stream stayed on disk until the next call kept or read something."""
    async with Pool.open(dataclasses.replace(config, kept_output_seconds=1)) as pool:
        result = await pool.run(RunRequest("k", SIX_MB_CODE, 30, caller="alice"))
        [kept_directory] = work_dir.glob("python-runner-kept-*")
        assert result.kept
        assert list(kept_directory.iterdir())
        with anyio.fail_after(10):  # its time is 1 s; nothing is asked of the pool meanwhile
            while list(kept_directory.iterdir()):
                await anyio.sleep(0.05)
