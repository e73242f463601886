"""A run's process as the server sees it: one that has exited no longer exists, reaped or not."""

from __future__ import annotations

import os

from runner.processes.child import process_exists
from tests.helpers import settled


def test_a_process_that_has_exited_no_longer_exists_for_the_teardown_even_unreaped() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        assert settled(lambda: process_exists(pid)) is False  # a zombie: exited, not reaped yet
        assert process_exists(os.getpid())
    finally:
        os.waitpid(pid, 0)
    assert not process_exists(pid)
