"""The pool: admission, a supply of ready interpreters, a driver per run, and the stray sweep, together.

It knows nothing of MCP. A `RunRequest` goes in, a `RunResult` comes out; infrastructure faults
raise. Every path out of a run (result, error, cancellation) kills the run's process group, reaps
it, closes its fds and deletes its working directory, in a shielded scope.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from runner.config import Config
from runner.execution.admission import Admission
from runner.execution.driver import KILL_GRACE, ProgressCallback, RunDriver
from runner.execution.supplies import Supplies
from runner.execution.supply import InterpreterSupply
from runner.execution.sweep import StraySweeper
from runner.execution.teardown import Teardowns
from runner.logs import get_logger, log_event
from runner.outcome import PoolState, RunRequest, RunResult, Status
from runner.processes.child import Child, process_exists
from runner.processes.limits import Limits, count_tasks_of_uid, limits_for
from runner.processes.procctl import set_child_subreaper
from runner.processes.sandbox import Sandbox, choose_sandbox
from runner.processes.source import uses_fork_server, uses_preloading
from runner.processes.spawn import remove_tree

# How long a run answered before its exit may take to be gone before its teardown gives up on it.
TEARDOWN_PATIENCE = 30.0


class Pool:
    """Runs code in one-shot interpreters, at most `max_concurrent` at a time, FIFO beyond that."""

    def __init__(
        self,
        config: Config,
        limits: Limits,
        supplies: Supplies,
        driver: RunDriver,
        sweeper: StraySweeper | None,
        logger: logging.Logger,
        teardowns: Teardowns,
    ) -> None:
        self._config = config
        self._limits = limits
        self._admission = Admission(config.max_concurrent, config.max_queue)
        self._supplies = supplies
        self._driver = driver
        self._sweeper = sweeper
        self._log = logger
        self._teardowns = teardowns

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
        limits = limits_for(
            config, count_tasks_of_uid(), sandbox.helpers_per_run, 2 if uses_preloading(config, sandbox) else 1
        )
        _log_start(logger, config, sandbox, limits, base_dir)
        reaping = reap_strays and set_child_subreaper(True)
        if reap_strays and not reaping:
            log_event(logger, logging.WARNING, "cannot become a child subreaper; a run's daemons may outlive it")
        supplies: Supplies | None = None
        sweeper: StraySweeper | None = None
        try:
            async with Supplies.opened(config, base_dir, limits, sandbox, logger) as supplies:
                if reaping:
                    sweeper = StraySweeper(supplies.known_pids, sandbox.enabled, logger)
                driver = RunDriver(config, logger, supplies.unresponsive)
                async with anyio.create_task_group() as tg:
                    if config.pool_size:
                        supplies.start_refilling(tg)
                    if sweeper is not None:
                        tg.start_soon(sweeper.sweep_forever)
                    try:
                        teardowns = Teardowns(tg, runs_share_files=not sandbox.enabled)
                        yield cls(config, limits, supplies, driver, sweeper, logger, teardowns)
                    finally:
                        tg.cancel_scope.cancel()
                        # Pooled interpreters go before the sources (zygotes) that made them.
                        with anyio.CancelScope(shield=True):
                            await supplies.shutdown()
        finally:
            with anyio.CancelScope(shield=True):
                if supplies is not None:
                    await supplies.shutdown()
                if sweeper is not None:
                    await sweeper.sweep()
                if reaping:
                    set_child_subreaper(False)
                await anyio.to_thread.run_sync(remove_tree, base_dir)

    @property
    def waiting(self) -> int:
        """Calls queued for a free slot."""
        return self._admission.waiting

    @property
    def running(self) -> int:
        """Runs in progress."""
        return self._supplies.in_use

    @property
    def ready(self) -> int:
        """Pre-spawned interpreters waiting for code."""
        return self._supplies.ready

    @property
    def limits(self) -> Limits:
        """The rlimits every run gets."""
        return self._limits

    def state(self) -> PoolState:
        """Its numbers at this moment, taken together."""
        return PoolState(self.running, self.waiting, self.ready, self._admission.queue_full, self._supplies.restarts)

    async def run(self, request: RunRequest, on_progress: ProgressCallback | None = None) -> RunResult:
        """Run one request to its end and return the outcome; raises only for cancellation.

        `on_progress`, if given, is called about once a second while the code runs.
        """
        queued = anyio.current_time()
        if not await self._admission.enter():
            config = self._config
            message = (
                f"server busy: {config.max_concurrent} runs in progress and {self._admission.waiting} waiting "
                f"(RUNNER_MAX_QUEUE={config.max_queue}); retry later"
            )
            log_event(self._log, logging.WARNING, "call rejected", request.request_id, reason="busy")
            return RunResult(request.request_id, Status.BUSY, message)
        handed_on = False
        try:
            result, supply, child = await self._run_in_slot(request, anyio.current_time() - queued, on_progress)
            if child.reaped:
                with anyio.CancelScope(shield=True):
                    await self._destroy(supply, child)
            else:
                # A run that told its own end is answered now and torn down after, still in its slot.
                supply.release(child)
                self._teardowns.start(lambda: self._tear_down(supply, child))
                handed_on = True
            return result
        finally:
            if not handed_on:
                self._admission.leave()

    async def _run_in_slot(
        self, request: RunRequest, queue_wait: float, on_progress: ProgressCallback | None
    ) -> tuple[RunResult, InterpreterSupply, Child]:
        await self._teardowns.before_next_run()
        supply = self._supplies.for_code(request.code)
        child = await supply.take()
        try:
            if self._sweeper is not None:
                await self._sweeper.settle()
            log_event(self._log, logging.INFO, "run started", request.request_id, pid=child.pid, queue_wait=queue_wait)
            result = await self._driver.drive(child, request, queue_wait, on_progress)
        except BaseException as exc:
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                log_event(self._log, logging.INFO, "run finished", request.request_id, status=Status.CANCELLED.value)
            with anyio.CancelScope(shield=True):
                await self._destroy(supply, child)
            raise
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
        return result, supply, child

    async def _destroy(self, supply: InterpreterSupply, child: Child) -> None:
        await supply.destroy(child)
        if self._sweeper is not None:
            self._sweeper.wanted()

    async def _tear_down(self, supply: InterpreterSupply, child: Child) -> None:
        """Kill (again), reap, close and delete after the answer; then the slot is free. A run slow to
        exit is waited for; one gone but unreported means its zygote is stuck, and it is replaced. A
        fault here is logged, and the run destroyed all the same."""
        try:
            deadline = anyio.current_time() + TEARDOWN_PATIENCE
            seen_gone = False
            while child.still_running() and anyio.current_time() < deadline:
                with anyio.move_on_after(KILL_GRACE):
                    await child.wait_exit()
                # Gone, and still unreported a whole grace later (not just between the zygote's
                # reaping and its report): the zygote is stuck.
                if child.still_running() and not process_exists(child.pid):
                    if seen_gone:
                        await self._supplies.unresponsive(child)
                    seen_gone = True
        except Exception:
            self._log.error("teardown after the answer failed", exc_info=True, extra={"request_id": "-", "fields": {}})
        finally:
            try:
                await self._destroy(supply, child)
            finally:
                self._admission.leave()

    async def quiesced(self) -> None:
        """Return once every run answered so far is torn down (reaped, closed, deleted)."""
        await self._teardowns.wait_for_earlier()


def _log_start(logger: logging.Logger, config: Config, sandbox: Sandbox, limits: Limits, base_dir: str) -> None:
    log_event(
        logger,
        logging.INFO,
        "pool starting",
        python=config.python,
        pool_size=config.pool_size,
        max_concurrent=config.max_concurrent,
        rlimit_nproc=limits.nproc,
        work_dir=base_dir,
        spawn_mode="fork-server" if uses_fork_server(config, sandbox) else "posix-spawn",
        preload=",".join(config.preload) if uses_preloading(config, sandbox) else "",
        sandbox=sandbox.kind,
        sandbox_reason=sandbox.reason,
    )
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        log_event(
            logger,
            logging.WARNING,
            "running as root: RLIMIT_NPROC is not enforced, a fork loop is stopped only by the timeout",
        )
