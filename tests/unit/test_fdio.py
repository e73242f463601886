"""runner/fdio.py without the event loop: whether an fd can be read now."""

from __future__ import annotations

import os
import resource

import pytest

from runner.fdio import readable_now

HIGH_FD = 1500  # past the 1023 that select()'s fd sets end at


def test_an_fd_past_1023_can_be_asked_whether_it_is_readable() -> None:
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] <= HIGH_FD:
        pytest.skip(f"RLIMIT_NOFILE is at most {HIGH_FD}")
    r, w = os.pipe()
    os.dup2(r, HIGH_FD)
    os.close(r)
    try:
        assert not readable_now(HIGH_FD)
        os.write(w, b"x")
        assert readable_now(HIGH_FD)
    finally:
        os.close(HIGH_FD)
        os.close(w)
