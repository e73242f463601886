"""What the HTTP tests share: nothing of a server may be left once a test is over."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import processes_mentioning, settled


@pytest.fixture
def left_nothing(work_dir: Path) -> Iterator[None]:
    """After the test: no process mentions the work dir, and the work dir is empty."""
    yield
    assert settled(lambda: processes_mentioning(str(work_dir))) == []
    assert settled(lambda: list(work_dir.iterdir())) == []
