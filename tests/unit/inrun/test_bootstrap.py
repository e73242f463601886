"""The bootstrap's own helpers, without a run: waiting for fds."""

from __future__ import annotations

import os

from runner.inrun.bootstrap import readable
from tests.helpers import pipe_at


def test_an_fd_past_1023_is_waited_for_as_any_other() -> None:
    with pipe_at(1500) as (r, w):
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
