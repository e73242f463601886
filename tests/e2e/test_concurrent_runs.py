"""What a run can find of another run in flight at the same time, in every mode (docs/security.md's row
"see a concurrent run's files or processes, or meet it on an abstract unix socket"): everything in plain
mode, which shares the host's file system, PID space and network; nothing in either sandbox.

One run offers each kind of trace and then waits for its own child, which carries a mark in its command
line; the test sees that child from the host, runs the other run meanwhile, then kills the child, so the
second run looks while everything of the first is there, whatever the machine's speed.
"""

from __future__ import annotations

import os
import secrets
import signal
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from runner.config import Config
from runner.execution.pool import Pool
from runner.outcome import RunRequest, RunResult, Status
from tests.helpers import MODES, checked, in_mode

pytestmark = pytest.mark.anyio

OFFER = """
    import os, socket, subprocess, sys
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\\0{mark}")
    listener.listen()
    listener.setblocking(False)
    for where in ("/tmp", "/dev/shm"):
        open(f"{{where}}/{mark}", "w").write("x")
    # Last: once the host sees this child, every other trace is in place.
    subprocess.run([sys.executable, "-I", "-S", "-c", "import time; time.sleep(60)", "{mark}"])
    for where in ("/tmp", "/dev/shm"):
        os.remove(f"{{where}}/{mark}")
    try:
        listener.accept()
        print("reached")
    except BlockingIOError:
        print("alone")
"""
LOOK = """
    import os, socket
    seen = [where for where in ("/tmp", "/dev/shm") if os.path.exists(f"{{where}}/{mark}")]
    try:
        socket.socket(socket.AF_UNIX).connect("\\0{mark}")
        seen.append("socket")
    except OSError:
        pass
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"{mark}" in open(f"/proc/{{pid}}/cmdline", "rb").read():
                seen.append("process")
        except OSError:
            pass
    print(sorted(seen))
"""


@pytest.fixture(params=MODES)
async def any_pool(request: pytest.FixtureRequest, config: Config, no_leaks: None) -> AsyncIterator[Pool]:
    async with Pool.open(in_mode(config, request.param, max_concurrent=2), reap_strays=True) as pool:
        yield pool


def marked(mark: str) -> list[int]:
    """Host pids whose command line carries `mark`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


async def run(pool: Pool, code: str) -> RunResult:
    result = checked(await pool.run(RunRequest("c0c0a000", textwrap.dedent(code), 30)))
    assert result.status is Status.OK, result.to_text()
    return result


async def test_a_sandboxed_run_finds_nothing_of_a_concurrent_run_and_a_plain_one_finds_everything(
    any_pool: Pool,
) -> None:
    mark = f"python-runner-offered-{secrets.token_hex(8)}"
    offered: list[RunResult] = []

    async def offer() -> None:
        offered.append(await run(any_pool, OFFER.format(mark=mark)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(offer)
        with anyio.fail_after(20):
            while not marked(mark):
                await anyio.sleep(0.02)
        looked = await run(any_pool, LOOK.format(mark=mark))
        for pid in marked(mark):
            os.kill(pid, signal.SIGKILL)
    if any_pool.sandboxed:
        assert (looked.stdout.text, offered[0].stdout.text) == ("[]\n", "alone\n")
    else:
        everything = "['/dev/shm', '/tmp', 'process', 'socket']\n"
        assert (looked.stdout.text, offered[0].stdout.text) == (everything, "reached\n")
