"""The Makefile's venv: the interpreter is checked before anything is made, and a venv another
interpreter made is made again when PYTHON names a different one (found by a new user's first hour:
`make run PYTHON=python3.10` failed deep inside pip, and the advised `PYTHON=python3.11` then reused
the broken venv)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

FAKE_OLD_PYTHON = """#!/bin/sh
# Python 3.10 as far as make can tell: it names its version, and fails the check of it.
case "$1" in
    --version) echo "Python 3.10.12" ;;
    *) exit 1 ;;
esac
"""


def make(*args: str, dry: bool = False) -> subprocess.CompletedProcess[str]:
    command = ["make", "--no-print-directory", *(["-n"] if dry else []), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False, timeout=60)


def test_an_interpreter_older_than_3_11_is_refused_before_anything_is_made_with_what_to_do(tmp_path: Path) -> None:
    old = tmp_path / "python3.10"
    old.write_text(FAKE_OLD_PYTHON)
    old.chmod(0o755)
    venv = tmp_path / "venv"
    done = make("run", f"PYTHON={old}", f"VENV={venv}")
    assert done.returncode != 0
    assert f"needs Python 3.11 or newer, and PYTHON={old} is Python 3.10.12" in done.stderr, done.stderr
    assert "try make run PYTHON=python3.11" in done.stderr
    assert "pip" not in done.stdout + done.stderr, "it stopped before pip"
    assert not venv.exists()


def test_a_venv_made_by_another_interpreter_is_made_again_when_python_names_another_one(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    (venv / ".python-3.12-_usr_bin_python3.12").touch()
    # What installing says goes to stderr (`make run`'s stdout is the wire), a dry run's too.
    dry = make("run", f"PYTHON={sys.executable}", f"VENV={venv}", dry=True)
    again = " ".join((dry.stdout + dry.stderr).split())
    assert f"rm -rf {venv} {sys.executable} -m venv {venv}" in again, again
    # What runs import is compiled for the interpreter too: made again with it.
    assert "scripts/sandbox_env.py build" in again
    assert "scripts/wheelhouse.py download" in again
    kept = make("run", f"VENV={venv}", dry=True)  # PYTHON not given: the venv there is stays
    kept_said = kept.stdout + kept.stderr
    assert " -m venv " not in kept_said, kept_said


def fresh_clone(where: Path) -> Path:
    """What a fresh clone of this checkout holds (its tracked files as they are now), in a directory
    only its owner can enter, as a user's home often is."""
    clone = where / "clone"
    clone.mkdir(mode=0o700)
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source, target = REPO / name, clone / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode & 0o777)
    return clone


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_make_run_on_a_fresh_clone_installs_from_the_locks_then_serves_and_stops(tmp_path: Path) -> None:
    # Found by a new user's first hour: the README's first command failed on every stock Python 3.11
    # (pip upgraded to whatever was newest, then setuptools 65 and no wheel: "invalid command 'bdist_wheel'").
    clone = fresh_clone(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNNER_", "VIRTUAL_ENV", "PYTHONPATH"))}
    for attempt in ("first", "again"):
        done = subprocess.run(
            ["make", "--no-print-directory", "run"],
            cwd=clone,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=1400,
        )
        assert done.returncode == 0, f"{attempt}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        assert "server stopped" in done.stderr, done.stderr[-3000:]
        # stdout is the wire: a client that starts `make run` reads nothing but messages there (found by
        # a first hour: the install's lines came first, and the client logged parse errors).
        assert done.stdout == "", f"{attempt}: {done.stdout[:1000]}"
    built = subprocess.run(
        [str(clone / ".venv/bin/python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    locked = [line.split(" ")[0] for line in (REPO / "requirements-build.lock").read_text().splitlines()]
    assert {name for name in locked if "==" in name} <= set(built), "pip, setuptools and wheel are the locked ones"


def test_make_help_lists_the_readmes_commands_first_in_one_aligned_column() -> None:
    # Found by a new user's first hour: `run` and `serve` came 6th and 7th, and a long name pushed its
    # line's text out of the column.
    lines = make("help").stdout.splitlines()
    assert [line.split()[1] for line in lines[:3]] == ["run", "serve", "test"]
    columns = {line.index(line.split(None, 2)[2]) for line in lines}
    assert len(columns) == 1, lines
    assert len(lines) == len({line.split()[1] for line in lines}), "each target once"
