"""The bootstrap on its own: how the code reaches a run interpreter on fd 3."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from runner.inrun.wire import READY_PREFIX, frame_job
from runner.inrun.workdir import empty_directory
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


FORK_FAILS = """
import os, resource, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import zygote
base = sys.argv[2]
before = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
# Room for three more fds: the directory and one pipe get made, the second pipe fails (EMFILE).
resource.setrlimit(resource.RLIMIT_NOFILE, (max(before) + 4, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
runs = {}
reply, fds = zygote._fork_run(base, [10, 1 << 28, 64, 1 << 20], runs)
after = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
print(reply.decode(), fds, runs, os.listdir(base), before == after, sep="|")
"""


def test_a_fork_request_that_fails_answers_an_error_and_leaves_nothing(tmp_path: Path) -> None:
    done = subprocess.run(  # the limit must not touch the test process
        [sys.executable, "-I", "-c", FORK_FAILS, BOOTSTRAP, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    reply, fds, runs, listing, same_fds = done.stdout.strip().split("|")
    assert reply.startswith("E [Errno 24] Too many open files")
    assert (fds, runs, listing, same_fds) == ("[]", "{}", "[]", "True")


def test_emptying_a_directory_removes_everything_planted_in_it_and_follows_no_link(tmp_path: Path) -> None:
    top, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the run's")
    deep = top.joinpath(*["d"] * 300)  # deeper than the interpreter's recursion limit allows recursing
    deep.mkdir(parents=True)
    (deep / "planted.txt").write_text("x")
    locked = top / "locked"
    locked.mkdir()
    (locked / "planted.txt").write_text("x")
    (top / "link-to-outside").symlink_to(outside)
    os.mkfifo(top / "fifo")
    locked.chmod(0)
    top.chmod(0)
    try:
        empty_directory(str(top))
        assert os.listdir(top) == []
    finally:
        top.chmod(0o700)
    assert os.listdir(outside) == ["keep.txt"]


def test_an_empty_directory_is_left_as_it_is(tmp_path: Path) -> None:
    tmp_path.chmod(0o750)
    empty_directory(str(tmp_path))
    assert (os.listdir(tmp_path), tmp_path.stat().st_mode & 0o777) == ([], 0o750)


EMPTY_AROUND_A_MOUNT = """
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from workdir import empty_directory
top = sys.argv[2]
os.makedirs(top + "/mounted")
os.makedirs(top + "/on/the/way/to")
os.system("mount -t tmpfs tmpfs " + top + "/mounted")
os.system("mount -t tmpfs tmpfs " + top + "/on/the/way/to")
open(top + "/mounted/kept.txt", "w").write("the sandbox's")
open(top + "/on/the/planted.txt", "w").write("a run's")
open(top + "/planted.txt", "w").write("a run's")
os.chmod(top, 0o1777)
empty_directory(top)
mode = oct(os.stat(top).st_mode & 0o7777)
print(sorted(os.listdir(top)), mode, os.listdir(top + "/mounted"), os.listdir(top + "/on/the"))
"""


def test_emptying_a_directory_leaves_a_mount_in_it_and_its_mode(tmp_path: Path) -> None:
    # The sandbox's /tmp (mode 1777) holds an interpreter installed under /tmp, bound back read-only:
    # removing it failed (EROFS) and the run refused to start.
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount in a mount namespace of its own")
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            sys.executable,
            "-I",
            "-c",
            EMPTY_AROUND_A_MOUNT,
            BOOTSTRAP,
            str(tmp_path / "top"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout.strip() == "['mounted', 'on'] 0o1777 ['kept.txt'] ['way']"


WALK_AROUND_A_MOUNT = """
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from workdir import walk
top = sys.argv[2]
os.makedirs(top + "/opt/env")
os.system("mount -t tmpfs tmpfs " + top + "/opt/env")
open(top + "/opt/env/image.png", "w").write("the sandbox's")
open(top + "/made.txt", "w").write("the run's")
info = os.stat(top)
print(sorted(path for path, _ in walk(top, (info.st_dev, info.st_ino))))
"""


def test_the_scan_of_a_runs_directory_does_not_walk_into_a_mount_in_it(tmp_path: Path) -> None:
    # A package environment (or interpreter) under /tmp is bound back into a sandboxed run's /tmp: its
    # files came back as files the run had made (the image's sample PNGs, as images).
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount in a mount namespace of its own")
    script = [sys.executable, "-I", "-c", WALK_AROUND_A_MOUNT, BOOTSTRAP, str(tmp_path / "top")]
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", *script],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout.strip() == "['made.txt']"
