"""The runs' package environment: `scripts/sandbox_env.py check` fails, naming each difference, when the
environment is not what requirements-sandbox.lock says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.helpers import fake_env

SCRIPT = REPO / "scripts" / "sandbox_env.py"
LOCK = """\
numpy==2.4.6 \\
    --hash=sha256:00
pandas==3.1.1 \\
    --hash=sha256:00
python-dateutil==4.0.0 \\
    --hash=sha256:00
"""


def check(env: Path, lock: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "check", str(env), "--lock", str(lock)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_environment_that_matches_its_lock_passes_the_check(tmp_path: Path) -> None:
    (tmp_path / "lock").write_text(LOCK)
    env = fake_env(tmp_path / "env", {"numpy": "2.4.6", "pandas": "3.1.1", "python_dateutil": "4.0.0"})
    done = check(env, tmp_path / "lock")
    assert (done.returncode, done.stderr) == (0, "")


def test_an_environment_that_differs_from_its_lock_fails_naming_each_difference(tmp_path: Path) -> None:
    (tmp_path / "lock").write_text(LOCK)
    env = fake_env(tmp_path / "env", {"numpy": "2.4.5", "python-dateutil": "4.0.0", "mcp": "2.3.0"})
    done = check(env, tmp_path / "lock")
    assert done.returncode == 1
    assert [line.split(": ", 1)[1].split(" (")[0] for line in done.stderr.splitlines()] == [
        "mcp==2.3.0 is installed but not locked",
        "numpy is locked at 2.4.6 but 2.4.5 is installed",
        "pandas==3.1.1 is locked but not installed",
    ]
