"""The runs' package environment: `scripts/sandbox_env.py check` fails, naming each difference, when the
environment is not what requirements-sandbox.lock says, and the tool tells clients what runs may import."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from runner.config import Config
from runner.errors import ConfigError
from runner.protocol.tool import tool_definition
from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "sandbox_env.py"
LOCK = """\
numpy==2.4.6 \\
    --hash=sha256:00
pandas==3.1.1 \\
    --hash=sha256:00
python-dateutil==4.0.0 \\
    --hash=sha256:00
"""


def fake_env(root: Path, installed: dict[str, str]) -> Path:
    """An environment whose site-packages holds only the metadata of `installed` (name -> version)."""
    site = root / "site-packages"
    site.mkdir(parents=True)
    for name, version in installed.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


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


def test_the_tool_description_names_what_runs_may_import(tmp_path: Path) -> None:
    env = fake_env(tmp_path / "env", {"numpy": "2.4.6", "pandas": "3.1.1"})
    packaged = Config.from_env({"RUNNER_PACKAGES": str(env), "RUNNER_PRELOAD": "json"})
    described = tool_definition(packaged).description or ""
    assert "the standard library and these packages importable: numpy 2.4.6, pandas 3.1.1," in described
    assert "256 MiB memory (beyond what json map, when imported)," in described
    plain = tool_definition(Config.from_env({})).description or ""
    assert "no site-packages (standard library only)" in plain


@pytest.mark.parametrize("value", ["relative/path", "/nonexistent/env"])
def test_a_runner_packages_that_is_no_environment_stops_the_server_naming_it(value: str) -> None:
    with pytest.raises(ConfigError, match="RUNNER_PACKAGES"):
        Config.from_env({"RUNNER_PACKAGES": value})


def test_a_package_environment_under_a_directory_the_sandbox_hides_is_bound_back(tmp_path: Path) -> None:
    # /tmp is each sandboxed run's own tmpfs: an environment under it (a checkout in /tmp) was out of
    # the runs' sight, and matplotlib failed to draw.
    from runner.processes.isolation import bwrap_argv, namespace_args

    with tempfile.TemporaryDirectory(dir="/tmp") as under_tmp:
        packaged = Config.from_env({"RUNNER_PACKAGES": str(fake_env(Path(under_tmp) / "env", {}))})
        assert packaged.packages in namespace_args(packaged)
        argv = bwrap_argv("/usr/bin/bwrap", packaged)
        assert argv[argv.index(packaged.packages) - 1] == "--ro-bind"
