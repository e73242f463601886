"""The one-call Python API, `run_code`, with a real pool: as in the seed's own test, and its arguments
validated like the tool's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runner import run_code
from runner.config import Config
from runner.config.disk import open_environment
from runner.outcome import Status
from tests.helpers import SEED_PLAIN, checked


@pytest.mark.anyio
async def test_run_code_works_like_the_seeds_own_test(monkeypatch: pytest.MonkeyPatch, work_dir: Path) -> None:
    monkeypatch.setenv("RUNNER_WORK_DIR", str(work_dir))
    result = checked(await run_code("print(sum(range(10)))", timeout=5, request_id="a1b2c3d4"))
    assert re.fullmatch(SEED_PLAIN, result.to_text())
    assert result.to_text().startswith("[request_id=a1b2c3d4]\n")
    assert list(work_dir.iterdir()) == []


@pytest.mark.anyio
async def test_run_code_validates_its_arguments_like_the_tool(work_dir: Path) -> None:
    config = open_environment(Config.from_env({"RUNNER_WORK_DIR": str(work_dir)}))
    result = checked(await run_code("print(1)", timeout=-1, config=config))
    assert result.status is Status.INVALID_ARGUMENTS
    assert "invalid argument 'timeout'" in result.message
