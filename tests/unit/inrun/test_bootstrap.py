"""The bootstrap's own helpers, without a run: waiting for fds."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator

import pytest

from runner.inrun.bootstrap import readable

HIGH_FD = 1500  # past the 1023 that select()'s fd sets end at


@pytest.fixture
def high_pipe() -> Iterator[tuple[int, int]]:
    """A pipe whose read end is fd HIGH_FD: (read end, write end)."""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] <= HIGH_FD:
        pytest.skip(f"RLIMIT_NOFILE is at most {HIGH_FD}")
    r, w = os.pipe()
    os.dup2(r, HIGH_FD)
    os.close(r)
    try:
        yield HIGH_FD, w
    finally:
        os.close(HIGH_FD)
        os.close(w)


def test_an_fd_past_1023_is_waited_for_as_any_other(high_pipe: tuple[int, int]) -> None:
    r, w = high_pipe
    assert readable([r], 0) == []
    os.write(w, b"x")
    assert readable([r], 0) == [r]


def test_a_pipe_at_its_end_is_readable_and_none_is_waited_for_past_the_timeout() -> None:
    r, w = os.pipe()
    try:
        assert readable([r], 0.01) == []
        os.close(w)
        w = -1
        assert readable([r], None) == [r]  # EOF: a read returns at once
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
