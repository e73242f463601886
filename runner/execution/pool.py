"""The pool: pre-spawned interpreters, the concurrency gate, and driving one run to its end.

It knows nothing of MCP. A `RunRequest` goes in, a `RunResult` comes out; infrastructure faults
raise. Every path out of a run (result, error, cancellation) kills the run's process group, reaps
it, closes its fds and deletes its working directory, in a shielded scope.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio

from runner.config import Config
from runner.errors import SpawnError
from runner.execution.capture import OutputCap, keep_bytes_for, render_stream
from runner.execution.classify import ProcessEnd, RunLimits, classify
from runner.fdio import write_all
from runner.logs import get_logger, log_event
from runner.outcome import Progress, RunRequest, RunResult, Status
from runner.processes.bootstrap import READY_PREFIX, frame_code
from runner.processes.child import Child
from runner.processes.forkserver import ForkedChild, ForkServer
from runner.processes.limits import Limits, count_tasks_of_uid, limits_for
from runner.processes.procctl import children_of_self, command_line, is_zombie, reap_if_exited, set_child_subreaper
from runner.processes.sandbox import Sandbox, choose_sandbox
from runner.processes.spawn import remove_tree, spawn_child

CHUNK = 64 * 1024
# How long output may still drain after the run's group is dead: only a process that left the
# group (setsid) can hold a pipe that long, and it does not get to keep the call waiting.
EXIT_GRACE = 0.25
STARTUP_TIMEOUT = 15.0
REAP_TIMEOUT = 5.0
KILL_GRACE = 2.0
USAGE_SAMPLE_INTERVAL = 0.01
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROGRESS_INTERVAL = 1.0
REFILL_DELAY = 0.01
STRAY_SWEEP_INTERVAL = 1.0
# Runs ending back to back share a sweep: at most one per this many seconds (each reads /proc).
STRAY_SWEEP_MIN_GAP = 0.05
STRAY_ROUNDS = 10
STRAY_GRACE = 0.02
PROGRESS_LINE_CHARS = 200

ProgressCallback = Callable[[Progress], Awaitable[None]]


@dataclass
class _Drive:
    """Mutable state of one run while it is being driven."""

    budget: int
    child: Child
    written: int = 0
    output_exceeded: bool = False
    pumps_left: int = 2
    pumps_done: anyio.Event = field(default_factory=anyio.Event)
    sampled_peak: int | None = None
    sampled_cpu: float = 0.0

    def count(self, n: int) -> None:
        self.written += n
        if self.written > self.budget and not self.output_exceeded:
            self.output_exceeded = True
            self.child.kill_group()

    def pump_finished(self) -> None:
        self.pumps_left -= 1
        if self.pumps_left == 0:
            self.pumps_done.set()


class Pool:
    """Runs code in one-shot interpreters, at most `max_concurrent` at a time, FIFO beyond that."""

    def __init__(self, config: Config, base_dir: str, limits: Limits, sandbox: Sandbox, logger: logging.Logger) -> None:
        self._config = config
        self._sandbox = sandbox
        self._forkserver: ForkServer | None = None
        self._base_dir = base_dir
        self._limits = limits
        self._log = logger
        self._slots = anyio.Semaphore(config.max_concurrent)
        self._waiting = 0
        self._ready: deque[Child] = deque()
        self._live: set[Child] = set()
        self._wanted = anyio.Event()
        self._refused_reported: set[str] = set()
        self._ours: set[int] = set()  # pids of every interpreter spawned and not yet reaped
        self._sweep_wanted = anyio.Event()
        self._keep_bytes = keep_bytes_for(config.max_output_chars)

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        config: Config,
        logger: logging.Logger | None = None,
        *,
        reap_strays: bool = False,
        sandbox: Sandbox | None = None,
    ) -> AsyncIterator[Pool]:
        """Start a pool (its interpreters fill in the background); on exit, kill and remove everything.

        With `reap_strays` (the server's own process, never a library caller's) this process becomes a
        child subreaper: whatever a run leaves behind, a setsid daemon included, is re-parented to
        us, and every child that is not a run or pooled interpreter is killed and reaped.
        Without `sandbox`, it is chosen from the configuration (`ConfigError` if bwrap was demanded
        and cannot work).
        """
        logger = logger or get_logger()
        sandbox = sandbox or choose_sandbox(config)
        base_dir = tempfile.mkdtemp(prefix="python-runner-", dir=config.work_dir)
        limits = limits_for(config, count_tasks_of_uid())
        pool = cls(config, base_dir, limits, sandbox, logger)
        fork_server = config.spawn_mode != "posix-spawn" and not sandbox.enabled
        log_event(
            logger,
            logging.INFO,
            "pool starting",
            python=config.python,
            pool_size=config.pool_size,
            max_concurrent=config.max_concurrent,
            rlimit_nproc=limits.nproc,
            work_dir=base_dir,
            spawn_mode="fork-server" if fork_server else "posix-spawn",
            sandbox=sandbox.kind,
            sandbox_reason=sandbox.reason,
        )
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            log_event(
                logger,
                logging.WARNING,
                "running as root: RLIMIT_NPROC is not enforced, a fork loop is stopped only by the timeout",
            )
        reaping = reap_strays and set_child_subreaper(True)
        if reap_strays and not reaping:
            log_event(logger, logging.WARNING, "cannot become a child subreaper; a run's daemons may outlive it")
        try:
            async with contextlib.AsyncExitStack() as stack:
                if fork_server:
                    forkserver = ForkServer.running(config, base_dir, limits, logger)
                    pool._forkserver = await stack.enter_async_context(forkserver)
                async with anyio.create_task_group() as tg:
                    if config.pool_size:
                        tg.start_soon(pool._refill_forever)
                    if reaping:
                        tg.start_soon(pool._reap_strays_forever)
                    try:
                        yield pool
                    finally:
                        tg.cancel_scope.cancel()
                        # Pooled interpreters go before the fork server that made them.
                        with anyio.CancelScope(shield=True):
                            await pool._shutdown()
        finally:
            with anyio.CancelScope(shield=True):
                await pool._shutdown()
                if reaping:
                    await pool._reap_strays()
                    set_child_subreaper(False)
                await anyio.to_thread.run_sync(remove_tree, base_dir)

    @property
    def waiting(self) -> int:
        """Calls queued for a free slot."""
        return self._waiting

    @property
    def running(self) -> int:
        """Runs in progress."""
        return len(self._live)

    @property
    def ready(self) -> int:
        """Pre-spawned interpreters waiting for code."""
        return len(self._ready)

    @property
    def limits(self) -> Limits:
        """The rlimits every run gets."""
        return self._limits

    def run_limits(self, timeout: float) -> RunLimits:
        """The limits a run with this timeout is held to."""
        c = self._config
        return RunLimits(timeout, c.max_cpu_seconds, c.max_memory_mb, c.max_file_size_mb, c.max_output_bytes)

    async def run(self, request: RunRequest, on_progress: ProgressCallback | None = None) -> RunResult:
        """Run one request to its end and return the outcome; raises only for cancellation.

        `on_progress`, if given, is called about once a second while the code runs.
        """
        config = self._config
        queued = anyio.current_time()
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            if config.max_queue and self._waiting >= config.max_queue:
                message = (
                    f"server busy: {config.max_concurrent} runs in progress and {self._waiting} waiting "
                    f"(RUNNER_MAX_QUEUE={config.max_queue}); retry later"
                )
                log_event(self._log, logging.WARNING, "call rejected", request.request_id, reason="busy")
                return RunResult(request.request_id, Status.BUSY, message)
            self._waiting += 1
            try:
                # anyio hands a released slot straight to the longest waiter: FIFO.
                await self._slots.acquire()
            finally:
                self._waiting -= 1
        try:
            return await self._run_in_slot(request, anyio.current_time() - queued, on_progress)
        finally:
            self._slots.release()

    async def _run_in_slot(
        self, request: RunRequest, queue_wait: float, on_progress: ProgressCallback | None
    ) -> RunResult:
        child = await self._take_child()
        log_event(self._log, logging.INFO, "run started", request.request_id, pid=child.pid, queue_wait=queue_wait)
        self._live.add(child)
        try:
            result = await self._drive(child, request, queue_wait, on_progress)
        except anyio.get_cancelled_exc_class():
            log_event(self._log, logging.INFO, "run finished", request.request_id, status=Status.CANCELLED.value)
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await self._destroy(child)
                self._live.discard(child)
                self._sweep_wanted.set()
                self._wanted.set()
        log_event(
            self._log,
            logging.INFO,
            "run finished",
            request.request_id,
            status=result.status.value,
            exit_code=result.exit_code,
            duration=result.duration,
            cpu=result.cpu_seconds,
            peak_memory=result.peak_memory_bytes,
            stdout_bytes=result.stdout.total_bytes,
            stderr_bytes=result.stderr.total_bytes,
        )
        return result

    async def _drive(
        self, child: Child, request: RunRequest, queue_wait: float, on_progress: ProgressCallback | None
    ) -> RunResult:
        out, err = OutputCap(self._keep_bytes), OutputCap(self._keep_bytes)
        state = _Drive(budget=self._config.max_output_bytes, child=child)
        # Sampling is needed only where wait4 cannot tell (see _wait_sampling); then one sample is
        # taken while the interpreter still waits for its code, so a run that ends before the
        # first interval (a millisecond is enough) still gets a number. A forked run's wait4,
        # taken by the zygote, is exact.
        sampling = child.sandboxed or child.inherited_peak > 0
        if sampling:
            _note_usage(child, state)
        async with anyio.create_task_group() as tg:
            with contextlib.suppress(BrokenPipeError):
                # A run that died before reading all its code (say, out of memory) ends below
                # like any other, with what it printed.
                await write_all(child.code, frame_code(request.code.encode("utf-8")))
            child.close_fd(child.code)
            started = anyio.current_time()
            if request.stdin:
                tg.start_soon(self._feed_stdin, child, request.stdin.encode("utf-8"))
            else:
                child.close_fd(child.stdin)  # EOF at once; no task needed
            tg.start_soon(_pump, child.stdout, out, state)
            tg.start_soon(_pump, child.stderr, err, state)
            if on_progress is not None:
                tg.start_soon(self._report_progress, request, started, out, err, on_progress)
            timed_out = not await _wait_sampling(child, state, started + request.timeout, sampling=sampling)
            if timed_out:
                child.kill_group()
                await self._wait_after_kill(child)
            duration = anyio.current_time() - started
            # Whatever the run left in its group dies with it, before the leader is reaped.
            child.kill_group()
            returncode, cpu, reaped_peak = self._reap(child)
            with anyio.move_on_after(EXIT_GRACE):
                await state.pumps_done.wait()
            if request.stdin or on_progress is not None or not state.pumps_done.is_set():
                tg.cancel_scope.cancel()  # not free (anyio formats the task's repr): only if needed
        peak = reaped_peak if reaped_peak > child.inherited_peak else state.sampled_peak
        cpu = max(cpu, state.sampled_cpu)
        end = ProcessEnd(returncode, cpu, peak or 0, timed_out=timed_out, output_exceeded=state.output_exceeded)
        status, message = classify(end, err.parts()[1] or err.parts()[0], self.run_limits(request.timeout))
        max_chars = self._config.max_output_chars
        return RunResult(
            request_id=request.request_id,
            status=status,
            message=message,
            exit_code=returncode,
            stdout=render_stream(out, max_chars),
            stderr=render_stream(err, max_chars),
            duration=duration,
            cpu_seconds=cpu,
            peak_memory_bytes=peak,
            queue_wait=queue_wait,
        )

    async def _wait_after_kill(self, child: Child) -> None:
        """Wait for a SIGKILLed run to be gone; a zygote that stopped reporting is replaced."""
        with anyio.move_on_after(KILL_GRACE):
            await child.wait_exit()
        if not child.still_running():
            return
        if isinstance(child, ForkedChild) and self._forkserver is not None:
            await self._forkserver.abandon()  # ends its runs, this one included
        else:
            raise SpawnError(f"process {child.pid} did not end after SIGKILL")

    async def _report_progress(
        self, request: RunRequest, started: float, out: OutputCap, err: OutputCap, on_progress: ProgressCallback
    ) -> None:
        while True:
            await anyio.sleep(PROGRESS_INTERVAL)
            progress = Progress(
                elapsed=anyio.current_time() - started,
                timeout=request.timeout,
                stdout_bytes=out.total,
                stderr_bytes=err.total,
                last_line=(err if err.total and not out.total else out).last_line(PROGRESS_LINE_CHARS),
            )
            try:
                await on_progress(progress)
            except Exception:
                # A client that cannot take notifications still gets its result.
                self._log.warning(
                    "progress report failed; no more for this run",
                    exc_info=True,
                    extra={"request_id": request.request_id, "fields": {}},
                )
                return

    @staticmethod
    async def _feed_stdin(child: Child, data: bytes) -> None:
        try:
            await write_all(child.stdin, data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the run closed its stdin or ended: what it did not read is not our problem
        finally:
            child.close_fd(child.stdin)

    async def _take_child(self) -> Child:
        while self._ready:
            child = self._ready.popleft()
            self._wanted.set()
            if child.still_running():
                return child
            with anyio.CancelScope(shield=True):
                await self._destroy(child)  # it is no longer in the pool: nobody else would
        return await self._spawn_ready()

    async def _spawn_ready(self) -> Child:
        """Spawn an interpreter and wait until its bootstrap has applied the limits."""
        if self._forkserver is not None:
            child: Child = await self._forkserver.fork()
        else:
            child = spawn_child(self._config.python, self._base_dir, self._limits, self._sandbox)
            self._ours.add(child.pid)
        try:
            with anyio.fail_after(STARTUP_TIMEOUT):
                line = await _read_line(child.stdout)
            if not line.startswith(READY_PREFIX):
                raise SpawnError(f"interpreter {self._config.python} did not start: {_pending(child.stderr)!r}")
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self._destroy(child)
            if isinstance(exc, TimeoutError):
                raise SpawnError(f"interpreter {self._config.python} not ready after {STARTUP_TIMEOUT:g}s") from exc
            raise
        child.find_interpreter()
        refused = line[len(READY_PREFIX) :].decode().split()
        child.refused_limits = tuple(",".join(refused).split(",")) if refused else ()
        for name in set(child.refused_limits) - self._refused_reported:
            self._refused_reported.add(name)
            log_event(self._log, logging.WARNING, "limit not enforced on this platform", limit=name)
        return child

    async def _refill_forever(self) -> None:
        failures = 0
        while True:
            while len(self._ready) < self._config.pool_size:
                try:
                    child = await self._spawn_ready()
                except SpawnError as exc:
                    failures += 1
                    log_event(self._log, logging.ERROR, "pool refill failed", error=str(exc), failures=failures)
                    await anyio.sleep(min(30.0, 0.1 * 2**failures))
                    continue
                failures = 0
                self._ready.append(child)
            self._wanted = anyio.Event()
            await self._wanted.wait()
            if self._forkserver is not None and self._ready and self._live:
                # A fork while a run is in progress makes the zygote late to report that run's
                # exit: wait for a run to end, but not past REFILL_DELAY (a long run must not
                # leave the pool short for a burst).
                self._wanted = anyio.Event()
                with anyio.move_on_after(REFILL_DELAY):
                    await self._wanted.wait()

    async def _destroy(self, child: Child) -> None:
        """Kill, reap, close and delete; safe to call more than once."""
        if not child.reaped:
            child.kill_group()
            with anyio.move_on_after(REAP_TIMEOUT):
                await child.wait_exit()
            if child.still_running():
                log_event(self._log, logging.ERROR, "process did not die after SIGKILL", pid=child.pid)
            else:
                self._reap(child)
        child.close_all()
        if child.workdir is not None:
            try:
                os.rmdir(child.workdir)  # most runs leave their directory empty: no thread needed
            except OSError:
                await anyio.to_thread.run_sync(remove_tree, child.workdir)

    def _reap(self, child: Child) -> tuple[int, float, int]:
        self._ours.discard(child.pid)
        return child.reap()

    async def _reap_strays_forever(self) -> None:
        while True:
            with anyio.move_on_after(STRAY_SWEEP_INTERVAL):
                await self._sweep_wanted.wait()
            self._sweep_wanted = anyio.Event()
            await self._reap_strays()
            await anyio.sleep(STRAY_SWEEP_MIN_GAP)

    async def _reap_strays(self) -> None:
        """Kill and reap every child of ours that is neither a run nor a pooled interpreter.

        Such children are orphans a run left behind and the kernel handed to us as subreaper. A
        killed stray's own children come to us next, hence the rounds.
        """
        for _ in range(STRAY_ROUNDS):
            zygote = self._forkserver.zygote_pid if self._forkserver is not None else None
            strays = [pid for pid in children_of_self() if pid not in self._ours and pid != zygote]
            if not strays:
                return
            for pid in strays:
                if is_zombie(pid):
                    continue
                if not self._sandbox_own(pid):
                    log_event(
                        self._log,
                        logging.WARNING,
                        "killing a process a run left behind",
                        pid=pid,
                        command=command_line(pid),
                    )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await anyio.sleep(STRAY_GRACE)
            for pid in strays:
                reap_if_exited(pid)

    def _sandbox_own(self, pid: int) -> bool:
        """True for a process of a sandbox being torn down: its namespace init or the interpreter.

        When a bwrap process is killed, those can outlive it for a moment and reach us as orphans.
        Nothing a sandboxed run leaves behind can: its namespace's init inherits it. So in sandbox
        mode an orphan from another PID namespace (or one already exiting) is the run itself, and
        is killed without a warning.
        """
        if not self._sandbox.enabled:
            return False
        try:
            return os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
        except (FileNotFoundError, ProcessLookupError):
            return True  # exiting: its namespaces are already gone
        except OSError:
            return False

    async def _shutdown(self) -> None:
        for child in self._live:
            child.kill_group()  # their own runs reap them; this makes sure they die now
        while self._ready:
            await self._destroy(self._ready.popleft())


async def _pump(fd: int, cap: OutputCap, state: _Drive) -> None:
    """Read a stream in chunks into its cap until EOF or until the run blew the output budget."""
    try:
        while not state.output_exceeded:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                continue
            if not chunk:
                return
            cap.feed(chunk)
            state.count(len(chunk))
    finally:
        state.pump_finished()


async def _read_line(fd: int) -> bytes:
    """Read the interpreter's ready line: up to and including the first newline.

    Nothing can follow it before the code is sent, and the bootstrap writes it with one write()
    of less than PIPE_BUF bytes, so it arrives whole: one read, not one per byte. A longer line
    (not ours) is read to its newline all the same, and nothing after the newline is kept.
    """
    line = bytearray()
    while b"\n" not in line:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            continue
        if not chunk:
            return bytes(line)
        line += chunk
    return bytes(line.partition(b"\n")[0]) + b"\n"


def _pending(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""


async def _wait_sampling(child: Child, state: _Drive, deadline: float, *, sampling: bool) -> bool:
    """Wait for the run to exit, sampling its usage every interval if asked; False at the deadline.

    Sampling here rather than in a task of its own saves a task per run: a run that ends within
    the first interval costs one timer and no sample.

    wait4's ru_maxrss cannot be trusted on its own: posix_spawn starts the child in the server's
    address space (vfork), and the kernel carries that address space's high-water mark across exec,
    so every run would report at least the server's own size. VmHWM belongs to the run's own
    address space. A run whose peak tops that size is measured exactly by wait4 instead. In a
    bwrap sandbox wait4 sees no CPU time at all (bwrap does not reap its namespace's init), so the
    interpreter's own counters are sampled too. A forked run needs neither: it has its own address
    space from the fork on (its peak counts the zygote's pages it shares, as VmHWM would), and the
    zygote's wait4 reports both exactly.
    """
    while True:
        remaining = deadline - anyio.current_time()
        if remaining <= 0:
            return False
        with anyio.move_on_after(min(USAGE_SAMPLE_INTERVAL, remaining) if sampling else remaining) as waiting:
            await child.wait_exit()
        if not waiting.cancelled_caught:
            return True
        if sampling:
            sampling = _note_usage(child, state)  # False once there is nothing left to sample


def _note_usage(child: Child, state: _Drive) -> bool:
    """Record the run's current VmHWM (and in a sandbox its CPU seconds); False once it is gone.

    Gone: exited, a zombie, or no procfs. Outside a sandbox wait4 reports the CPU time exactly,
    so /proc/PID/stat is read only in one.
    """
    pid = child.interpreter_pid
    try:
        if child.sandboxed:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            # utime, stime, cutime, cstime are fields 14-17 of stat; fields[0] here is field 3.
            state.sampled_cpu = sum(int(tick) for tick in fields[11:15]) / CLOCK_TICKS
        with open(f"/proc/{pid}/status", "rb") as status:
            hwm = next((line for line in status if line.startswith(b"VmHWM:")), None)
    except (OSError, IndexError):
        return False
    if hwm is None:
        return False  # a zombie: its address space is gone
    state.sampled_peak = max(int(hwm.split()[1]) * 1024, state.sampled_peak or 0)
    return True
