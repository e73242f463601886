"""The server's own helper processes (the compile of a distribution installed from the wheelhouse): known
to the stray sweep from the moment they exist, so that it never takes one for what a run left behind.

The server is a child subreaper and kills every child it does not know (`execution/sweep.py`). A helper
is a child too, started from a worker thread while the sweep runs on the event loop: between the fork
and the moment its pid is recorded, the sweep would see an unknown child. So a helper is started
holding a lock, and the sweep, which never blocks on it, skips a round while the lock is held.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Sequence


class Helpers:
    """The helper processes running now. `run` from a worker thread; `known` from anywhere."""

    def __init__(self) -> None:
        self._starting = threading.Lock()
        self._pids: set[int] = set()

    def run(self, argv: Sequence[str], timeout: float) -> int:
        """Run `argv` (no stdin, its output dropped) to its end and return its exit status (negative: the
        signal that ended it); `subprocess.TimeoutExpired` once `timeout` seconds have passed, the
        helper then killed and reaped. Blocking: for a thread."""
        with self._starting:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            self._pids.add(process.pid)
        try:
            return process.wait(timeout)
        except BaseException:
            process.kill()
            process.wait()
            raise
        finally:
            with self._starting:
                self._pids.discard(process.pid)  # reaped: the pid may be another's from now on

    def known(self) -> set[int] | None:
        """The pids of the helpers running now; None while one is being started (its pid not known
        yet: an unknown child may then be it)."""
        if not self._starting.acquire(blocking=False):
            return None
        try:
            return set(self._pids)
        finally:
            self._starting.release()
