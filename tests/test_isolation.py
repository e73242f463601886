"""Runs are closed to other processes of the same uid (checked as an unprivileged user)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.processes.isolation import BOOTSTRAP

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
