"""Both sandboxes, for the tests of what they contain: the same guarantees, checked from the host."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from runner.config import Config
from runner.execution.pool import Pool
from tests.helpers import in_mode


@pytest.fixture(params=["bwrap", "namespaces"])
def sandbox_config(config: Config, request: pytest.FixtureRequest) -> Config:
    """Each run in bubblewrap, or forked into namespaces the zygote makes: the same guarantees."""
    return in_mode(config, str(request.param), pool_size=0)


@pytest.fixture
async def sandboxed(sandbox_config: Config, no_leaks: None) -> AsyncIterator[Pool]:
    async with Pool.open(sandbox_config, reap_strays=True) as pool:
        yield pool
