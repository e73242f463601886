"""The server's own helper processes (runner/processes/helpers.py): known to the stray sweep while they
run, never while their pid is not known yet, and a compile that does not end well fails its install."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from runner.execution.sweep import StraySweeper
from runner.execution.wheelhouse_cache import InstallError, Wanted, compile_bytecode
from runner.processes.helpers import Helpers
from tests.helpers import settled


def test_a_helper_is_known_while_it_runs_and_forgotten_once_reaped() -> None:
    helpers = Helpers()
    seen: list[bool] = []
    started = threading.Event()

    def watch() -> None:
        started.wait()
        seen.append(settled(lambda: not helpers.known()))  # False once its pid is listed

    watcher = threading.Thread(target=watch)
    watcher.start()
    started.set()
    assert helpers.run([sys.executable, "-c", "import time; time.sleep(0.5)"], timeout=30) == 0
    watcher.join()
    assert seen == [False]
    assert helpers.known() == set()


def test_while_a_helper_is_being_started_nothing_is_said_to_be_known() -> None:
    helpers = Helpers()
    with helpers._starting:  # what `run` holds from before the fork until the pid is recorded
        assert helpers.known() is None
    assert helpers.known() == set()


def test_a_helper_that_outlives_its_time_is_killed_and_reaped() -> None:
    helpers = Helpers()
    with pytest.raises(Exception, match="timed out"):
        helpers.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5)
    assert helpers.known() == set()


@pytest.mark.parametrize(
    ("python", "said"),
    [("/bin/false", "the compile exited with status 1"), ("killed", "the compile was killed by signal 9")],
)
def test_a_compile_that_does_not_end_well_fails_the_install_naming_the_wheel(
    tmp_path: Path, python: str, said: str
) -> None:
    if python == "killed":
        python = str(tmp_path / "python")
        Path(python).write_text("#!/bin/sh\nkill -9 $$\n")
        os.chmod(python, 0o755)
    wanted = Wanted("sympy", "1.14.0", tmp_path / "sympy-1.14.0-py3-none-any.whl", frozenset())
    with pytest.raises(InstallError, match=f"sympy-1.14.0-py3-none-any.whl could not be compiled: {said}"):
        compile_bytecode(python, tmp_path, wanted, 30, Helpers())


@pytest.mark.anyio
async def test_a_helper_started_while_a_sweep_looks_is_not_taken_for_a_stray() -> None:
    # Found in a loaded suite run: the sweep took its snapshot of the helpers, then listed the server's
    # children; a compile started in between was listed but not known, and killed (signal 9).
    helpers = Helpers()
    ended: list[int] = []
    threads: list[threading.Thread] = []

    def start_a_helper() -> None:
        ended.append(helpers.run([sys.executable, "-c", "import time; time.sleep(1)"], timeout=30))

    def known_then_a_helper_starts() -> set[int] | None:
        snapshot = helpers.known()
        if not threads:
            threads.append(threading.Thread(target=start_a_helper))
            threads[0].start()
            deadline = time.monotonic() + 10
            while not helpers.known() and time.monotonic() < deadline:  # its pid recorded, the lock let go
                time.sleep(0.001)
        return snapshot

    sweeper = StraySweeper(set, known_then_a_helper_starts, sandboxed=False, logger=logging.getLogger("test"))
    await sweeper.sweep()
    threads[0].join(timeout=30)
    assert ended == [0], "a helper the sweep could not know yet was killed"
