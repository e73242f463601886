"""`python -m runner` starting: what it says on stderr about its configuration before it serves."""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import runner
from runner.config import Config
from runner.errors import Unavailable
from runner.processes.identity import claimed_uids
from runner.processes.isolation import IsolationPlan
from tests.conftest import REPO


def served(
    environ: dict[str, str], timeout: float = 60, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`python -m runner` from the checkout with `environ`, `args` and /dev/null on stdin, to its exit."""
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
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


def test_version_prints_the_name_and_version_and_exits_0_and_the_console_scripts_usage_names_it(
    work_dir: Path,
) -> None:
    # Found in a first hour: --version was "unrecognized arguments" (exit 2), and the python-runner-mcp
    # command's usage said "python -m runner".
    done = served(minimal({}, work_dir), args=("--version",))
    assert (done.returncode, done.stdout) == (0, f"python-runner-mcp {runner.__version__}\n"), done.stderr
    # The console script's entry point, from this checkout (an installed script may be another's).
    console = "import sys; from runner.__main__ import console; sys.exit(console())"
    helped = subprocess.run(
        [sys.executable, "-c", console, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: python-runner-mcp "), helped.stdout


def test_a_port_in_use_stops_the_http_server_naming_the_variables_that_change_it(work_dir: Path) -> None:
    # Found in a first hour: `make serve` beside something on 8000 said only "Address already in use".
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        environ = {"RUNNER_HTTP_PORT": str(port), "RUNNER_POOL_SIZE": "0", "RUNNER_SANDBOX": "none"}
        done = served(minimal(environ, work_dir), args=("--transport", "http"))
    assert done.returncode == 1, done.stderr
    [line] = [line for line in done.stderr.splitlines() if "cannot listen" in line]
    assert f"port={port}" in line
    assert 'error="Address already in use"' in line
    assert 'change="RUNNER_HTTP_PORT (0: any free port) or RUNNER_HTTP_HOST"' in line


class Scratch:
    """Where a refusal's case makes what its input names, and what it holds until the server has exited."""

    def __init__(self, path: Path, held: contextlib.ExitStack) -> None:
        self.path, self.held = path, held

    def file(self, name: str, content: str | bytes = "", mode: int = 0o644) -> str:
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        path.chmod(mode)
        return str(path)

    def directory(self, name: str, mode: int = 0o755) -> str:
        path = self.path / name
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)  # past the umask: a group-writable one is what a case may want
        return str(path)

    def unreachable(self, name: str) -> str:
        """`name`, made in a directory the server's uid may not search."""
        path = self.directory(f"shut/{name}")
        (self.path / "shut").chmod(0)
        return path

    def owned_by_nobody(self, name: str) -> str:
        path = self.file(name, "{}", mode=0o600)
        os.chown(path, 65534, 65534)
        return path

    def opened(self, name: str) -> dict[str, str]:
        """The directory `name` made writable by every user (no sticky bit); nothing to set."""
        (self.path / name).chmod(0o777)
        return {}

    def tokens(self, text: str | bytes) -> dict[str, str]:
        return {"RUNNER_AUTH_TOKENS_FILE": self.file("tokens", text, mode=0o600)}

    def wheelhouse(self) -> str:
        """The least RUNNER_WHEELHOUSE accepts: a lock pinning one distribution and its wheel (never opened)."""
        self.file("wheelhouse/requirements.lock", "tiny==1.0\n    # via -r requirements.in\n")
        self.file("wheelhouse/tiny-1.0-py3-none-any.whl")
        return str(self.path / "wheelhouse")

    def wheels_for_3_9(self) -> str:
        """A package environment whose one distribution is a wheel compiled for CPython 3.9."""
        self.file("env/site-packages/old-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: old\nVersion: 1.0\n")
        self.file("env/site-packages/old-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: cp39-cp39-linux_x86_64\n")
        return str(self.path / "env")

    def failing_python(self) -> str:
        """An executable that is no interpreter: every sandbox's probe of it fails, on any machine. Asked
        its version at start (`config.disk`), it says it is this one."""
        said = f"{sys.version_info[0]} {sys.version_info[1]} cpython"
        script = f'#!/bin/sh\ncase "$*" in *version_info*) echo "{said}" ;; *) exit 3 ;; esac\n'
        return self.file("python", script, mode=0o755)

    def uids_all_taken(self) -> dict[str, str]:
        """A two-uid range, one block of a pool of 2 uids (one zygote, one slot, nothing pooled, no
        sessions), whose lock this test holds as another server's pool would."""
        work = self.directory("work")
        lean = {"RUNNER_POOL_SIZE": "0", "RUNNER_MAX_CONCURRENT": "1", "RUNNER_MAX_SESSIONS": "0"}
        for uids in unused_uids(2):
            # Another run of this test, at the same time, may hold one: then the next.
            pool = Config(sandbox_uids=uids, pool_size=0, max_concurrent=1, max_sessions=0, work_dir=work)
            try:
                self.held.enter_context(claimed_uids(pool, IsolationPlan("namespaces", "root", uid_per_run=True)))
                break
            except Unavailable:
                continue
        return {**SANDBOXED, **lean, "RUNNER_WORK_DIR": work, "RUNNER_SANDBOX_UIDS": uids, "RUNNER_PRELOAD": ""}


def unused_uids(count: int) -> Iterator[str]:
    """FIRST-LAST ranges of `count` uids, none a user of the host's, far above the default range other
    servers take."""
    users = {entry.pw_uid for entry in pwd.getpwall()}
    for first in range(3_000_000, 4_000_000, count):
        if users.isdisjoint(range(first, first + count)):
            yield f"{first}-{first + count - 1}"


def host_user_uids() -> str:
    """FIRST-LAST holding one user of the host's, not root."""
    uids = sorted(entry.pw_uid for entry in pwd.getpwall() if entry.pw_uid != 0)
    if not uids:
        pytest.skip("this host has no user but root to name in RUNNER_SANDBOX_UIDS")
    return f"{uids[0]}-{uids[0]}"


@dataclass(frozen=True)
class Refusal:
    """One `ConfigError` raised in runner/ (`site`: module:function, what it refuses) and an input that
    reaches it at start: environment variables made by `environ`, arguments."""

    site: str
    variable: str
    says: str  # in the line: this site's refusal, not another's of the same variable
    environ: Callable[[Scratch], dict[str, str]]
    args: tuple[str, ...] = ()
    needs: str = ""  # "root" or "non-root": the server's uid that reaches it; "sandboxed root": namespaces too


HTTP = ("--transport", "http")
SANDBOXED = {"RUNNER_SANDBOX": "namespaces"}  # the uids are checked where runs are lent them (root, sandboxed)
TOKEN = "t" * 32

# Every `raise ConfigError` of runner/ (51; the 52nd match of `grep 'ConfigError(' runner` is the class), each
# with an input that reaches it at start. None is reached only from a library call: `runner.api.run_code` opens
# the environment through these same sites. The server's uid decides some, and the other uid skips them: root
# reads past what a non-root server is refused (environment:_unfit unreachable, :_check_readable by the server),
# and only a root server's runs are other uids, whose reach is checked (environment:_check_readable by other
# uids; the identity sites, which need namespaces too, and skip saying why where they do not work).
REFUSALS = [
    Refusal("config:from_env unknown variable", "RUNNER_MAXCPU", "did you mean", lambda s: {"RUNNER_MAXCPU": "5"}),
    Refusal(
        "config:_check default above max timeout",
        "RUNNER_DEFAULT_TIMEOUT",
        "got its default 10",
        lambda s: {"RUNNER_MAX_TIMEOUT": "5"},
    ),
    Refusal(
        "config:_check empty uid range", "RUNNER_SANDBOX_UIDS", "'100-1'", lambda s: {"RUNNER_SANDBOX_UIDS": "100-1"}
    ),
    Refusal(
        "config:_check preload without packages",
        "RUNNER_PRELOAD",
        "needs RUNNER_PACKAGES",
        lambda s: {"RUNNER_PRELOAD": "json"},
    ),
    Refusal(
        "config:_http operations path", "RUNNER_HTTP_PATH", "/healthz", lambda s: {"RUNNER_HTTP_PATH": "/healthz"}, HTTP
    ),
    Refusal(
        "config:_http hosts needed",
        "RUNNER_HTTP_ALLOWED_HOSTS",
        "required",
        lambda s: {"RUNNER_HTTP_HOST": "0.0.0.0"},
        HTTP,
    ),
    Refusal("settings:parse choice", "RUNNER_LOG_LEVEL", "expected one of", lambda s: {"RUNNER_LOG_LEVEL": "loud"}),
    Refusal(
        "settings:parse path", "RUNNER_WORK_DIR", "expected an absolute path", lambda s: {"RUNNER_WORK_DIR": "work"}
    ),
    Refusal(
        "settings:parse list item",
        "RUNNER_SANDBOX_READ_PATHS",
        "'data'",
        lambda s: {"RUNNER_SANDBOX_READ_PATHS": "/srv,data"},
    ),
    Refusal("settings:parse text", "RUNNER_SANDBOX_UIDS", "FIRST-LAST", lambda s: {"RUNNER_SANDBOX_UIDS": "many"}),
    Refusal(
        "settings:_integer not one", "RUNNER_MAX_CPU_SECONDS", "'ten'", lambda s: {"RUNNER_MAX_CPU_SECONDS": "ten"}
    ),
    Refusal(
        "settings:_integer out of range", "RUNNER_MAX_CPU_SECONDS", "got 0", lambda s: {"RUNNER_MAX_CPU_SECONDS": "0"}
    ),
    Refusal("settings:_number", "RUNNER_MAX_TIMEOUT", "'never'", lambda s: {"RUNNER_MAX_TIMEOUT": "never"}),
    Refusal(
        "removed:refuse_removed renamed",
        "RUNNER_MAX_CODE_BYTES",
        "RUNNER_MAX_CODE_MB=0.0625",
        lambda s: {"RUNNER_MAX_CODE_BYTES": "65536"},
    ),
    Refusal(
        "removed:refuse_removed dropped",
        "RUNNER_SPAWN_MODE",
        "removed:",
        lambda s: {"RUNNER_SPAWN_MODE": "fork-server"},
    ),
    Refusal(
        "environment:_unfit unreachable",
        "RUNNER_WORK_DIR",
        "cannot be reached",
        lambda s: {"RUNNER_WORK_DIR": s.unreachable("work")},
        needs="non-root",
    ),
    Refusal(
        "environment:_unfit missing",
        "RUNNER_WORK_DIR",
        "does not exist",
        lambda s: {"RUNNER_WORK_DIR": str(s.path / "no/work")},
    ),
    Refusal(
        "environment:_work_dir nothing made there",
        "RUNNER_WORK_DIR",
        "no directory can be made in '/proc'",
        lambda s: {"RUNNER_WORK_DIR": "/proc"},
        needs="root",  # a non-root server is refused /proc by access(2) before
    ),
    Refusal(
        "environment:_unfit not one",
        "RUNNER_PYTHON",
        "expected an executable file",
        lambda s: {"RUNNER_PYTHON": s.file("python")},
    ),
    Refusal(
        "environment:_version_of no cpython",
        "RUNNER_PYTHON",
        "is not a CPython interpreter",
        lambda s: {"RUNNER_PYTHON": s.file("python", "#!/bin/sh\necho hello\n", mode=0o755)},
    ),
    Refusal(
        "environment:_version_of did not run",
        "RUNNER_PYTHON",
        "did not run as a Python interpreter",
        lambda s: {"RUNNER_PYTHON": s.file("python", "#!/no/such/shell\n", mode=0o755)},
    ),
    Refusal(
        "environment:_python too old",
        "RUNNER_PYTHON",
        "is Python 3.9; runs need 3.11 or newer",
        lambda s: {"RUNNER_PYTHON": s.file("python", "#!/bin/sh\necho 3 9 cpython\n", mode=0o755)},
    ),
    Refusal(
        "environment:_python wheels of another version",
        "RUNNER_PACKAGES",
        "compiled packages are for 3.9",
        lambda s: {"RUNNER_PACKAGES": s.wheels_for_3_9()},
    ),
    Refusal("environment:_packages", "RUNNER_PACKAGES", "found 0", lambda s: {"RUNNER_PACKAGES": s.directory("env")}),
    Refusal(
        "environment:_wheelhouse no lock",
        "RUNNER_WHEELHOUSE",
        "holding requirements.lock",
        lambda s: {"RUNNER_WHEELHOUSE": s.directory("house")},
    ),
    Refusal(
        "environment:_wheelhouse no pins",
        "RUNNER_WHEELHOUSE",
        "found none",
        lambda s: {"RUNNER_WHEELHOUSE": str(Path(s.file("house/requirements.lock", "# nothing\n")).parent)},
    ),
    Refusal(
        "environment:_wheelhouse_cache cannot make",
        "RUNNER_WHEELHOUSE_CACHE",
        "can make",
        lambda s: {"RUNNER_WHEELHOUSE": s.wheelhouse(), "RUNNER_WHEELHOUSE_CACHE": s.file("cache") + "/packages"},
    ),
    Refusal(
        "environment:_wheelhouse_cache writable by others",
        "RUNNER_WHEELHOUSE_CACHE",
        "mode 0777",
        lambda s: {"RUNNER_WHEELHOUSE": s.wheelhouse(), "RUNNER_WHEELHOUSE_CACHE": s.directory("cache", 0o777)},
    ),
    Refusal(
        "environment:_preload",
        "RUNNER_PRELOAD",
        "no module 'no_such_module'",
        lambda s: {
            "RUNNER_PACKAGES": str(Path(s.directory("env/site-packages")).parent),
            "RUNNER_PRELOAD": "no_such_module",
        },
    ),
    Refusal(
        "environment:_read_paths missing",
        "RUNNER_SANDBOX_READ_PATHS",
        "that exist",
        lambda s: {"RUNNER_SANDBOX_READ_PATHS": str(s.path / "none")},
    ),
    Refusal(
        "environment:_read_paths root",
        "RUNNER_SANDBOX_READ_PATHS",
        "not / itself",
        lambda s: {"RUNNER_SANDBOX_READ_PATHS": "/"},
    ),
    Refusal(
        "environment:_read_paths the server's own",
        "RUNNER_SANDBOX_READ_PATHS",
        "the server's own files",
        lambda s: {"RUNNER_WORK_DIR": s.directory("work"), "RUNNER_SANDBOX_READ_PATHS": str(s.path)},
    ),
    Refusal(
        "environment:_check_readable by the server",
        "RUNNER_SANDBOX_READ_PATHS",
        "cannot be read by the server's uid",
        lambda s: {"RUNNER_SANDBOX_READ_PATHS": s.file("data", mode=0)},
        needs="non-root",
    ),
    Refusal(
        "environment:_check_readable by other uids",
        "RUNNER_SANDBOX_READ_PATHS",
        "chmod o+rX",
        lambda s: {"RUNNER_SANDBOX_READ_PATHS": s.file("data", mode=0o600)},
        needs="root",
    ),
    Refusal(
        "environment:_check_others_cannot_change the file",
        "RUNNER_AUTH_TOKENS_FILE",
        "may be written by any user, who could add a token of their own: chmod 600 it",
        lambda s: {"RUNNER_AUTH_TOKENS_FILE": s.file("tokens", f"alice:{TOKEN}\n", mode=0o666)},
        HTTP,
    ),
    Refusal(
        "environment:_check_others_cannot_change its directory",
        "RUNNER_TOOLS_CONFIG",
        "where any user may replace what is in it and choose the commands this server starts",
        lambda s: {"RUNNER_TOOLS_CONFIG": s.file("open/tools.json", "{}", mode=0o600), **s.opened("open")},
    ),
    Refusal(
        "environment:_check_others_cannot_change its owner",
        "RUNNER_TOOLS_CONFIG",
        "belongs to uid 65534, who could choose the commands this server starts",
        lambda s: {"RUNNER_TOOLS_CONFIG": s.owned_by_nobody("tools.json")},
        needs="root",  # only root gives a file away
    ),
    Refusal(
        "auth:parse name",
        "RUNNER_AUTH_TOKENS_FILE",
        "line 2: a name",
        lambda s: s.tokens(f"# ops\nops team:{TOKEN}\n"),
        HTTP,
    ),
    Refusal(
        "auth:parse short token",
        "RUNNER_AUTH_TOKENS_FILE",
        "line 1: a token",
        lambda s: s.tokens("alice:short\n"),
        HTTP,
    ),
    Refusal(
        "auth:parse same token",
        "RUNNER_AUTH_TOKENS_FILE",
        "line 2: the same token",
        lambda s: s.tokens(f"a:{TOKEN}\nb:{TOKEN}\n"),
        HTTP,
    ),
    Refusal(
        "auth:parse same name",
        "RUNNER_AUTH_TOKENS_FILE",
        "'a' is used twice",
        lambda s: s.tokens(f"a:{TOKEN}\na:{TOKEN}x\n"),
        HTTP,
    ),
    Refusal("auth:parse no token", "RUNNER_AUTH_TOKENS_FILE", "no token", lambda s: s.tokens("# none yet\n"), HTTP),
    Refusal(
        "auth:read", "RUNNER_AUTH_TOKENS_FILE", "cannot read", lambda s: s.tokens(b"alice:\xff" + TOKEN.encode()), HTTP
    ),
    Refusal(
        "config.memory:sessions_budget",
        "RUNNER_SESSIONS_MEMORY_MB",
        "16000000 MiB is more",
        lambda s: {"RUNNER_SESSIONS_MEMORY_MB": "16000000"},
    ),
    Refusal(
        "config.memory:sessions_budget over http",
        "RUNNER_SESSIONS_MEMORY_MB",
        "16000000 MiB is more",
        lambda s: {"RUNNER_SESSIONS_MEMORY_MB": "16000000"},
        HTTP,
    ),
    Refusal(
        "isolation:plan_isolation namespaces",
        "RUNNER_SANDBOX",
        "namespaces were asked for",
        lambda s: {"RUNNER_SANDBOX": "namespaces", "RUNNER_PYTHON": s.failing_python()},
    ),
    Refusal(
        "isolation:plan_isolation bwrap",
        "RUNNER_SANDBOX",
        "bwrap was asked for",
        lambda s: {"RUNNER_SANDBOX": "bwrap", "RUNNER_PYTHON": s.failing_python()},
    ),
    Refusal(
        "config.disk:_check_run_uids a host user",
        "RUNNER_SANDBOX_UIDS",
        "is the host's user",
        lambda s: {**SANDBOXED, "RUNNER_SANDBOX_UIDS": host_user_uids()},
        needs="sandboxed root",
    ),
    Refusal(
        "config.disk:_check_run_uids too few",
        "RUNNER_SANDBOX_UIDS",
        "holds 1 uids",
        lambda s: {**SANDBOXED, "RUNNER_SANDBOX_UIDS": next(unused_uids(1))},
        needs="sandboxed root",
    ),
    Refusal(
        "identity:claimed_uids every block taken",
        "RUNNER_SANDBOX_UIDS",
        "is taken",
        Scratch.uids_all_taken,
        needs="sandboxed root",
    ),
    Refusal(
        "config.loading:load no tokens off loopback",
        "RUNNER_AUTH_TOKENS_FILE",
        "not a loopback address",
        lambda s: {"RUNNER_HTTP_HOST": "0.0.0.0", "RUNNER_HTTP_ALLOWED_HOSTS": "runner.example.com"},
        HTTP,
    ),
    Refusal(
        "config.loading:load no-auth on stdio",
        "--insecure-no-auth",
        "http only",
        lambda s: {},
        ("--insecure-no-auth",),
    ),
]


HOST_REFUSALS = ("isolation:", "identity:")


@pytest.mark.parametrize("refusal", REFUSALS, ids=[refusal.site for refusal in REFUSALS])
def test_every_configuration_refusal_at_start_is_one_line_naming_the_variable_and_exit_2(
    refusal: Refusal, work_dir: Path, tmp_path: Path
) -> None:
    # Issue 46: a refusal raised as the pool opened (RUNNER_SANDBOX_UIDS=1-100 on a root server) was a traceback
    # and exit 1, then came after the pool's log lines; the README promises one line naming the variable, exit 2.
    uid = "root" if os.geteuid() == 0 else "non-root"
    if refusal.needs and refusal.needs.split()[-1] != uid:
        pytest.skip(f"reached by a {refusal.needs} server only")
    with contextlib.ExitStack() as held:
        given = refusal.environ(Scratch(tmp_path / "given", held))
        port = {"RUNNER_HTTP_PORT": "0"} if refusal.args == HTTP else {}  # should it start after all
        # RUNNER_SANDBOX=none unless a case says otherwise: no probe to wait for where none is refused.
        done = served(minimal({"RUNNER_SANDBOX": "none", **port, **given}, work_dir), args=refusal.args)
    said = done.stderr.splitlines()
    if refusal.needs == "sandboxed root" and "cannot start: RUNNER_SANDBOX:" in done.stderr:
        pytest.skip(f"needs a sandbox that works here: {done.stderr.strip()}")
    assert (done.returncode, done.stdout, len(said)) == (2, "", 1), done.stderr
    # A value refused is invalid configuration; a host that cannot give what a valid one asks, "cannot start".
    what = "cannot start" if refusal.site.startswith(HOST_REFUSALS) else "invalid configuration"
    assert said[0].startswith(f"python-runner-mcp: {what}: {refusal.variable}: "), said[0]
    assert refusal.says in said[0], said[0]
    assert "Traceback" not in done.stderr
