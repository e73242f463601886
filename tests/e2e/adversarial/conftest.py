"""One pool per sandbox mode for the whole module, set up the way the server sets itself up.

`SANDBOX_MODES` lists the modes the suite runs under ("posix-spawn" and "fork-server": rlimits and
process groups only, in each spawn mode; "bwrap": each run in bubblewrap namespaces; "namespaces":
each forked run in namespaces the zygote makes). Cases flagged `needs_pid_namespace` run only in
the sandboxed modes, and only once a run has shown that it lives in another PID namespace than
this process.

Processes of a run are recognised by `Target.markers` (the pool's base directory, which is in
every plain run's environment and command line, and in the command line of every process a
zygote forks). A sandboxed run sees its own /tmp instead; its bwrap process is a child of this
process and the namespace dies with it, which the new-children check covers; a namespaced run's
processes carry the zygote's command line.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import inspect
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner.config import MIB, Config
from runner.execution.kept import KEPT_PREFIX
from runner.execution.pool import Pool
from runner.outcome import RunRequest, Status
from tests.conftest import REPO
from tests.e2e.adversarial.leaks import Checkout
from tests.helpers import MODES, in_mode

# Plain rlimits with each spawn mode, inside a bubblewrap sandbox (which spawns per run), and forked into
# namespaces by the zygote.
SANDBOX_MODES = list(MODES)

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


@dataclass(frozen=True)
class Target:
    """The pool under attack and what the leak checks need to know about it."""

    mode: str
    pool: Pool
    config: Config
    work_dir: Path  # config.work_dir: private to this module
    base_dir: Path  # the pool's own directory inside work_dir; every run's directory is inside it
    markers: tuple[str, ...]  # strings in the environ/cmdline of every process of a run
    server_pid: int
    environ_digest: str  # sha256 of this process's /proc/self/environ, as a run would print it
    capabilities: int  # effective capabilities of this process; runs inherit them
    decoys: tuple[Path, ...]  # files at the top level of /tmp whose contents no run may change
    own_pid_namespace: bool  # measured: runs of this pool live in another PID namespace than this process
    checkout: Checkout | None  # the repository's files as git lists them (None: no git, walk it all)


def small_limits(config: Config, work_dir: Path) -> Config:
    """Low limits so that every case ends within a second or two."""
    return dataclasses.replace(
        config,
        python=os.path.realpath(sys.executable),
        work_dir=str(work_dir),
        pool_size=0,  # no waiting interpreters: the pool's own processes are few and there before a case
        max_concurrent=1,
        max_cpu_seconds=1,
        max_memory_mb=256,  # one 200 MiB write must fit; every bomb still ends in well under a second
        max_file_size_mb=1,
        max_output_bytes=4 * MIB,
        max_output_chars=20_000,
        max_timeout=10.0,
    )


def _effective_capabilities() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def _prctl(option: int, value: int) -> int:
    return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0))


@contextlib.contextmanager
def _like_the_server() -> Any:
    """Non-dumpable while the pool runs, as `python -m runner` makes itself at start."""
    was = _prctl(PR_GET_DUMPABLE, 0)
    _prctl(PR_SET_DUMPABLE, 0)
    try:
        yield
    finally:
        _prctl(PR_SET_DUMPABLE, was)


@contextlib.contextmanager
def _inheritable_decoy_fds() -> Any:
    """An inheritable pipe in this process: no run may find it among its fds."""
    read_end, write_end = os.pipe()
    os.set_inheritable(read_end, True)
    os.set_inheritable(write_end, True)
    try:
        yield
    finally:
        os.close(read_end)
        os.close(write_end)


@contextlib.contextmanager
def _decoy_in_tmp() -> Any:
    """A file of ours at the top level of /tmp: the only one there whose contents are compared."""
    fd, name = tempfile.mkstemp(prefix="adversarial-decoy-", dir="/tmp")
    os.write(fd, b"a run must not change this\n")
    os.close(fd)
    try:
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


def _open_kwargs() -> dict[str, Any]:
    # The server opens its pool as a child subreaper that sweeps away what runs leave behind.
    return {"reap_strays": True} if "reap_strays" in inspect.signature(Pool.open).parameters else {}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=SANDBOX_MODES)
async def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Target]:
    mode: str = request.param
    work_dir = tmp_path_factory.mktemp("adversarial-work")
    config = in_mode(small_limits(Config.from_env({}), work_dir), mode)
    with open("/proc/self/environ", "rb") as environ:
        digest = hashlib.sha256(environ.read()).hexdigest()
    with _like_the_server(), _inheritable_decoy_fds(), _decoy_in_tmp() as decoy:
        async with Pool.open(config, **_open_kwargs()) as pool:
            # The pool's directory, where runs' own are made (its kept output has one of its own).
            [base_dir] = [path for path in work_dir.iterdir() if not path.name.startswith(KEPT_PREFIX)]
            # One ordinary run first: whatever the pool starts lazily (a fork server) is up before any
            # case takes its baseline of the pool's own processes.
            # The same run tells whether runs really get their own PID namespace: the cases that could
            # kill this process or the whole machine without one run only when it is measured so.
            warm = await pool.run(RunRequest("0badc0de", "import os\nprint(os.readlink('/proc/self/ns/pid'))", 30.0))
            assert warm.status is Status.OK, warm
            yield Target(
                mode=mode,
                pool=pool,
                config=config,
                work_dir=work_dir,
                base_dir=base_dir,
                markers=(str(base_dir),),
                server_pid=os.getpid(),
                environ_digest=digest,
                capabilities=_effective_capabilities(),
                decoys=(decoy,),
                own_pid_namespace=warm.stdout.text.strip() != os.readlink("/proc/self/ns/pid"),
                checkout=Checkout.of(REPO),
            )
    assert list(work_dir.iterdir()) == [], "the pool removes its base directory when it closes"
