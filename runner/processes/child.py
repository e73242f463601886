"""The handle the pool keeps for one interpreter: its pid, the server's pipe ends, and its end.

Its owner is the source that made it (`runner.processes.spawn`, `forkserver`, `keeper`): the fields
are written there, when it is made and when its source hears of its end, and by its own methods;
everyone else reads them, and acts on it through its methods (`test_layout` holds to that)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from runner.inrun.cgroups import RunCgroup
from runner.inrun.wire import LISTENER_MESSAGE
from runner.processes.isolation import exit_code_of_sandboxed

POLL_INTERVAL = 0.005
# How long an interpreter (or a zygote) may take to say it is ready, and a killed one to be reaped.
STARTUP_TIMEOUT = 15.0
REAP_TIMEOUT = 5.0


@dataclass(eq=False)
class Child:
    """One interpreter: its pid (also its session and process group id) and the server's pipe ends."""

    # The server is its parent and reaps it (a forked run's parent is the zygote).
    server_is_parent = True

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
    wrapped: bool = False  # spawned inside a wrapper (bwrap): its exit status and pids are the wrapper's
    interpreter_pid: int = 0  # host pid of the interpreter itself (differs from pid inside a sandbox)
    sandbox_init_pid: int = 0  # host pid of the sandbox's PID 1 (bwrap's reaper), 0 outside a sandbox
    # What its source frees once it is reaped, when nothing of it is left (the uid it was lent).
    after_reap: list[Callable[[], None]] = field(default_factory=list)
    # The run's own cgroup where the server made it (bubblewrap's runs), and the OOM kills in it where
    # a zygote made it and reported them (`ForkedChild`).
    cgroup: RunCgroup | None = None
    oom_kills: int = 0
    # Egress (RUNNER_EGRESS_ALLOW): the listening socket on the run's loopback it handed over before its
    # ready line (`receive_listener`), until its run's proxy takes it (`take_listener`).
    egress_listener: socket.socket | None = None
    _open: set[int] = field(default_factory=set)
    # A session's anchor whose zygote watches its cgroup: set at each OOM in it the zygote tells.
    _oom_noticed: anyio.Event = field(default_factory=anyio.Event)

    def log_fields(self) -> dict[str, int]:
        """What names its process in a call's log lines (`run started`): its pid."""
        return {"pid": self.pid}

    def note_oom(self) -> None:
        """An OOM in this (anchor's) cgroup, as its zygote saw it."""
        self._oom_noticed.set()

    async def next_oom(self) -> None:
        """Return at the next OOM in this (anchor's) cgroup its zygote tells (`note_oom`)."""
        self._oom_noticed = anyio.Event()
        await self._oom_noticed.wait()

    def kill_for_oom(self) -> None:
        """An OOM in the cgroup it runs in ends it: counted (its end is then `memory_limit`), and its
        group killed."""
        self.oom_kills += 1
        self.kill_group()

    def whole_run_oom_kills(self) -> int:
        """OOM kills in the run's cgroup (its whole tree over its memory budget); 0 without one."""
        if self.cgroup is not None and self.cgroup.dirs:
            with contextlib.suppress(OSError):
                self.oom_kills = max(self.oom_kills, self.cgroup.oom_kills())
        return self.oom_kills

    def remove_cgroup(self) -> bool:
        """Remove the run's cgroup (the server's), once no process is left in it; True once it is gone."""
        return self.cgroup is None or self.cgroup.remove()

    def is_open(self, fd: int) -> bool:
        """Whether `fd` is one of our ends of this child's pipes, not closed yet."""
        return fd in self._open

    def shut(self, fd: int) -> None:
        """Shut one of our socket ends both ways without closing it: the run's writes fail (EPIPE) and
        what waits on it here ends, and its number is not given to another file while a task may still
        wait on it (closed with the rest, at teardown)."""
        if fd in self._open:
            end = socket.socket(fileno=fd)
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the run's end is gone already
            finally:
                end.detach()

    def close_fd(self, fd: int) -> None:
        """Close one of our pipe ends once; later calls are no-ops."""
        if fd in self._open:
            self._open.discard(fd)
            os.close(fd)

    def close_streams(self) -> None:
        """Close every fd the server holds for this child but its pidfd (still needed to see it exit)."""
        for fd in list(self._open):
            if fd != self.pidfd:
                self.close_fd(fd)
        if self.egress_listener is not None:
            self.egress_listener.close()
            self.egress_listener = None

    def receive_listener(self) -> None:
        """Take the egress proxy's listener the interpreter handed over on its job socket before it said it
        was ready (`wire.hand_over_listener`); OSError, and nothing kept, unless it is one: a listening TCP
        socket over IPv4."""
        end = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, self.code)
        try:
            said, fds, _, _ = socket.recv_fds(end, len(LISTENER_MESSAGE), 2, socket.MSG_DONTWAIT)
        except BlockingIOError:
            said, fds = b"", []
        finally:
            end.detach()
        for fd in fds:
            os.set_inheritable(fd, False)  # no interpreter spawned later (bubblewrap) holds it
        received = [socket.socket(fileno=fd) for fd in fds]
        listener = received[0] if said == LISTENER_MESSAGE and len(received) == 1 else None
        if (
            listener is None
            or listener.family != socket.AF_INET
            or listener.type != socket.SOCK_STREAM
            or not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        ):
            for one in received:
                one.close()
            raise OSError("the interpreter did not hand over the egress proxy's listener")
        self.egress_listener = listener

    def take_listener(self) -> socket.socket | None:
        """The egress listener, for one run's proxy to serve (and close): it is no longer this handle's."""
        listener, self.egress_listener = self.egress_listener, None
        return listener

    def listener_for_run(self) -> socket.socket | None:
        """What this run's egress proxy serves and then closes: the copy of the listener the interpreter
        handed over, taken (a session's call: a copy of its anchor's, `KeptCall`)."""
        return self.take_listener()

    def free_early(self) -> None:
        """What can go at once of a run that told its own end, before it is reaped: its pipes, and its
        directory if it left that empty (its teardown deletes what is in it, and the rest)."""
        self.close_streams()
        if self.workdir is not None:
            try:
                os.rmdir(self.workdir)
                self.workdir = None
            except OSError:
                pass

    def close_all(self) -> None:
        """Close every fd the server holds for this child, its egress listener too."""
        for fd in list(self._open):
            self.close_fd(fd)
        if self.egress_listener is not None:
            self.egress_listener.close()
            self.egress_listener = None

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
        for free in self.after_reap:
            free()
        self.after_reap.clear()
        code = os.waitstatus_to_exitcode(status)
        if self.wrapped:
            code = exit_code_of_sandboxed(code)
        return code, usage.ru_utime + usage.ru_stime, maxrss_bytes(usage.ru_maxrss)

    def said_ready(self, refused: tuple[str, ...]) -> None:
        """Its bootstrap said it is ready, with the limits this platform refused (`refused`): point
        `interpreter_pid` at the interpreter itself and `sandbox_init_pid` at the sandbox's init
        (inside a sandbox, bwrap -> its namespace's init -> the interpreter)."""
        self.refused_limits = refused
        if not self.wrapped:
            return
        found = [self.pid]
        for _ in range(2):
            try:
                with open(f"/proc/{found[-1]}/task/{found[-1]}/children", "rb") as children:
                    found.append(int(children.read().split()[0]))
            except (OSError, ValueError, IndexError):
                break
        self.interpreter_pid = found[-1]
        self.sandbox_init_pid = found[1] if len(found) == 3 else 0


def process_exists(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie has exited), from /proc (Linux);
    True where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")


def maxrss_bytes(ru_maxrss: int) -> int:
    """ru_maxrss in bytes: Linux reports KiB, macOS bytes."""
    return ru_maxrss if sys.platform == "darwin" else ru_maxrss * 1024
