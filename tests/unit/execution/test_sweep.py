"""`strays_reaped`, the server's life as a child subreaper, in a process of its own (its end kills
every child the process has)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

LIFE = """
import anyio, logging
from runner.execution.sweep import strays_reaped
from runner.processes.procctl import is_child_subreaper, set_child_subreaper

async def main():
    set_child_subreaper({before})
    async with strays_reaped(logging.getLogger()):
        assert is_child_subreaper()
    print(is_child_subreaper())

anyio.run(main)
"""


def test_the_servers_life_as_a_subreaper_leaves_the_process_as_it_found_it() -> None:
    # Found by a second look: a process that was a subreaper before was one no more after.
    for before in (True, False):
        done = subprocess.run(
            [sys.executable, "-c", LIFE.format(before=before)], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert done.stdout == f"{before}\n", done.stderr
