"""Starting one run interpreter with os.posix_spawn, and the handle the pool keeps for it."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from runner.errors import SpawnError
from runner.limits import Limits
from runner.sandbox import WORKDIR as SANDBOX_WORKDIR
from runner.sandbox import Sandbox, exit_code_of_sandboxed

# Every signal a process may set a disposition for: posix_spawn otherwise passes on the server's
# blocked mask and ignored signals (SIGPIPE is ignored in every Python process).
_RESETTABLE_SIGNALS = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
POLL_INTERVAL = 0.005


@dataclass(eq=False)
class Child:
    """One interpreter: its pid (also its session and process group id) and the server's pipe ends."""

    pid: int
    workdir: str | None  # the host directory to delete afterwards; None inside a sandbox's own tmpfs
    stdin: int
    stdout: int
    stderr: int
    code: int
    pidfd: int | None = None
    reaped: bool = False
    refused_limits: tuple[str, ...] = ()
    inherited_peak: int = 0
    sandboxed: bool = False
    interpreter_pid: int = 0  # host pid of the interpreter itself (differs from pid inside a sandbox)
    _open: set[int] = field(default_factory=set)

    def close_fd(self, fd: int) -> None:
        """Close one of our pipe ends once; later calls are no-ops."""
        if fd in self._open:
            self._open.discard(fd)
            os.close(fd)

    def close_all(self) -> None:
        """Close every fd the server holds for this child."""
        for fd in list(self._open):
            self.close_fd(fd)

    def kill_group(self) -> None:
        """SIGKILL the child's whole process group; a group that is already gone is fine.

        Only called before the leader is reaped, so its pid cannot have been reused.
        """
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def still_running(self) -> bool:
        """True until the child has exited (a zombie has exited)."""
        if self.reaped:
            return False
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    async def wait_exit(self) -> None:
        """Return once the child has exited; it stays a zombie, so its pid (and group id) stay ours."""
        if self.pidfd is not None:
            await anyio.wait_readable(self.pidfd)
            return
        # No pidfd (macOS, Linux < 5.3): there is nothing to wait on but time.
        while self.still_running():  # noqa: ASYNC110
            await anyio.sleep(POLL_INTERVAL)

    def reap(self) -> tuple[int, float, int]:
        """Collect the exited child: (returncode, cpu seconds, peak RSS bytes).

        The usage includes every descendant the child reaped: a sandbox's own processes and the run.
        """
        _, status, usage = os.wait4(self.pid, 0)
        self.reaped = True
        code = os.waitstatus_to_exitcode(status)
        if self.sandboxed:
            code = exit_code_of_sandboxed(code)
        return code, usage.ru_utime + usage.ru_stime, maxrss_bytes(usage.ru_maxrss)

    def find_interpreter(self) -> None:
        """Point `interpreter_pid` at the interpreter itself: inside a sandbox that is the command
        bwrap's namespace init started (bwrap -> init -> interpreter)."""
        if not self.sandboxed:
            return
        pid = self.pid
        for _ in range(2):
            try:
                with open(f"/proc/{pid}/task/{pid}/children", "rb") as children:
                    pid = int(children.read().split()[0])
            except (OSError, ValueError, IndexError):
                break
        self.interpreter_pid = pid


def maxrss_bytes(ru_maxrss: int) -> int:
    """ru_maxrss in bytes: Linux reports KiB, macOS bytes."""
    return ru_maxrss if sys.platform == "darwin" else ru_maxrss * 1024


def spawn_in_new_session(argv: list[str], home: str, fds: list[int]) -> int:
    """posix_spawn `argv` in a new session with `fds` as its fds 0, 1, 2, ... and nothing else.

    The signal mask and every disposition are reset and the environment is the minimal one: the
    child inherits nothing of the server's but what is passed here.
    """
    # os.pipe() and socketpair() fds are close-on-exec; dup2 onto 0..n clears that for the targets.
    actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds)]
    return os.posix_spawn(
        argv[0],
        argv,
        minimal_environment(home),
        file_actions=actions,
        setsid=True,
        setsigmask=(),
        setsigdef=_RESETTABLE_SIGNALS,
    )


def interpreter_argv(python: str) -> list[str]:
    """How every run interpreter (and the zygote) is started: isolated, no site-packages, UTF-8."""
    return [python, "-I", "-S", "-X", "utf8"]


def minimal_environment(workdir: str) -> dict[str, str]:
    """The whole environment of a run: nothing of the server's leaks through."""
    return {
        "PATH": _SAFE_PATH,
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }


def spawn_child(python: str, base_dir: str, limits: Limits, sandbox: Sandbox) -> Child:
    """Create a fresh working directory and pipes, and start the bootstrap in a new session.

    In a sandbox the working directory is the sandbox's own tmpfs and nothing is made on the host.
    Raises `SpawnError` when the interpreter cannot be started; nothing is left behind then.
    """
    host_dir = None if sandbox.enabled else tempfile.mkdtemp(prefix="run-", dir=base_dir)
    workdir = host_dir or SANDBOX_WORKDIR
    argv = [*sandbox.wrapper, *interpreter_argv(python), sandbox.bootstrap, workdir, *limits.argv()]
    parent_fds: list[int] = []
    child_fds: list[int] = []
    try:
        # os.pipe() fds are close-on-exec; dup2 onto 0-3 gives the child exactly these four.
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        code_r, code_w = os.pipe()
        parent_fds += [stdin_w, stdout_r, stderr_r, code_w]
        child_fds += [stdin_r, stdout_w, stderr_w, code_r]
        pid = spawn_in_new_session(argv, workdir, child_fds)
    except OSError as exc:
        for fd in parent_fds + child_fds:
            os.close(fd)
        if host_dir:
            remove_tree(host_dir)
        raise SpawnError(f"cannot start {argv[0]}: {exc}") from exc
    for fd in child_fds:
        os.close(fd)
    for fd in parent_fds:
        os.set_blocking(fd, False)
    child = Child(
        pid=pid,
        workdir=host_dir,
        stdin=stdin_w,
        stdout=stdout_r,
        stderr=stderr_r,
        code=code_w,
        inherited_peak=_own_peak_rss(),
        sandboxed=sandbox.enabled,
        interpreter_pid=pid,
    )
    child._open.update(parent_fds)
    try:
        child.pidfd = os.pidfd_open(pid)
        child._open.add(child.pidfd)
    except (AttributeError, OSError):
        child.pidfd = None  # no pidfd (macOS, old kernels): the pool polls instead
    return child


def _own_peak_rss() -> int:
    """The server's own peak RSS in bytes: what a posix_spawned child's ru_maxrss starts from."""
    return maxrss_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def remove_tree(path: str) -> None:
    """Delete a run's directory even if the run took away its own permissions."""

    def make_writable_and_retry(_function: object, target: str, _error: object) -> None:
        # The run may have taken the permissions away from directories it created.
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(target), stat.S_IRWXU)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, stat.S_IRWXU)
                _rmtree(target, make_writable_and_retry)
            else:
                os.unlink(target)

    if os.path.islink(path):
        # The run replaced its directory by a link: remove the link, never what it points to.
        os.unlink(path)
    elif os.path.isdir(path):
        with contextlib.suppress(OSError):
            os.chmod(path, stat.S_IRWXU)
        _rmtree(path, make_writable_and_retry)


def _rmtree(path: str, on_error: Callable[[object, str, object], None]) -> None:
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=on_error)
    else:
        shutil.rmtree(path, onerror=on_error)
