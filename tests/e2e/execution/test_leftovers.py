"""What a server killed with SIGKILL leaves in RUNNER_WORK_DIR, and its next start removing it: its
directories, and in plain mode its runs' processes and what they started, never a live server's."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import IO, Any

import pytest

from runner.execution.leftovers import HeldDirectory, remove_dead
from tests.code_mode import HOSTILE_SERVER, tools_file
from tests.conftest import REPO
from tests.helpers import SANDBOX_OF_MODE, alive, living, settled
from tests.raw import INITIALIZE, STANDARD_LIBRARY_ONLY

# A run leaves a child in its group and a double-forked daemon in a session of its own, each writing its
# pid where the test reads it, then sleeps: what a plain run of a killed server has alive.
LEAVING = """
import os, subprocess, sys
CHILD = "import os, time; open({child!r}, 'w').write(str(os.getpid())); time.sleep(600)"
subprocess.Popen([sys.executable, "-c", CHILD])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open({daemon!r}, "w").write(str(os.getpid()))
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)"])
    os._exit(0)
open({run!r}, "w").write(str(os.getpid()))
import time
time.sleep(600)
"""


class Server:
    """`python -m runner` on stdio, spoken to in raw JSON-RPC lines."""

    def __init__(self, work_dir: Path, stderr: IO[str], mode: str, **extra: str) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "RUNNER_WORK_DIR": str(work_dir),
            "RUNNER_POOL_SIZE": "1",
            "RUNNER_SANDBOX": SANDBOX_OF_MODE[mode],
            **STANDARD_LIBRARY_ONLY,
            **extra,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "runner"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        # Answered once the pool is open: what a dead server left is removed before that.
        self.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE})
        assert self.process.stdout is not None
        assert json.loads(self.process.stdout.readline())["id"] == 1

    def run(self, code: str) -> None:
        """run_python with `code`, its answer left unread."""
        arguments = {"code": textwrap.dedent(code), "timeout": 300}
        self.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "run_python", "arguments": arguments},
            }
        )

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        """Stdin's EOF: the server stops as it should, exit 0."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=30) == 0
        self.process.stdout.close()

    def kill(self) -> None:
        """SIGKILL: the server cleans up nothing."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()


def pid_in(path: Path, deadline: float) -> int:
    """The pid a process writes to `path`, once it has (a run starting on a busy machine takes a moment)."""
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.01)
    raise AssertionError(f"{path.name} never came")


@pytest.mark.parametrize("mode", ["posix-spawn", "fork-server"])
def test_a_server_killed_mid_run_leaves_what_its_next_start_kills_and_removes_sparing_a_live_servers(
    work_dir: Path, tmp_path: Path, mode: str
) -> None:
    """Found by a review: the killed server's run (spawned), the run's child and its daemon lived on,
    orphaned to init, and its directories stayed, whoever started next."""
    with open(tmp_path / "stderr", "w") as stderr:
        live = Server(work_dir, stderr, mode)
        try:
            live_dirs = set(work_dir.iterdir())
            killed = Server(work_dir, stderr, mode)
            marks = {name: tmp_path / f"{name}.pid" for name in ("run", "child", "daemon")}
            code = textwrap.dedent(LEAVING.format(**{name: str(path) for name, path in marks.items()}))
            killed.send(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "run_python", "arguments": {"code": code, "timeout": 300}},
                }
            )
            deadline = time.monotonic() + 30
            pids = {name: pid_in(path, deadline) for name, path in marks.items()}
            killed.kill()
            left = set(work_dir.iterdir()) - live_dirs
            assert left, "the killed server left its directories"
            # A run dies with its server (a parent-death signal); what a spawned run started outlives it, a
            # forked run's daemon does (the zygote kills a run's group as its server goes: not a session of
            # the run's own).
            expected = [pids["child"], pids["daemon"]] if mode == "posix-spawn" else [pids["daemon"]]
            assert settled(lambda: sorted(expected) != living(pids.values())) is False

            after = Server(work_dir, stderr, mode)
            try:
                assert settled(lambda: living(pids.values())) == []
                assert not any(path.exists() for path in left)
                assert all(path.exists() for path in live_dirs), "a live server's directories are its own"
                assert alive(live.process.pid)
            finally:
                after.stop()
        finally:
            live.stop()
    assert settled(lambda: list(work_dir.iterdir())) == []


def test_only_a_held_directory_whose_holder_is_gone_is_removed_and_only_processes_it_marks_are_killed(
    tmp_path: Path,
) -> None:
    held = HeldDirectory("python-runner-", str(tmp_path))  # this process lives: its lock is held
    dead = HeldDirectory("python-runner-", str(tmp_path))
    dead.release()  # as the kernel does for a killed server
    older = tmp_path / "python-runner-abc_1234"  # an older server's name: never taken for a dead one
    older.mkdir()
    python = sys.executable
    sleep = [python, "-c", "import time; time.sleep(600)"]
    marked = subprocess.Popen(sleep, env={"HOME": os.path.join(dead.path, "run-1")})
    named = subprocess.Popen([*sleep, dead.path], env={"HOME": str(tmp_path)})  # named, not marked: spared
    beside = subprocess.Popen(sleep, env={"TMPDIR": held.path})
    # Marked, but another uid's (found by a review: no test failed with the uid check gone).
    other_uid = 1 if os.geteuid() == 0 else None  # only root can start one
    another = subprocess.Popen(["sleep", "600"], env={"HOME": os.path.join(dead.path, "run-2")}, user=other_uid)
    try:
        removed, killed = remove_dead(str(tmp_path))
        assert (removed, killed) == ([dead.path], 1 if other_uid else 2)
        assert marked.wait(timeout=10) == -signal.SIGKILL
        assert (named.poll(), beside.poll()) == (None, None)
        if other_uid:
            assert another.poll() is None
        assert os.path.isdir(held.path)
        assert older.is_dir()
    finally:
        for process in (marked, named, beside, another):
            process.kill()
            process.wait()
        held.release()


def test_a_file_system_that_cannot_lock_a_directory_gets_one_unheld_directory_and_the_start_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by a review: where flock fails for want of support (NFS emulates it with fcntl locks, which
    # a directory opened read-only cannot take), every start failed, "other starts keep taking it",
    # leaving ten directories each time.
    def unsupported(fd: int, operation: int) -> None:
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(fcntl, "flock", unsupported)
    held = HeldDirectory("python-runner-", str(tmp_path))
    assert os.listdir(tmp_path) == [os.path.basename(held.path)]
    assert remove_dead(str(tmp_path)) == ([], 0), "no start takes it for a dead server's"
    held.release()


# A code mode's tool server behind a wrapper that outlives it (the server ends at its stdin's EOF, the
# wrapper then sleeps), with a child that reads no stdin: each writes its pid where the test reads it.
WRAPPED = "echo $$ > {first}; sleep 600 & echo $! > {child}; {python} {server}; sleep 600"


def test_a_killed_servers_tool_server_dies_with_it_and_what_that_started_is_killed_at_the_next_start(
    work_dir: Path, tmp_path: Path
) -> None:
    """Found by a review: a wrapper around a tool server, and what it started, lived on after the
    server was killed, orphaned to init, whoever started next."""
    marks = {name: tmp_path / f"{name}.pid" for name in ("first", "child")}
    script = WRAPPED.format(python=sys.executable, server=HOSTILE_SERVER, **marks)
    tools = tools_file(tmp_path, wrapped={"command": "/bin/sh", "args": ["-c", script], "tools": ["*"]})
    with open(tmp_path / "stderr", "w") as stderr:
        killed = Server(work_dir, stderr, "posix-spawn", RUNNER_TOOLS_CONFIG=str(tools))
        deadline = time.monotonic() + 30
        first, child = (pid_in(path, deadline) for path in marks.values())
        killed.kill()
        assert settled(lambda: living([first])) == []
        assert alive(child), "what the tool server started is left to the next start"
        after = Server(work_dir, stderr, "posix-spawn")
        try:
            assert settled(lambda: living([child])) == []
        finally:
            after.stop()
    assert settled(lambda: list(work_dir.iterdir())) == []


@pytest.mark.parametrize("mode", ["posix-spawn", "fork-server"])
def test_a_killed_servers_plain_run_dies_with_it(work_dir: Path, tmp_path: Path, mode: str) -> None:
    """Found by a review: a spawned run of a server killed with SIGKILL went on until the next start."""
    mark = tmp_path / "run.pid"
    with open(tmp_path / "stderr", "w") as stderr:
        killed = Server(work_dir, stderr, mode)
        killed.run(f"import os, time\nopen({str(mark)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
        run = pid_in(mark, time.monotonic() + 30)
        try:
            killed.kill()
            assert settled(lambda: living([run])) == []
        finally:
            if alive(run):
                os.kill(run, signal.SIGKILL)
        Server(work_dir, stderr, mode).stop()  # removes the killed server's directories
