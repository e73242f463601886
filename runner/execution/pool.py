"""The pool: admission, a supply of ready interpreters, the one driver, the teardowns, the sessions and
the stray sweep, made together and ended together; every call takes the one path through them
(`runner.execution.calls`).

It knows nothing of MCP. A `RunRequest` goes in, a `RunResult` comes out; infrastructure faults
raise. Every path out of a run (result, error, cancellation) ends its interpreter: its process group
killed, reaped, its fds closed and its working directory deleted, in a shielded scope (`teardown`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio

from runner.config import Config
from runner.config.disk import POOL_PREFIX
from runner.execution.admission import Admission
from runner.execution.calls import CallPath
from runner.execution.driver import ProgressCallback, RunDriver
from runner.execution.hints import Hints, LimitNotes, no_network_note
from runner.execution.kept import OutputStore
from runner.execution.leftovers import HeldDirectory, remove_dead
from runner.execution.provided import ProvidedPackages
from runner.execution.sessions import Sessions, anchor_pids, expire_forever
from runner.execution.slots import Slots
from runner.execution.supply import Supplies
from runner.execution.sweep import StraySweeper
from runner.execution.teardown import Teardowns
from runner.logs import get_logger, log_event
from runner.outcome import EgressGateway, KeptOutput, PoolState, RunRequest, RunResult, ToolGateway
from runner.processes.child import Child
from runner.processes.helpers import Helpers
from runner.processes.isolation import IsolationPlan, plan_isolation
from runner.processes.keeper import KeptCall
from runner.processes.limits import Limits, count_tasks_of_uid, limits_for
from runner.processes.procctl import children_of_self, is_child_subreaper, set_child_subreaper, tree_pss_bytes
from runner.processes.trees import remove_tree

# At most how often the open sessions' memory is measured, in seconds. Reading smaps_rollup makes the
# kernel walk every page table of every session process: over 100 ms for two sessions of 29 processes
# sharing 200 MB. A worker thread keeps that off the event loop, and the interval bounds what any
# number of scrapes (/metrics needs no token) can cost to one measurement per interval. Prometheus
# scrapes every 15 s or more (1 min by default), so each of its scrapes still gets a figure of its own.
SESSION_MEMORY_INTERVAL = 5.0


class SessionMemory:
    """The proportional set size of the open sessions' processes, measured in a worker thread at most
    once per `interval` and kept in between, one measurement at a time: never read on the event loop.

    `pids()` names the top process of each open session (read on the event loop: it is the sessions'
    table); `measure(pid)` is the blocking read of one session's processes (`tree_pss_bytes`)."""

    def __init__(
        self,
        pids: Callable[[], tuple[int, ...]],
        measure: Callable[[int], int],
        interval: float = SESSION_MEMORY_INTERVAL,
    ) -> None:
        self._pids = pids
        self._measure = measure
        self._interval = interval
        self.bytes = 0
        self._measured = -math.inf  # when the last measurement ended (anyio.current_time())
        self._measuring: anyio.Event | None = None  # set when the one in flight ends

    async def refresh(self) -> int:
        """`bytes`, measured again first if the last measurement is older than the interval; a caller
        that comes while one is in flight waits for that one."""
        if self._measuring is not None:
            await self._measuring.wait()
            return self.bytes
        pids = self._pids()
        if not pids:  # no session, nothing to read: 0 at once, and the first session is measured at once
            self.bytes, self._measured = 0, -math.inf
            return 0
        if anyio.current_time() - self._measured < self._interval:
            return self.bytes
        measuring = self._measuring = anyio.Event()
        try:
            self.bytes = await anyio.to_thread.run_sync(self._total, pids)
            self._measured = anyio.current_time()
        finally:
            self._measuring = None
            measuring.set()
        return self.bytes

    def _total(self, pids: tuple[int, ...]) -> int:
        return sum(map(self._measure, pids))


UNSANDBOXED = (
    "runs are NOT sandboxed: a run can read and write whatever this server's user can (its home directory, "
    "RUNNER_AUTH_TOKENS_FILE) and reach the network; only the process limits hold. For a sandbox: Linux with "
    "user namespaces or bubblewrap (apt install bubblewrap), or the Docker entry of mcp-config-examples/ "
    "(docs/security.md)"
)


class Pool:
    """Runs code in one-shot interpreters, at most `max_concurrent` at a time, FIFO beyond that."""

    def __init__(
        self,
        calls: CallPath,
        slots: Slots,
        supplies: Supplies,
        teardowns: Teardowns,
        sessions: Sessions,
        store: OutputStore,
        provided: ProvidedPackages | None,
        *,
        sandboxed: bool = True,
        run_directory_shows: tuple[str, ...] = (),
    ) -> None:
        self.sessions = sessions
        self._calls = calls
        self._sandboxed = sandboxed
        self._run_directory_shows = run_directory_shows
        self._store = store
        self._provided = provided
        self._slots = slots
        self._supplies = supplies
        self._teardowns = teardowns
        self._session_memory = SessionMemory(lambda: anchor_pids(sessions), tree_pss_bytes)

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        config: Config,
        logger: logging.Logger | None = None,
        *,
        reap_strays: bool = False,
        plan: IsolationPlan | None = None,
        caller_share: int = 0,
        tools: ToolGateway | None = None,
        egress: EgressGateway | None = None,
    ) -> AsyncIterator[Pool]:
        """Start a pool (its interpreters fill in the background); on exit, kill and remove everything.

        With `reap_strays` (the server's own process, never a library caller's) this process becomes a
        child subreaper: whatever a run leaves behind, a setsid daemon included, is re-parented to
        us, and every child that is not a run or pooled interpreter is killed and reaped.
        Without `plan`, it is made from the configuration (`ConfigError` if a sandbox was demanded
        and cannot work). `caller_share`: the slots one caller may hold (`admission.fair_share`).
        `tools`: code mode's broker, for runs to call tools through. `egress`: the proxy runs reach the
        network through (RUNNER_EGRESS_ALLOW).
        """
        logger = logger or get_logger()
        plan = plan or plan_isolation(config)
        helpers = Helpers()  # the server's own helper processes: the sweep knows them
        provided = await ProvidedPackages.opened(config.packages_section, logger, helpers)
        await _remove_what_dead_servers_left(config.work_dir, logger)
        held = HeldDirectory(POOL_PREFIX, config.work_dir)  # released, and so unlocked, as it is removed
        base_dir = held.path
        # Not under base_dir, where runs' own directories are made: its own, mode 0700.
        store = OutputStore.made(config.kept, config.pool.work_dir)
        limits = limits_for(config.limits, config.pool, count_tasks_of_uid(), plan)
        _log_start(logger, config, plan, limits, base_dir)
        # One already (`strays_reaped`, the server's whole life) stays one after the pool.
        was_reaping = is_child_subreaper()
        reaping = reap_strays and set_child_subreaper(True)
        if reap_strays and not reaping:
            log_event(logger, logging.WARNING, "cannot become a child subreaper; a run's daemons may outlive it")
        supplies: Supplies | None = None
        sweeper: StraySweeper | None = None
        try:
            async with Supplies.opened(config, plan, base_dir, limits, logger) as supplies:
                if reaping:
                    sweeper = StraySweeper(supplies.known_pids, _helpers_of(helpers, tools), plan.sandboxed, logger)
                admission = Admission(config.max_concurrent, config.max_queue, caller_share)

                async def unresponsive(child: Child) -> None:
                    # A session's call is its session's to end; any other interpreter, its source's.
                    if isinstance(child, KeptCall):
                        await sessions.call_unresponsive(child)
                    else:
                        await supplies.unresponsive(child)

                driver = RunDriver(
                    config.limits, config.returns, config.kept, logger, unresponsive, store, tools, egress
                )  # the one driver of every call
                async with anyio.create_task_group() as tg:
                    ended = sweeper.wanted if sweeper is not None else lambda: None
                    teardowns = Teardowns(tg, supplies, logger, runs_share_files=plan.runs_share_files, ended=ended)
                    slots = Slots(admission, teardowns, logger)
                    sessions = Sessions(config.sessions, supplies, logger, tg, slots, provided)
                    notes = _hints(config, plan, provided)
                    calls = CallPath(slots, supplies, teardowns, sessions, driver, provided, sweeper, notes, logger)
                    tg.start_soon(expire_forever, sessions)
                    if store.enabled:
                        tg.start_soon(store.expire_forever)
                    if config.pool_size:
                        supplies.start_refilling(tg)
                    if sweeper is not None:
                        tg.start_soon(sweeper.sweep_forever)
                    try:
                        yield cls(
                            calls,
                            slots,
                            supplies,
                            teardowns,
                            sessions,
                            store,
                            provided,
                            sandboxed=plan.sandboxed,
                            run_directory_shows=plan.run_directory_shows,
                        )
                    finally:
                        # Sessions end first (their anchors are the supplies'), then the pooled
                        # interpreters, before the sources (zygotes) that made them.
                        with anyio.CancelScope(shield=True):
                            await sessions.shutdown()
                        tg.cancel_scope.cancel()
                        with anyio.CancelScope(shield=True):
                            await supplies.shutdown()
        finally:
            with anyio.CancelScope(shield=True):
                if supplies is not None:
                    await supplies.shutdown()
                if sweeper is not None:
                    await sweeper.sweep()
                if reaping and not was_reaping:
                    set_child_subreaper(False)
                await anyio.to_thread.run_sync(remove_tree, base_dir)
                held.release()
                store.close()
                if provided is not None:
                    provided.close()

    @property
    def sandboxed(self) -> bool:
        """Whether runs are sandboxed (their own namespaces and view), as the isolation plan decided."""
        return self._sandboxed

    @property
    def run_directory_shows(self) -> tuple[str, ...]:
        """What of the server's each sandboxed run's directory shows, read-only, by name (the plan's)."""
        return self._run_directory_shows

    @property
    def packages(self) -> ProvidedPackages | None:
        """The wheelhouse's packages as runs are given them (None without RUNNER_WHEELHOUSE)."""
        return self._provided

    def state(self) -> PoolState:
        """Its numbers at this moment, taken together; the sessions' memory as last measured (`measured_state`)."""
        s, a = self._supplies, self._slots.admission
        # An idle session's anchor is taken from the pool but runs nothing: not a run in progress.
        running = s.in_use - self.sessions.idle
        sessions = self.sessions.state()
        memory = self._session_memory.bytes if sessions.open else 0
        sessions = dataclasses.replace(sessions, memory_bytes=memory)
        return PoolState(running, a.waiting, s.ready, a.queue_full, s.restarts, sessions)

    async def measured_state(self) -> PoolState:
        """`state()` with the sessions' memory measured at most SESSION_MEMORY_INTERVAL ago, in a worker
        thread (for metrics)."""
        await self._session_memory.refresh()
        return self.state()

    async def quiesced(self) -> None:
        """Return once every run answered so far is torn down (reaped, closed, deleted): for a caller
        that counts what runs leave behind, without polling for it."""
        await self._teardowns.wait_for_earlier()

    async def run(self, request: RunRequest, on_progress: ProgressCallback | None = None) -> RunResult:
        """Run one request to its end and return the outcome (`CallPath.run`); raises only for
        cancellation. `on_progress`, if given, is called about once a second while the code runs."""
        return await self._calls.run(request, on_progress)

    async def close_session(self, handle: str, caller: str | None) -> str | None:
        """End the caller's session `handle`: None once it has ended, else why there is no such session."""
        return await self.sessions.close(handle, caller)

    async def end_unclaimed_session(self, handle: str, caller: str | None, why: str) -> bool:
        """`Sessions.end_unclaimed`."""
        return await self.sessions.end_unclaimed(handle, caller, why)

    async def read_output(self, uri: str, caller: str | None) -> tuple[KeptOutput, bytes] | None:
        """The caller's kept stream `uri` and its bytes; None if it has none by that URI (never made,
        expired, evicted or another caller's)."""
        opened = self._store.open(uri, caller)
        if opened is None:
            return None
        kept, fd = opened
        return kept, await anyio.to_thread.run_sync(_read_and_close, fd)

    def kept_outputs(self, caller: str | None) -> list[KeptOutput]:
        """The caller's kept streams that can still be read, oldest first."""
        return self._store.listed(caller)


def _hints(config: Config, plan: IsolationPlan, provided: ProvidedPackages | None) -> Hints:
    """What a run that could not import a module is told the server has, and one that tried a network
    it has not got (a network namespace of its own) what it has."""
    house = provided.wheelhouse.modules if provided is not None else {}
    network = no_network_note(config.egress_allow) if plan.network == "isolated" else ""
    # A sandboxed run's /tmp is a tmpfs of its own; a plain run's is the host's, whose size is not ours.
    tmp_mb = config.sandbox_tmp_mb if plan.sandboxed else 0
    limits = LimitNotes(config.max_processes, tmp_mb, config.max_file_size_mb, config.max_memory_mb)
    return Hints(config.packages_site, house, config.wheelhouse_modules, network, limits)


async def _remove_what_dead_servers_left(work_dir: str, logger: logging.Logger) -> None:
    """A server killed with SIGKILL left its directories and, in plain mode, its runs' processes."""
    removed, killed = await anyio.to_thread.run_sync(remove_dead, work_dir)
    if removed:
        log_event(
            logger, logging.WARNING, "removed what a dead server left", directories=len(removed), processes=killed
        )


def _log_start(logger: logging.Logger, config: Config, plan: IsolationPlan, limits: Limits, base_dir: str) -> None:
    log_event(
        logger,
        logging.INFO,
        "pool starting",
        python=config.python,
        pool_size=config.pool_size,
        max_concurrent=config.max_concurrent,
        rlimit_nproc=limits.nproc,
        work_dir=base_dir,
        spawn_mode=plan.spawn_mode,
        preload=",".join(plan.preload),
        packages=config.packages or "none (the standard library only)",
        sandbox=plan.sandbox,
        sandbox_reason=plan.reason,
        run_uid=plan.identity,
        cgroup=plan.cgroup,
    )
    if not plan.sandboxed:
        # Said where a user sees it (and in the tool's description, where the model reads it): a desktop
        # client's user on macOS or Windows, or on a Linux host without user namespaces or bubblewrap,
        # gets this mode from `auto` without asking for it.
        log_event(logger, logging.WARNING, UNSANDBOXED, reason=plan.reason)
    if hasattr(os, "geteuid") and os.geteuid() == 0 and not plan.uid_per_run:
        log_event(
            logger,
            logging.WARNING,
            "running as root: RLIMIT_NPROC is not enforced, a fork loop is stopped only by the timeout",
        )


def _read_and_close(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as kept:
        return kept.read()


def _helpers_of(helpers: Helpers, tools: ToolGateway | None) -> Callable[[], set[int] | None]:
    """The server's own processes, for the stray sweep: its helpers, and where it brokers tools, every
    child in a session its downstream servers lead (one that npx leaves, say); None while one starts.
    A server is found once by the mark in its environment (`ToolGateway.helper_marks`)."""
    if tools is None:
        return helpers.known
    sessions: dict[bytes, int] = {}  # mark -> the session its server leads

    def known() -> set[int] | None:
        own, marks = helpers.known(), tools.helper_marks()
        if own is None or marks is None:
            return None
        for gone in set(sessions) - marks:
            del sessions[gone]
        children = children_of_self()
        for mark in marks - set(sessions):
            # Found once its connection is made (`marks` is None until then); not found, it has died.
            found = _marked_leader(children, mark)
            if found:
                sessions[mark] = found
        led = set(sessions.values())
        for pid in children:
            with contextlib.suppress(OSError):
                if os.getsid(pid) in led:
                    own.add(pid)
        return own

    return known


def _marked_leader(children: list[int], mark: bytes) -> int:
    """The child that leads its session and whose environment holds `mark`; 0 if none."""
    for pid in children:
        try:
            if os.getsid(pid) == pid:
                with open(f"/proc/{pid}/environ", "rb") as environ:
                    if mark in environ.read().split(b"\0"):
                        return pid
        except OSError:
            continue
    return 0
