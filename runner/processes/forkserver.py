"""Fork-server mode: one zygote interpreter forks every run, instead of a fresh interpreter per run.

The zygote (`zygote.py`, which imports the bootstrap) is started like any run interpreter
(posix_spawn, a minimal environment, a new session); it holds no secrets and imports nothing user
code could not see anyway. The server asks it for a run with one byte on a Unix socket; it answers with the run's pid
and the server's ends of the run's pipes (SCM_RIGHTS), and reports each run's exit status and
resource usage when it reaps it. A zygote that dies is restarted; runs it had die with it.

Trade-off, documented in docs/spawn-modes.md: runs of one zygote share its ASLR layout and its str hash
seed (PYTHONHASHSEED), which a fresh interpreter per run would not.
"""

from __future__ import annotations

import array
import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc

from runner.config import Config
from runner.errors import SpawnError
from runner.inrun.preload import PRELOAD_VARIABLE
from runner.logs import log_event
from runner.processes.cgroups import CgroupPlan, Parent
from runner.processes.child import REAP_TIMEOUT, STARTUP_TIMEOUT, Child, maxrss_bytes
from runner.processes.isolation import ZYGOTE, interpreter_argv
from runner.processes.limits import Limits
from runner.processes.procctl import parent_of
from runner.processes.spawn import run_environment, spawn_in_new_session

MAX_MESSAGE = 8192
# Importing numpy, pandas and pyplot takes 1-2 s on an idle machine, many times that on a busy one.
PRELOAD_TIMEOUT = 120.0
ZYGOTE_EXIT_GRACE = 0.5
ZYGOTE_DIED_STATUS = signal.SIGKILL  # what a run whose zygote died is reported to have died of


@dataclass(eq=False)
class ForkedChild(Child):
    """A run forked by the zygote: the zygote, not the server, is its parent and reaps it."""

    # If the zygote dies first, its runs are orphaned to the server: strays, for the sweep to reap.
    server_is_parent = False

    exited: anyio.Event = field(default_factory=anyio.Event)
    report: tuple[int, float, int] | None = None  # (returncode, cpu seconds, peak RSS bytes)
    zygote_pid: int = 0

    def kill_group(self) -> None:
        """SIGKILL the run's group, unless the zygote has reaped its leader (the pid may be reused).

        A run killed right after the fork may not have called setsid yet: then it has no group of
        its own (and nothing in one), so it is killed by pid.
        """
        if self.report is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                # Only while it is still the zygote's child: a reaped pid may already be someone else's.
                if parent_of(self.pid) == self.zygote_pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self.pid, signal.SIGKILL)
            except PermissionError:
                pass

    def still_running(self) -> bool:
        """True until the zygote reports the run's end."""
        return self.report is None

    async def wait_exit(self) -> None:
        """Return once the zygote has reported the run's end."""
        await self.exited.wait()

    def reap(self) -> tuple[int, float, int]:
        """The end the zygote reported."""
        assert self.report is not None, "reap() after wait_exit()"
        self.reaped = True
        return self.report

    def ended(self, returncode: int, cpu: float, peak: int, *, workdir_removed: bool = False) -> None:
        """Record the run's end (from the zygote's report, or because the zygote died)."""
        if self.report is None:
            self.report = (returncode, cpu, peak)
            if workdir_removed:
                self.workdir = None  # the zygote removed it, empty: nothing left to delete
            self.exited.set()


class ForkServer:
    """The server's side of the zygote: started on first use, asked for runs, replaced if it dies."""

    def __init__(
        self,
        config: Config,
        base_dir: str,
        limits: Limits,
        logger: logging.Logger,
        zygote_args: tuple[str, ...] = (),
        preload: tuple[str, ...] = (),
    ) -> None:
        self._config = config
        self.preload = preload
        self._zygote_args = zygote_args
        self._base_dir = base_dir
        self._limits = limits
        self._log = logger
        self._tg: anyio.abc.TaskGroup | None = None
        self._socket: socket.socket | None = None
        self._zygote: int | None = None
        self._runs: dict[int, ForkedChild] = {}
        self._replies: list[tuple[bytes, list[int]]] = []
        self._reply_ready = anyio.Event()
        self._lock = anyio.Lock()
        self._starts = 0
        self._parent: Parent | None = None

    # A fork while a run is in progress makes the zygote late to report that run's exit.
    forks_delay_runs = True

    @property
    def restarts(self) -> int:
        """Zygotes started after the first (each after one died or stopped answering)."""
        return max(0, self._starts - 1)

    @property
    def helper_pid(self) -> int | None:
        """The zygote's pid (a child of the server, not a run), if one is running."""
        return self._zygote

    @classmethod
    @asynccontextmanager
    async def running(
        cls,
        config: Config,
        base_dir: str,
        limits: Limits,
        logger: logging.Logger,
        zygote_args: tuple[str, ...] = (),
        preload: tuple[str, ...] = (),
        cgroups: CgroupPlan | None = None,
    ) -> AsyncIterator[ForkServer]:
        """A fork server (its runs in namespaces of their own if `zygote_args` says so, the plan's; its
        zygote importing `preload` before its first fork; each namespaced run in a cgroup of its own
        under a parent made here, where `cgroups` are planned); on exit the zygote and every run it
        forked are gone, and so are their cgroups."""
        parent = Parent(cgroups) if cgroups is not None and zygote_args else None
        args = (*zygote_args, *parent.tokens()) if parent is not None else zygote_args
        server = cls(config, base_dir, limits, logger, args, preload)
        server._parent = parent
        try:
            async with anyio.create_task_group() as tg:
                server._tg = tg
                try:
                    yield server
                finally:
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await server._stop()
                if parent is not None:
                    await anyio.to_thread.run_sync(parent.remove)

    async def start(self) -> ForkedChild:
        """A new run, forked by the zygote (not yet ready: it still applies its limits).

        Starts the zygote if there is none; raises `SpawnError` if that or the fork fails.
        """
        async with self._lock:
            if self._socket is None:
                await self._start_zygote()
            # Shielded (and bounded inside): a request the zygote has seen must have its answer
            # taken, or it would be handed to the next fork() and the forked run left behind. The
            # caller owns the run from here and kills it if it was cancelled meanwhile.
            with anyio.CancelScope(shield=True):
                message, fds = await self._request(b"F")
            zygote, sock = self._zygote, self._socket
        child = _forked_child(message, fds, zygote or 0)
        if sock is None:
            # The zygote died between answering and now: nobody will report this run's end.
            child.kill_group()
            child.ended(-ZYGOTE_DIED_STATUS, 0.0, 0)
        else:
            self._runs[child.pid] = child
        return child

    async def _request(
        self, request: bytes | None, retry: bool = True, patience: float = STARTUP_TIMEOUT
    ) -> tuple[bytes, list[int]]:
        """Send `request` (None: only wait) and wait for the zygote's next reply. If the zygote dies
        before it answers, a new one gets the request, once: whatever the dead one forked is killed."""
        assert self._socket is not None
        self._reply_ready, sock, died = anyio.Event(), self._socket, False
        if request is not None:
            try:
                sock.send(request)
            except OSError:
                died = True
        if not died:
            with anyio.move_on_after(patience) as waiting:
                await self._reply_ready.wait()
            if self._replies:
                return self._replies.pop(0)
            died = not waiting.cancelled_caught  # else stopped or wedged
        # A late answer must not go to the next request: start afresh.
        await self._zygote_gone(sock)
        if died and retry and request is not None:
            await self._start_zygote()
            return await self._request(request, retry=False)
        raise SpawnError("the fork server is gone" if died else "the fork server did not answer; replaced")

    async def unresponsive(self, child: Child) -> None:
        """`child` did not end after SIGKILL: its zygote stopped reporting, so it is replaced."""
        await self.abandon()  # ends its runs, this one included

    async def abandon(self) -> None:
        """Give up on the current zygote (it stopped reporting): its runs end as killed, a new one follows."""
        if self._socket is not None:
            log_event(self._log, logging.ERROR, "fork server stopped answering; replacing it", pid=self._zygote)
            await self._zygote_gone(self._socket)

    async def _start_zygote(self) -> None:
        pid, ours = _spawn_zygote(self._config, self._base_dir, self._limits, self._zygote_args, self.preload)
        self._starts += 1
        ours.setblocking(False)
        self._socket, self._zygote, self._replies = ours, pid, []
        assert self._tg is not None
        self._tg.start_soon(self._serve_replies, ours)
        try:
            message, _ = await self._request(None, patience=PRELOAD_TIMEOUT if self.preload else STARTUP_TIMEOUT)
            if message != b"R":
                said = message[2:].decode(errors="replace") if message.startswith(b"E ") else repr(message[:80])
                raise SpawnError(f"the fork server did not start: {said}")
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._zygote_gone(ours)
            raise
        log_event(self._log, logging.INFO, "fork server started", pid=pid, preload=",".join(self.preload))

    async def _serve_replies(self, sock: socket.socket) -> None:
        while True:
            try:
                await anyio.wait_readable(sock)
                message, ancillary, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(4 * array.array("i").itemsize))
            except BlockingIOError:
                continue
            except (OSError, anyio.ClosedResourceError):
                message, ancillary = b"", []
            if not message:
                await self._zygote_gone(sock)
                return
            fds = array.array("i")
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
            if message.startswith(b"X "):
                self._run_ended(message)
            elif message.startswith(b"O "):  # an OOM in a session anchor's cgroup
                anchor = self._runs.get(int(message[2:]) if message[2:].isdigit() else 0)
                if anchor is not None:
                    anchor.note_oom()
            else:
                self._replies.append((message, list(fds)))
                self._reply_ready.set()

    def mark_anchor(self, child: Child) -> None:
        """`child` is a session's anchor: an OOM in its cgroup is told (`Child.note_oom`) instead of
        ending it (v1; v2's memory.oom.group ends the whole cgroup whatever the zygote does)."""
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.send(b"A %d" % child.pid)

    async def oom_told(self, child: Child) -> None:
        """Return once every OOM the zygote has seen so far is told (a round trip after them)."""
        async with self._lock:
            if self._socket is not None:
                with anyio.CancelScope(shield=True):
                    await self._request(b"Y", retry=False)

    def _run_ended(self, message: bytes) -> None:
        _, pid, status, utime, stime, maxrss, removed, *more = message.split()
        child = self._runs.pop(int(pid), None)
        if child is not None:
            code = os.waitstatus_to_exitcode(int(status))
            cpu = float(utime) + float(stime)
            child.oom_kills = int(more[0]) if more else 0  # the run's cgroup's, where it has one
            child.ended(code, cpu, maxrss_bytes(int(maxrss)), workdir_removed=removed == b"1")

    async def _zygote_gone(self, sock: socket.socket) -> None:
        """That zygote is gone (or must go): its runs die too, and it is reaped."""
        if self._socket is not sock:
            return  # already handled
        self._socket = None
        with contextlib.suppress(OSError):
            # EOF tells a live zygote to kill every run and exit.
            sock.shutdown(socket.SHUT_RDWR)
        # Wake its reader before the fd number can be reused by the next zygote's socket.
        anyio.notify_closing(sock)
        sock.close()
        for child in self._runs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            child.ended(-ZYGOTE_DIED_STATUS, 0.0, 0)
        self._runs.clear()
        self._reply_ready.set()  # a request waiting for an answer gets none
        pid, self._zygote = self._zygote, None
        if pid is None:
            return
        # Shielded: whoever noticed the death first must finish reaping even if cancelled meanwhile.
        with anyio.CancelScope(shield=True):
            await _reap_zygote(pid)
            if self._parent is not None:  # the cgroups of a zygote that died with runs in flight
                await anyio.to_thread.run_sync(self._parent.remove_runs_of, pid)

    async def _stop(self) -> None:
        if self._socket is not None:
            await self._zygote_gone(self._socket)


def _spawn_zygote(
    config: Config, base_dir: str, limits: Limits, zygote_args: tuple[str, ...], preload: tuple[str, ...]
) -> tuple[int, socket.socket]:
    """Start the zygote like a run interpreter, with its end of a socket pair on fd 3."""
    environment = run_environment(config) | ({PRELOAD_VARIABLE: ",".join(preload)} if preload else {})
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    argv = [*interpreter_argv(config.python), ZYGOTE, base_dir, *limits.argv(), *zygote_args]
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        # Its stdin is /dev/null; what it might say goes to the server's own stderr (the log).
        pid = spawn_in_new_session(argv, base_dir, [null, 2, 2, theirs.fileno()], environment)
    except OSError as exc:
        ours.close()
        raise SpawnError(f"cannot start the fork server: {exc}") from exc
    finally:
        os.close(null)
        theirs.close()
    return pid, ours


def _forked_child(message: bytes, fds: list[int], zygote: int) -> ForkedChild:
    """The run the zygote's answer ``S <pid> [<workdir>]`` names, with the pipe ends it sent; SpawnError
    (the ends closed) for any other answer."""
    kind, _, rest = message.partition(b" ")
    if kind != b"S" or len(fds) != 4:
        for fd in fds:
            os.close(fd)
        raise SpawnError(f"the fork server could not fork: {rest.decode(errors='replace')}")
    pid_text, _, workdir = rest.partition(b" ")
    stdin, stdout, stderr, code = fds
    for fd in fds:
        os.set_blocking(fd, False)
    child = ForkedChild(
        pid=int(pid_text),
        workdir=workdir.decode() or None,  # none on disk: a namespaced run's is its own tmpfs
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        code=code,
        interpreter_pid=int(pid_text),
        zygote_pid=zygote,
    )
    child._open.update(fds)
    return child


async def _reap_zygote(pid: int) -> None:
    """Reap a zygote told to go; SIGKILL it if it has not gone within ZYGOTE_EXIT_GRACE."""
    with anyio.move_on_after(ZYGOTE_EXIT_GRACE) as scope:
        while not _reap_nowait(pid):  # noqa: ASYNC110  (no pidfd needed for a once-per-zygote wait)
            await anyio.sleep(0.005)
    if scope.cancelled_caught:
        # Stopped, or ignoring its socket: it goes by force.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with anyio.move_on_after(REAP_TIMEOUT):
            while not _reap_nowait(pid):  # noqa: ASYNC110
                await anyio.sleep(0.005)


def _reap_nowait(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done != 0
