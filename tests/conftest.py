"""Fixtures: a fast configuration, a real pool per test, and leak checks around every pool test."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from runner.config import Config
from runner.config.memory import sessions_budget
from runner.execution.pool import Pool
from tests.helpers import children_of, settled

REPO = Path(__file__).resolve().parent.parent

# A server started from this checkout takes its `.sandbox-env` and `.wheelhouse` unless RUNNER_PACKAGES and
# RUNNER_WHEELHOUSE say otherwise (runner.config.disk.with_checkout_defaults), as a user's does. The servers
# the tests start get the standard library unless a test gives them more, and say so in their environment.
os.environ.setdefault("RUNNER_PACKAGES", "")
os.environ.setdefault("RUNNER_WHEELHOUSE", "")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def config(work_dir: Path) -> Config:
    """Defaults with a private work dir and the real interpreter running these tests."""
    return dataclasses.replace(
        Config.from_env({}),
        python=os.path.realpath(sys.executable),
        work_dir=str(work_dir),
        pool_size=1,
        max_cpu_seconds=5,
        # Tests that want the sandbox say so; pids and paths printed by runs are then not the host's.
        sandbox="none",
        # What opening the environment decides (`runner.config.memory`), as a server's is.
        sessions_budget_bytes=sessions_budget(Config()),
    )


@pytest.fixture
def no_leaks(work_dir: Path) -> Iterator[None]:
    """After the test: no child process of ours remains (not even a zombie) and no directory is left."""
    yield
    assert settled(lambda: children_of(os.getpid())) == []
    assert settled(lambda: list(work_dir.iterdir())) == []


@pytest.fixture
async def pool(config: Config, no_leaks: None) -> AsyncIterator[Pool]:
    async with Pool.open(config) as pool:
        yield pool
