"""runner/fdio.py without the event loop: whether an fd can be read now."""

from __future__ import annotations

import os

from runner.fdio import readable_now
from tests.helpers import pipe_at


def test_an_fd_past_1023_can_be_asked_whether_it_is_readable() -> None:
    with pipe_at(1500) as (r, w):
        assert not readable_now(r)
        os.write(w, b"x")
        assert readable_now(r)
