"""`python -m runner` starting: what it says on stderr about its configuration before it serves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def served(environ: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -m runner` from the checkout with `environ` and /dev/null on stdin, to its exit."""
    return subprocess.run(
        [sys.executable, "-m", "runner"],
        cwd=REPO,
        env=environ,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def minimal(env: dict[str, str], work_dir: Path) -> dict[str, str]:
    """A bare environment with the standard library only (from this checkout the server would take its
    .sandbox-env and .wheelhouse), and `env`."""
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RUNNER_WORK_DIR": str(work_dir)}
    return {**environ, "RUNNER_PACKAGES": "", "RUNNER_WHEELHOUSE": "", **env}


def started(env: dict[str, str], work_dir: Path) -> str:
    """The server's stderr, started with /dev/null on stdin (it stops at once, exit 0)."""
    done = served({**minimal(env, work_dir), "RUNNER_POOL_SIZE": "0", "RUNNER_SANDBOX": "none"})
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_misspelled_variable_stops_the_server_in_one_line_naming_the_setting_it_most_likely_means(
    work_dir: Path,
) -> None:
    said = refused({"RUNNER_MAXCPU": "5"}, work_dir)
    assert said.strip() == (
        "python-runner-mcp: invalid configuration: RUNNER_MAXCPU: not a setting of this server; "
        "did you mean RUNNER_MAX_CPU_SECONDS?"
    )


def test_a_tokens_file_others_may_read_is_warned_of_at_start(work_dir: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice:" + "a" * 32 + "\n")
    http = {"RUNNER_TRANSPORT": "http", "RUNNER_HTTP_PORT": "0", "RUNNER_AUTH_TOKENS_FILE": str(tokens)}
    for mode, warned in [(0o644, True), (0o600, False)]:
        tokens.chmod(mode)
        environ = {**os.environ, **http, "RUNNER_WORK_DIR": str(work_dir), "RUNNER_POOL_SIZE": "0"}
        server = subprocess.Popen(
            [sys.executable, "-m", "runner"], cwd=REPO, env=environ, stderr=subprocess.PIPE, text=True
        )
        assert server.stderr is not None
        lines = []
        for line in server.stderr:  # until it serves: what it says at start is all said by then
            lines.append(line)
            if "serving on HTTP" in line:
                break
        server.terminate()
        server.communicate(timeout=30)
        said = "".join(lines)
        assert ("RUNNER_AUTH_TOKENS_FILE is readable by other users" in said) is warned, said


def refused(env: dict[str, str], work_dir: Path) -> str:
    """What the server says when it refuses to start: its stderr, once it exited with status 2."""
    done = served(minimal(env, work_dir))
    assert done.returncode == 2, done.stderr
    return done.stderr


def test_a_configuration_refused_as_the_pool_opens_is_one_line_and_exit_2(work_dir: Path) -> None:
    # Found by a new user's first hour: RUNNER_SANDBOX_UIDS naming the host's users, refused inside
    # Pool.open, was a whole traceback and exit 1.
    said = refused({"RUNNER_SESSIONS_MEMORY_MB": "16000000", "RUNNER_SANDBOX": "none"}, work_dir)
    last = said.strip().splitlines()[-1]
    assert last.startswith("python-runner-mcp: invalid configuration: RUNNER_SESSIONS_MEMORY_MB: 16000000 MiB is more")
    assert "Traceback" not in said


def test_a_root_servers_run_uids_that_are_the_hosts_users_are_refused_in_one_line(work_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the run uids are checked for a root server, whose sandboxed runs are lent them")
    said = refused({"RUNNER_SANDBOX_UIDS": "1-100", "RUNNER_SANDBOX": "namespaces"}, work_dir)
    assert (
        said.strip()
        .splitlines()[-1]
        .startswith("python-runner-mcp: invalid configuration: RUNNER_SANDBOX_UIDS: uid 1 of 1-100 is the host's user")
    ), said
    assert "Traceback" not in said


def test_python_m_runner_from_the_checkout_is_the_same_tool_as_the_console_script(work_dir: Path) -> None:
    # Found by a new user's first hour: the README said `python -m runner` serves the same tool, but only
    # the console script filled in the checkout's package environment and wheelhouse.
    if not (REPO / ".sandbox-env" / ".built").is_file() or not (REPO / ".wheelhouse" / "requirements.lock").is_file():
        pytest.skip("no .sandbox-env or .wheelhouse in this checkout: make run builds them")
    environ = {k: v for k, v in os.environ.items() if k not in ("RUNNER_PACKAGES", "RUNNER_WHEELHOUSE")}
    environ.update(RUNNER_WORK_DIR=str(work_dir), RUNNER_POOL_SIZE="0", RUNNER_SANDBOX="none", RUNNER_PRELOAD="")
    done = served(environ, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "wheelhouse opened" in done.stderr, done.stderr
    [starting] = [line for line in done.stderr.splitlines() if "pool starting" in line]
    assert f"packages={REPO / '.sandbox-env'}" in starting, starting
