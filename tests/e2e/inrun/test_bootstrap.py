"""The bootstrap on its own: how the code reaches a run interpreter on fd 3, and a waiting interpreter
closed to other processes of the same uid (checked as an unprivileged user)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runner.inrun.wire import READY_PREFIX, frame_job
from runner.processes.isolation import BOOTSTRAP, interpreter_argv
from runner.processes.spawn import spawn_in_new_session

LIMITS = ["10", str(256 << 20), "64", str(1 << 20)]


@dataclass
class Bootstrapped:
    """A run interpreter started as the pool starts one, waiting for its code on fd 3."""

    pid: int
    code_w: int
    stdout_r: int
    stderr_r: int

    def finish(self) -> tuple[int, bytes, bytes]:
        """Wait for its end: (exit status, stdout after the ready line, stderr)."""
        with os.fdopen(self.stdout_r, "rb") as out, os.fdopen(self.stderr_r, "rb") as err:
            stdout, stderr = out.read(), err.read()
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status), stdout, stderr


def start_bootstrap(workdir: Path) -> Bootstrapped:
    """Spawn the bootstrap with the server's own spawn call and wait for its ready line."""
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    code_r, code_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    argv = [*interpreter_argv(sys.executable), BOOTSTRAP, str(workdir), *LIMITS]
    try:
        pid = spawn_in_new_session(argv, str(workdir), [null, stdout_w, stderr_w, code_r])
    finally:
        for fd in (null, stdout_w, stderr_w, code_r):
            os.close(fd)
    line = b""
    while not line.endswith(b"\n"):
        line += os.read(stdout_r, 1)
    assert line.startswith(READY_PREFIX)
    return Bootstrapped(pid, code_w, stdout_r, stderr_r)


def test_framed_code_runs_without_the_pipe_being_closed(tmp_path: Path) -> None:
    child = start_bootstrap(tmp_path)
    try:
        # The pipe stays open: the byte count alone tells the interpreter the code is complete.
        os.write(child.code_w, frame_job(b"print('hello', end='')"))
        assert child.finish() == (0, b"hello", b"")
    finally:
        os.close(child.code_w)


def test_code_cut_short_by_a_closed_pipe_runs_nothing(tmp_path: Path) -> None:
    child = start_bootstrap(tmp_path)
    framed = frame_job(b"open('ran', 'w').write('yes'); print('ran')")
    os.write(child.code_w, framed[:-5])
    os.close(child.code_w)
    status, stdout, _ = child.finish()
    assert (status, stdout) == (1, b"")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("size", [0, 1, 65_535, 65_536, 300_000])
def test_a_frame_of_any_size_arrives_whole(tmp_path: Path, size: int) -> None:
    child = start_bootstrap(tmp_path)
    code = f"s = {'x' * size!r}\nprint(len(s))".encode()
    framed = frame_job(code)
    try:
        # Written in pieces, as the server's non-blocking writes may split it.
        for start in range(0, len(framed), 40_000):
            os.write(child.code_w, framed[start : start + 40_000])
        assert child.finish() == (0, f"{size}\n".encode(), b"")
    finally:
        os.close(child.code_w)


SYSTEM_PYTHON = "/usr/bin/python3"


NOBODY = 65534


# Run as nobody: start the bootstrap like the pool does (code pipe on fd 3, left empty so it waits
# like a pooled interpreter), then try what a daemon left by an earlier run would try.
PROBE = """
import os, subprocess, sys
bootstrap, workdir = sys.argv[1], sys.argv[2]
code_r, code_w = os.pipe()
os.set_inheritable(code_r, True)
child = subprocess.Popen(
    [sys.executable, "-I", "-S", bootstrap, workdir, "10", str(256 << 20), "64", str(1 << 20)],
    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(code_r,),
    preexec_fn=lambda: os.dup2(code_r, 3),
)
assert child.stdout.readline().startswith(b"\\x00runner-ready")
for path, mode in ((f"/proc/{child.pid}/fd/1", "w"), (f"/proc/{child.pid}/environ", "r")):
    try:
        open(path, mode).close()
        print(path.rsplit("/", 1)[1], "open")
    except PermissionError:
        print(path.rsplit("/", 1)[1], "denied")
child.kill()
child.wait()
"""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="runner-isolation-"))
    path.chmod(0o777)
    # The bootstrap and what it loads from beside it (the in-run package's modules).
    for module in Path(BOOTSTRAP).parent.glob("*.py"):
        shutil.copy(module, path / module.name)
        (path / module.name).chmod(0o644)
    (path / "probe.py").write_text(PROBE)
    (path / "work").mkdir(mode=0o777)
    (path / "work").chmod(0o777)
    (path / "probe.py").chmod(0o644)
    yield path
    shutil.rmtree(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to an unprivileged uid")
@pytest.mark.skipif(not (shutil.which("setpriv") and os.path.exists(SYSTEM_PYTHON)), reason="needs setpriv and python3")
def test_a_waiting_interpreter_cannot_be_written_into_by_another_process_of_its_uid(shared_dir: Path) -> None:
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", SYSTEM_PYTHON, "-I", "-S"]
    probe = [str(shared_dir / "probe.py"), str(shared_dir / "bootstrap.py"), str(shared_dir / "work")]
    done = subprocess.run(
        [*as_nobody, *probe],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=shared_dir,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["1 denied", "environ denied"]
