"""Starting one run interpreter with os.posix_spawn: new session, minimal environment, only its own fds."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import signal
import socket
import tempfile
from collections.abc import Mapping

from runner.config import Config
from runner.config.egress import proxy_environment
from runner.errors import SpawnError
from runner.inrun.bootstrap import CGROUP_FDS
from runner.inrun.cgroups import RunCgroup
from runner.inrun.namespaces import WORKDIR as SANDBOX_WORKDIR
from runner.inrun.namespaces import etc_files
from runner.processes.cgroups import Parent
from runner.processes.child import Child, maxrss_bytes
from runner.processes.identity import RunUids, UidLender
from runner.processes.isolation import IsolationPlan, interpreter_argv
from runner.processes.limits import Limits
from runner.processes.trees import remove_tree

# Every signal a process may set a disposition for: posix_spawn otherwise passes on the server's
# blocked mask and ignored signals (SIGPIPE is ignored in every Python process).
_RESETTABLE_SIGNALS = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


def spawn_in_new_session(argv: list[str], home: str, fds: list[int], extra: Mapping[str, str] | None = None) -> int:
    """posix_spawn `argv` in a new session with `fds` as its fds 0, 1, 2, ... and nothing else.

    The signal mask and every disposition are reset and the environment is the minimal one: the
    child inherits nothing of the server's but what is passed here.
    """
    # os.pipe() and socketpair() fds are close-on-exec; dup2 onto 0..n clears that for the targets.
    actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds)]
    return os.posix_spawn(
        argv[0],
        argv,
        minimal_environment(home) | dict(extra or {}),
        file_actions=actions,
        setsid=True,
        setsigmask=(),
        setsigdef=_RESETTABLE_SIGNALS,
    )


def minimal_environment(workdir: str) -> dict[str, str]:
    """The whole environment of a run: nothing of the server's leaks through."""
    return {
        "PATH": _SAFE_PATH,
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        # glibc gives threads malloc arenas of their own, each reserving 64 MiB of address space, which
        # RLIMIT_AS counts: eight threads failed to start under the default 256 MiB. With one arena for
        # all, the same 8-thread pool peaked at 68 MiB of address space instead of 124 (with two). In
        # the environment, not a mallopt() call, so that the run's own subprocesses get it too.
        "MALLOC_ARENA_MAX": "1",
        # Numeric libraries start a thread per core at import unless told otherwise: threads a fork
        # server must not have, that count against the run's process limit, for CPU the run has
        # only one second of per second anyway.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        # Arrow's own allocator (jemalloc or mimalloc) reserves address space that RLIMIT_AS counts: at the
        # default 256 MiB a parquet file's read waited on threads that never came, until the run's timeout
        # (found by a first hour). malloc's, with MALLOC_ARENA_MAX above, fits.
        "ARROW_DEFAULT_MEMORY_POOL": "system",
        # And its I/O pool starts 8 threads, each with a stack of RLIMIT_STACK's 8 MiB in the address
        # space: 2 leave 48 MiB of it for data (found by a second look: a 9.5 MB dataset did not fit).
        "ARROW_IO_THREADS": "2",
        # No display: figures are drawn to PNG (and come back as images, `figures`).
        "MPLBACKEND": "Agg",
    }


def run_environment(config: Config) -> dict[str, str]:
    """What runs find in their environment beside `minimal_environment`: their packages
    (`package_environment`) and, with egress (RUNNER_EGRESS_ALLOW), the proxy on their loopback."""
    return package_environment(config) | (proxy_environment() if config.egress_allow else {})


def package_environment(config: Config) -> dict[str, str]:
    """What runs need to import from RUNNER_PACKAGES: its site-packages on the path (the bootstrap
    puts it there itself, under -I; a Python the code starts finds it through PYTHONPATH) and
    matplotlib's font cache, built with the environment (`scripts/sandbox_env.py`)."""
    if not config.packages_site:
        return {}
    found = {"PYTHONPATH": config.packages_site}
    mplconfig = os.path.join(config.packages, "mplconfig")
    if os.path.isdir(mplconfig):
        found["MPLCONFIGDIR"] = mplconfig
    return found


def spawn_child(
    python: str,
    base_dir: str,
    limits: Limits,
    plan: IsolationPlan,
    extra: Mapping[str, str] | None = None,
    uid: int | None = None,
    cgroup: RunCgroup | None = None,
) -> Child:
    """Create a fresh working directory and pipes, and start the bootstrap in a new session.

    In a sandbox the working directory is the sandbox's own tmpfs and nothing is made on the host.
    Raises `SpawnError` when the interpreter cannot be started; nothing is left behind then.
    A plan that forks its runs never spawns one: a namespaced one spawned here would run on the host
    in the sandbox's directory, /tmp, and empty it when its code came: `ValueError`.
    """
    if plan.forked:
        raise ValueError(f"RUNNER_SANDBOX={plan.mode} forks its runs from a zygote, never spawns them")
    host_dir = None if plan.sandboxed else tempfile.mkdtemp(prefix="run-", dir=base_dir)
    workdir = host_dir or SANDBOX_WORKDIR
    lent = (f"uid={uid}",) if uid is not None and plan.wrapper else ()
    argv = [*plan.wrapper, *interpreter_argv(python), plan.bootstrap, workdir, *limits.argv(), *plan.run_args, *lent]
    # The run's cgroup.procs, one per hierarchy, after fd 3: the bootstrap moves itself in
    # (`bootstrap.enter_cgroup`) before anything else, and closes them.
    if cgroup is not None:
        argv.append(f"{CGROUP_FDS}{len(cgroup.procs)}")
    parent_fds: list[int] = []
    child_fds: list[int] = []
    try:
        # os.pipe() and socketpair() fds are close-on-exec; dup2 onto 0-3 gives the child exactly these
        # four: stdin, stdout, stderr (read, write each), and the job socket, on which the code goes in
        # and the run's report (images, files, result) comes back.
        for theirs_first in (True, False, False):
            read_end, write_end = os.pipe()
            child_fds.append(read_end if theirs_first else write_end)
            parent_fds.append(write_end if theirs_first else read_end)
        theirs, ours = socket.socketpair()
        child_fds.append(theirs.detach())
        parent_fds.append(ours.detach())
        pid = spawn_in_new_session(argv, workdir, child_fds + (cgroup.procs if cgroup else []), extra)
    except OSError as exc:
        for fd in parent_fds + child_fds:
            os.close(fd)
        if cgroup is not None:
            cgroup.remove()
        if host_dir:
            remove_tree(host_dir)
        raise SpawnError(f"cannot start {argv[0]}: {exc}") from exc
    for fd in child_fds:
        os.close(fd)
    if cgroup is not None:
        cgroup.close_procs()
    for fd in parent_fds:
        os.set_blocking(fd, False)
    stdin, stdout, stderr, code = parent_fds
    child = Child(
        pid=pid,
        workdir=host_dir,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        code=code,
        inherited_peak=_own_peak_rss(),
        wrapped=bool(plan.wrapper),
        interpreter_pid=pid,
        cgroup=cgroup,
    )
    child._open.update(parent_fds)
    try:
        child.pidfd = os.pidfd_open(pid)
        child._open.add(child.pidfd)
    except (AttributeError, OSError):
        child.pidfd = None  # no pidfd (macOS, old kernels): the pool polls instead
    return child


class SpawnSource:
    """Interpreters started one `posix_spawn` each (inside bubblewrap when the sandbox is on)."""

    helper_pid = None  # no process of its own among the server's children
    forks_delay_runs = False
    restarts = 0  # no helper of its own to restart

    def __init__(
        self,
        config: Config,
        base_dir: str,
        limits: Limits,
        plan: IsolationPlan,
        uids: RunUids | None = None,
        cgroups: Parent | None = None,
    ) -> None:
        self._cgroups = cgroups
        self._python = config.python
        self._base_dir = base_dir
        self._limits = limits
        runs = [(uid, uid) for uid in uids.uids()] if uids is not None else [(os.getuid(), os.getgid())]
        self._plan = (
            dataclasses.replace(plan, wrapper=_with_etc(plan.wrapper, base_dir, runs)) if plan.wrapper else plan
        )
        self._extra = run_environment(config)
        self._uids = UidLender(uids) if uids is not None and plan.wrapper else None

    async def start(self) -> Child:
        """A freshly spawned interpreter (not yet ready: it still applies its limits), in a cgroup of
        its own where the plan has them, and lent a uid of the pool's block if it has one, which comes
        back once the interpreter is reaped: bubblewrap's PID namespace, and every process of the run
        in it, is gone by then."""
        lender = self._uids
        try:
            uid = lender.lend() if lender is not None else None
        except OSError as exc:
            raise SpawnError(str(exc)) from exc
        try:
            try:
                cgroup = self._cgroups.make_run() if self._cgroups is not None else None
            except OSError as exc:
                raise SpawnError(f"cannot make the run's cgroup: {exc}") from exc
            child = spawn_child(self._python, self._base_dir, self._limits, self._plan, self._extra, uid, cgroup)
        except BaseException:
            if lender is not None and uid is not None:
                lender.give_back(uid)
            raise
        if lender is not None and uid is not None:
            child.after_reap.append(lambda: lender.give_back(uid))
        return child

    async def unresponsive(self, child: Child) -> None:
        """`child` did not end after SIGKILL: nothing can be done but fail the call."""
        raise SpawnError(f"process {child.pid} did not end after SIGKILL")

    def mark_anchor(self, child: Child) -> None:
        """Nothing to tell: a spawned anchor's cgroup is the server's, which watches it itself."""

    async def oom_told(self, child: Child) -> None:
        """What the kernel told of OOMs in `child`'s cgroup so far, read and forgotten."""
        cgroup = child.cgroup
        if cgroup is not None and cgroup.event >= 0:
            with contextlib.suppress(OSError):
                while os.read(cgroup.event, 8):
                    pass


def _with_etc(wrapper: tuple[str, ...], base_dir: str, runs: list[tuple[int, int]]) -> tuple[str, ...]:
    """bubblewrap's command line with the /etc made for runs (`namespaces.etc_files`, as the zygote
    makes it for its runs) bound in, from files written once into the pool's directory."""
    etc = os.path.join(base_dir, "etc")
    os.makedirs(etc, exist_ok=True)  # read by bubblewrap as the server's uid, before it drops anything
    binds: list[str] = []
    for name, text in etc_files(runs).items():
        path = os.path.join(etc, name)
        with open(path, "w", encoding="utf-8") as etc_file:
            etc_file.write(text)
        binds += ["--ro-bind", path, "/etc/" + name]
    # Before the root is made read-only (the last --remount-ro /): bubblewrap makes the mount points then.
    end = max(i for i, arg in enumerate(wrapper) if arg == "--remount-ro" and wrapper[i + 1 : i + 2] == ("/",))
    return (*wrapper[:end], *binds, *wrapper[end:])


def _own_peak_rss() -> int:
    """The server's own peak RSS in bytes: what a posix_spawned child's ru_maxrss starts from."""
    return maxrss_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
