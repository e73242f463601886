"""Sessions: state kept between calls, under a handle the server mints.

A session is an anchor (`runner/processes/keeper.py`, `runner/inrun/keeper.py`) made from one of the
pool's ready interpreters: in the sandbox that interpreter had, with its uid and cgroup, from the
preloading zygote where there is one (its modules are shared with the session's processes, not
copied). Each call of the session is forked from the session's last good state and driven like any
run; the server then keeps the state the call left only if the call ended ok, else the session is
rolled back to where it was, its files too.

Handles are 192 random bits, bound to the caller that made them (a token's name over HTTP; over
stdio the connection is the only caller): another caller's handle is as unknown as one never made.
A session takes a concurrency slot only while one of its calls runs; a second call to a session
whose call is running waits its turn (FIFO), within its own timeout of the queue. Sessions end when
closed, after `RUNNER_SESSION_IDLE_SECONDS` unused, `RUNNER_SESSION_MAX_SECONDS` after they began,
when their state is lost (a call killed its keeper), and with the server.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import anyio.abc

from runner.config import Config
from runner.execution.driver import ProgressCallback, RunDriver
from runner.execution.supply import Supplies
from runner.logs import log_event
from runner.outcome import NEW_SESSION, RunRequest, RunResult, SessionOutcome, Status
from runner.processes.child import Child
from runner.processes.keeper import KeptCall, SessionKeeper, SessionLost

HANDLE_PREFIX = "s-"
HANDLE_BYTES = 24  # 192 bits: past guessing, as MCP's guidance on handles asks for at least 128
# How long the server remembers why a session ended, to say so to the next call that names it.
ENDED_REMEMBERED = 3600.0
EXPIRY_INTERVAL = 1.0


@dataclass(eq=False)
class Session:
    """One open session: its handle, its caller, its anchor and when it was used."""

    handle: str
    caller: str | None
    anchor: Child
    keeper: SessionKeeper
    started: float
    used: float
    turn: anyio.Lock = field(default_factory=anyio.Lock)


@dataclass(frozen=True, slots=True)
class SessionCounts:
    """What the metrics read: sessions open now, and counts since the server started."""

    open: int
    created: int
    expired: int
    closed: int
    lost: int
    rolled_back: int


class Sessions:
    """The table of open sessions, and each session's calls run through the pool's parts."""

    def __init__(
        self,
        config: Config,
        supplies: Supplies,
        logger: logging.Logger,
        tg: anyio.abc.TaskGroup,
    ) -> None:
        self._config = config
        self._supplies = supplies
        self._driver = RunDriver(config, logger, self._unresponsive)
        self._log = logger
        self._tg = tg
        self._open: dict[str, Session] = {}
        self._ended: dict[str, tuple[str | None, str, float]] = {}  # handle -> (caller, why, when)
        self._counts = {"created": 0, "expired": 0, "closed": 0, "lost": 0, "rolled_back": 0}

    async def _unresponsive(self, child: Child) -> None:
        """A call that did not end after its anchor was told to kill it: its session is over (its
        anchor goes, and the call's PID namespace or group with it)."""
        if not isinstance(child, KeptCall):
            return
        for session in list(self._open.values()):
            if session.keeper is child.anchor:
                await self._end(session, "a call of it could not be killed", "lost")
        child.ended(-9, 0.0, 0)

    def counts(self) -> SessionCounts:
        return SessionCounts(len(self._open), **self._counts)

    async def run(
        self,
        request: RunRequest,
        on_progress: ProgressCallback | None,
        slot: Callable[[RunRequest, Callable[[float], Awaitable[RunResult]]], Awaitable[RunResult]],
    ) -> RunResult:
        """Run `request` in its session (a new one for ``"new"``), holding a slot of the pool's
        (`slot`, which admits the caller and passes the queue wait) only while the call runs."""
        if request.session == NEW_SESSION:
            refused = self._refused(request.caller)
            if refused:
                return RunResult(request.request_id, Status.BUSY, refused)
            return await slot(request, lambda waited: self._start_and_run(request, waited, on_progress))
        session = self._open.get(request.session or "")
        if session is None or session.caller != request.caller:
            return RunResult(request.request_id, Status.INVALID_ARGUMENTS, self._unknown(request))
        async with session.turn:
            if self._open.get(session.handle) is not session:  # it ended while this call waited
                return RunResult(request.request_id, Status.INVALID_ARGUMENTS, self._unknown(request))
            return await slot(request, lambda waited: self._call(session, request, waited, on_progress))

    def _refused(self, caller: str | None) -> str:
        c = self._config
        if c.max_sessions == 0:
            return "sessions are off on this server (RUNNER_MAX_SESSIONS=0): run without `session`"
        if len(self._open) >= c.max_sessions:
            return (
                f"too many open sessions: {len(self._open)} of RUNNER_MAX_SESSIONS={c.max_sessions}; "
                "close one with close_session, or run without `session`"
            )
        mine = sum(1 for s in self._open.values() if s.caller == caller)
        if mine >= c.max_sessions_per_caller:
            return (
                f"this caller has {mine} open sessions, the most RUNNER_MAX_SESSIONS_PER_CALLER="
                f"{c.max_sessions_per_caller} allows; close one with close_session"
            )
        return ""

    def _unknown(self, request: RunRequest) -> str:
        handle = request.session or ""
        ended = self._ended.get(handle)
        shown = handle if len(handle) <= 64 else handle[:64] + "..."
        if ended is not None and ended[0] == request.caller:
            return f'unknown session {shown!r}: it ended ({ended[1]}); start another with session "new"'
        return (
            f'unknown session {shown!r}: no open session of this caller has that handle; start one with session "new"'
        )

    async def _start_and_run(
        self, request: RunRequest, waited: float, on_progress: ProgressCallback | None
    ) -> RunResult:
        supply = self._supplies.all[-1]  # the preloading one where there is one
        anchor = await supply.take()
        try:
            keeper = await SessionKeeper.start(anchor, self._tg)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self._supplies.destroy(anchor)
            if isinstance(exc, SessionLost):
                return RunResult(request.request_id, Status.INTERNAL_ERROR, f"the session could not start: {exc}")
            raise
        now = anyio.current_time()
        handle = HANDLE_PREFIX + secrets.token_urlsafe(HANDLE_BYTES)
        session = Session(handle, request.caller, anchor, keeper, now, now)
        self._open[handle] = session
        self._counts["created"] += 1
        log_event(self._log, logging.INFO, "session started", request.request_id, session=handle[:10], pid=anchor.pid)
        async with session.turn:
            return await self._call(session, request, waited, on_progress)

    async def _call(
        self, session: Session, request: RunRequest, waited: float, on_progress: ProgressCallback | None
    ) -> RunResult:
        session.used = anyio.current_time()
        try:
            call = await session.keeper.call()
        except SessionLost as exc:
            await self._end(session, str(exc), "lost")
            return RunResult(request.request_id, Status.INVALID_ARGUMENTS, self._unknown(request))
        try:
            result = await self._driver.drive(call, request, waited, on_progress)
            verdict = await session.keeper.verdict(result.status is Status.OK)
        except SessionLost as exc:
            call.close_all()
            await self._end(session, str(exc), "lost")
            return RunResult(request.request_id, Status.INTERNAL_ERROR, f"the session ended during this call: {exc}")
        except BaseException:
            call.close_all()
            with anyio.CancelScope(shield=True):
                await self._end(session, "a call of it was cancelled mid-way", "lost")
            raise
        call.close_all()
        session.used = anyio.current_time()
        notes = []
        if not verdict.kept:
            self._counts["rolled_back"] += 1
            if verdict.why:
                notes.append(verdict.why)
        if verdict.threads and verdict.kept:
            notes.append("threads it started do not carry over to the next call")
        outcome = SessionOutcome(session.handle, verdict.kept, "; ".join(notes))
        if session.keeper.lost is not None:
            await self._end(session, session.keeper.lost, "lost")
        return dataclasses.replace(result, session=outcome)

    async def close(self, handle: str, caller: str | None) -> bool:
        """End the caller's session `handle`; False if it has none by that handle."""
        session = self._open.get(handle)
        if session is None or session.caller != caller:
            return False
        await self._end(session, "closed by close_session", "closed")
        return True

    async def _end(self, session: Session, why: str, how: str) -> None:
        if self._open.pop(session.handle, None) is None:
            return
        self._counts[how] += 1
        self._ended[session.handle] = (session.caller, why, anyio.current_time())
        log_event(self._log, logging.INFO, "session ended", session=session.handle[:10], why=why)
        with anyio.CancelScope(shield=True):
            session.keeper.close()
            with anyio.move_on_after(1.0):
                await session.anchor.wait_exit()
            await self._supplies.destroy(session.anchor)

    async def expire_forever(self) -> None:
        """End sessions idle too long or too old, and forget ended ones after a while."""
        c = self._config
        while True:
            await anyio.sleep(EXPIRY_INTERVAL)
            now = anyio.current_time()
            for session in list(self._open.values()):
                if session.turn.locked():
                    continue
                if now - session.used > c.session_idle_seconds:
                    await self._end(session, f"unused for {c.session_idle_seconds} s", "expired")
                elif now - session.started > c.session_max_seconds:
                    await self._end(session, f"older than {c.session_max_seconds} s", "expired")
            for handle, (_, _, when) in list(self._ended.items()):
                if now - when > ENDED_REMEMBERED:
                    del self._ended[handle]

    async def shutdown(self) -> None:
        """End every session (the server stops)."""
        for session in list(self._open.values()):
            await self._end(session, "the server stopped", "closed")
