"""Sessions: state kept between calls, under a handle the server mints.

A session is an anchor (`runner/processes/keeper.py`, `runner/inrun/anchor.py`) made from one of the
pool's ready interpreters: in the sandbox that interpreter had, with its uid and cgroup, from the
preloading zygote where there is one (its modules are shared with the session's processes, not
copied). Each call of the session is forked from the session's last good state and driven like any
run; the server then keeps the state the call left only if the call ended ok, else the session is
rolled back to where it was, its files too.

Handles are 192 random bits, after the replica's name where it has one (`RUNNER_HTTP_REPLICA`, for a
proxy to route on), bound to the caller that made them (a token's name over HTTP; over stdio the
connection is the only caller): another caller's handle is as unknown as one never made.
A session takes a concurrency slot only while one of its calls runs; a second call to a session whose
call is running waits its turn (FIFO), counted as waiting in the queue (or its caller's own line) and for
at most its own timeout, then `busy`. Sessions end when closed, after `RUNNER_SESSION_IDLE_SECONDS` unused,
`RUNNER_SESSION_MAX_SECONDS` after they began, when their state is lost (a call killed its keeper), when
the call that started them ends without an answer (nobody has their handle), and with the server.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from runner.config import MIB, SessionsConfig
from runner.execution.admission import Admission
from runner.execution.calls import Admitted
from runner.execution.ended_sessions import ENDED_REMEMBERED, EndedSessions
from runner.execution.provided import ProvidedPackages
from runner.execution.session_rules import notes, over_budget, refusal
from runner.execution.slots import Slot, Slots
from runner.execution.supply import InterpreterSupply, Supplies
from runner.logs import log_event
from runner.outcome import NEW_SESSION, RunRequest, RunResult, SessionOutcome, SessionsState, Status
from runner.processes.child import Child
from runner.processes.keeper import KeptCall, SessionKeeper, SessionLost, stopped

HANDLE_PREFIX = "s-"
HANDLE_BYTES = 24  # 192 bits: past guessing, as MCP's guidance on handles asks for at least 128
# Held in `Sessions._unlisted` for a session being ended: no caller is named so (a token's name has no
# parentheses; a stdio caller is None), so it counts against RUNNER_MAX_SESSIONS, and its anchor with
# it, but no longer as its caller's.
ENDING = "(ending)"
EXPIRY_INTERVAL = 1.0
# How long a call that did not end ok waits for its roll-back before it is answered (`verdict`).
ANSWER_AFTER_ROLLBACK = 0.5
# How long a cancelled call's kill and the rollback after it may take before the session is ended.
ROLLBACK_PATIENCE = 15.0
# How long past its call's own timeout the anchor may take to say whether the call can be kept (it
# reads what changed in the session's directory first).
KEEPABLE_GRACE = 5.0


@dataclass(eq=False)
class OpenSession:
    """One open session: its handle, its caller, its anchor and when it was used."""

    handle: str
    caller: str | None
    anchor: Child
    keeper: SessionKeeper
    supply: InterpreterSupply
    started: float
    used: float
    turn: anyio.Lock = field(default_factory=anyio.Lock)
    # The package directories its calls were given: held until it ends, since a kept state has them
    # on its sys.path and may import from them in any later call.
    packages: dict[str, Path] = field(default_factory=dict)  # distribution -> its directory
    held: int = 0  # bytes its kept state holds, as its last kept call said (for the sessions' budget)
    # Set once the last call's verdict is done: it comes after that call's answer, and the next
    # call waits for it.
    settled: anyio.Event = field(default_factory=anyio.Event)
    handed: bool = False  # its handle went out with a call's answer (its first call's verdict)
    calls: int = 0  # calls let in, its first included

    def __post_init__(self) -> None:
        self.settled.set()


class Sessions:
    """The table of open sessions, and the way in for their calls (`admitted`): the calls themselves
    take the one call path (`runner.execution.calls`), each with its session as its `SessionHost`."""

    def __init__(
        self,
        config: SessionsConfig,
        supplies: Supplies,
        logger: logging.Logger,
        tg: anyio.abc.TaskGroup,
        slots: Slots,
        provided: ProvidedPackages | None = None,
    ) -> None:
        self._config = config
        self._slots = slots  # the pool's: a call waiting for its session's turn counts in its admission
        self._provided = provided
        # A replica's name leads its handles (s-NAME.…): a proxy routes a session's calls on it.
        self._prefix = HANDLE_PREFIX + (config.replica + "." if config.replica else "")
        self._supplies = supplies
        self._log = logger
        self._tg = tg
        self._open: dict[str, OpenSession] = {}
        self._ended = EndedSessions()
        self._counts = {"created": 0, "expired": 0, "closed": 0, "lost": 0, "rolled_back": 0}
        self._calls_running = 0
        self._budget = config.sessions_budget_bytes  # what every open session's kept state may hold together
        # Callers of sessions being started (by id of the request), and ENDING for those being ended (of
        # the session): they count against the caps until open, or their anchor gone (see ENDING).
        self._unlisted: dict[int, str | None] = {}

    async def call_unresponsive(self, child: KeptCall) -> None:
        """A call that did not end after its anchor was told to kill it: its session is over (its
        anchor goes, and the call's PID namespace or group with it)."""
        for session in list(self._open.values()):
            if session.keeper is child.anchor:
                # One that stopped its anchor before its pid was said on is killed by no one: said so.
                why = (
                    "the session's anchor was stopped"
                    if stopped(session.anchor)
                    else "a call of it could not be killed"
                )
                await self.end(session, why, "lost")
        child.ended(-9, 0.0, 0)

    def state(self) -> SessionsState:
        """Open sessions and the counts so far (their memory: the pool measures it from `anchor_pids`)."""
        return SessionsState(len(self._open), 0, **self._counts)

    @property
    def idle(self) -> int:
        """Open sessions with no call running: their anchors are taken from the pool, but run nothing."""
        return len(self._open) - self._calls_running

    @asynccontextmanager
    async def admitted(self, request: RunRequest) -> AsyncIterator[Admitted | RunResult]:
        """A call of `request`'s session let in: its session's turn (FIFO, counted as waiting in the
        pool's admission), then a slot (`Slots.held`, as a one-shot call takes it); for ``"new"``, a
        session started in that slot. Or the answer why not (nothing of it ran)."""
        if request.session == NEW_SESSION:
            async with self._new(request) as admitted:
                yield admitted
            return
        if self._config.refused:  # whatever handle it names (found by a second look: "start one with "new"")
            yield RunResult(request.request_id, Status.INVALID_ARGUMENTS, self._config.refused)
            return
        session = self._open.get(request.session or "")
        if session is None or session.caller != request.caller:
            yield self._ended.unknown_call(request)
            return
        async with _turn(session, request, self._slots.admission, self._log) as no_turn:
            if no_turn is not None or self._open.get(session.handle) is not session:  # or it ended meanwhile
                yield no_turn or self._ended.unknown_call(request)
                return
            # The last verdict done before a slot is taken (found by a review: a call waited 30 s for
            # a stopped anchor inside its slot, and another caller's one-shot call with it).
            await session.settled.wait()
            async with self._slots.held(request) as slot, self._calling(session, request, slot) as admitted:
                yield admitted

    @asynccontextmanager
    async def _new(self, request: RunRequest) -> AsyncIterator[Admitted | RunResult]:
        refused = refusal(self._config, [*self._open.values(), *self._unlisted.values()], request.caller)
        if refused:
            # Off on this server is for good, not "busy" (found by a first hour: a model retried it).
            status = Status.INVALID_ARGUMENTS if self._config.refused else Status.BUSY
            yield RunResult(request.request_id, status, refused)
            return
        self._unlisted[id(request)] = request.caller
        try:
            async with self._slots.held(request) as slot:
                session = await self._start(request) if isinstance(slot, Slot) else slot
                if isinstance(session, RunResult):
                    yield session
                    return
                try:
                    async with session.turn, self._calling(session, request, slot) as admitted:
                        yield admitted
                except BaseException:
                    # Its handle goes out with this call's answer alone: without one, nobody could use
                    # or close the session, and it would hold its place under the caps. Cancelled before
                    # its call was let in too (found by a review: three such sessions held a caller's
                    # cap, their handles never sent).
                    with anyio.CancelScope(shield=True):
                        await self.end(session, "the call that started it ended without an answer", "closed")
                    raise
                if not session.handed:
                    # Answered before it ran (its packages could not be installed, say): the answer
                    # has no handle either (found by a review: four such sessions held a caller's cap
                    # until they were idle 15 minutes).
                    await self.end(session, "the call that started it did not run", "closed")
        finally:
            self._unlisted.pop(id(request), None)

    @asynccontextmanager
    async def _calling(
        self, session: OpenSession, request: RunRequest, slot: Slot | RunResult
    ) -> AsyncIterator[Admitted | RunResult]:
        """The call, its turn and slot held, once its session's last verdict is done."""
        if isinstance(slot, RunResult):
            yield slot
            return
        self._calls_running += 1
        try:
            await session.settled.wait()
            lifetime = self._config.session_max_seconds
            if self.is_open(session) and anyio.current_time() - session.started > lifetime:
                # However busy: calls queued one behind the other keep its turn taken, and the expiry
                # loop skips a session whose turn is (found by a review: a 4 s session answered for 14 s).
                await self.end(session, f"older than {lifetime} s", "expired")
            if not self.is_open(session):  # the last verdict ended it, or its lifetime
                yield self._ended.unknown_call(request)
                return
            session.used = anyio.current_time()
            session.calls += 1
            yield Admitted(slot, SessionHost(self, session))
        finally:
            self._calls_running -= 1

    async def _start(self, request: RunRequest) -> OpenSession | RunResult:
        """A new session, its anchor a ready interpreter of the preloading supply where there is one."""
        supply = self._supplies.all[-1]
        anchor = await supply.take()
        try:
            keeper = await SessionKeeper.start(anchor, self._tg)
            supply.mark_anchor(anchor)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self._supplies.destroy(anchor)
            if isinstance(exc, SessionLost):
                return RunResult(request.request_id, Status.INTERNAL_ERROR, f"the session could not start: {exc}")
            raise
        now = anyio.current_time()
        handle = self._prefix + secrets.token_urlsafe(HANDLE_BYTES)
        session = OpenSession(handle, request.caller, anchor, keeper, supply, now, now)
        self._open[handle] = session
        self._unlisted.pop(id(request), None)
        self._counts["created"] += 1
        log_event(self._log, logging.INFO, "session started", request.request_id, session=handle[:10], pid=anchor.pid)
        return session

    def is_open(self, session: OpenSession) -> bool:
        """Whether `session` is still open (not ended since its call was let in)."""
        return self._open.get(session.handle) is session

    def unknown_call(self, request: RunRequest) -> RunResult:
        """`EndedSessions.unknown_call`."""
        return self._ended.unknown_call(request)

    def why_ended(self, handle: str) -> str:
        """Why the session `handle` ended, if it did and is remembered."""
        return self._ended.why(handle)

    def held_by_others(self, session: OpenSession) -> int:
        """What the other open sessions' kept states hold, in bytes."""
        return sum(s.held for s in self._open.values() if s is not session)

    def count(self, how: str) -> None:
        self._counts[how] += 1

    async def close(self, handle: str, caller: str | None) -> str | None:
        """End the caller's session `handle` (killing a call of it that runs); None once it has ended,
        else why there is no such session."""
        if handle == NEW_SESSION:  # found by a first hour: it was told to start one with "new"
            return 'close_session takes the handle a session\'s calls returned (structuredContent.session), not "new"'
        session = self._open.get(handle)
        if session is None or session.caller != caller:
            return self._ended.unknown_message(handle, caller)
        await self.end(session, "closed by close_session", "closed")
        return None

    async def end_unclaimed(self, handle: str, caller: str | None, why: str) -> bool:
        """End the caller's session `handle` for `why` if no call came to it after its first, nor waits
        for it; whether it did."""
        session = self._open.get(handle)
        if session is None or session.caller != caller or session.calls > 1 or session.turn.locked():
            return False
        await self.end(session, why, "closed")
        return True

    async def end(self, session: OpenSession, why: str, how: str) -> None:
        """End `session` (`how`: the count it goes to), remembering `why` for calls that name it."""
        if self._open.pop(session.handle, None) is None:
            return
        self._counts[how] += 1
        self._ended.add(session.handle, session.caller, why, anyio.current_time())
        log_event(self._log, logging.INFO, "session ended", session=session.handle[:10], why=why)
        self._unlisted[id(session)] = ENDING  # counts in all (its anchor is still there), not as its caller's
        with anyio.CancelScope(shield=True):
            session.keeper.close()
            with anyio.move_on_after(1.0):
                await session.anchor.wait_exit()
            await session.keeper.reading.stop()
            await self._supplies.destroy(session.anchor)
        del self._unlisted[id(session)]
        if self._provided is not None:
            self._provided.release(session.packages.values())
        session.packages = {}

    async def shutdown(self) -> None:
        """End every session (the server stops)."""
        for session in list(self._open.values()):
            await self.end(session, "the server stopped", "closed")


class SessionHost:
    """A call of an open session (`runner.execution.calls.Host`): its interpreter is the call its
    keeper forked ahead from the session's kept state; its verdict, the state it left kept (it ended
    ok, the anchor can keep it, the sessions' budget holds it) or rolled back, files too."""

    def __init__(self, sessions: Sessions, session: OpenSession) -> None:
        self._sessions = sessions
        self._session = session

    @property
    def packages(self) -> Mapping[str, Path]:
        return self._session.packages

    @property
    def reads_imports(self) -> bool:
        return False  # its call is forked from its anchor, whichever supply that came from

    def hold_packages(self, request: RunRequest, provided: Mapping[str, Path]) -> RunResult | None:
        if not self._sessions.is_open(self._session):  # closed while its packages were installed
            if self._sessions._provided is not None:
                self._sessions._provided.release(provided.values())
            return self._sessions.unknown_call(request)
        self._session.packages.update(provided)  # held until the session ends
        return None

    async def take(self, request: RunRequest, imports: frozenset[str]) -> Child | RunResult:
        try:
            child = await self._session.keeper.call()
        except SessionLost as exc:
            await self._sessions.end(self._session, str(exc), "lost")
            return self._sessions.unknown_call(request)
        rolled_back, self._session.keeper.rolled_back = self._session.keeper.rolled_back, None
        if rolled_back is not None and (over := self._hold(rolled_back.held_bytes)):
            child.close_all()
            await self._sessions.end(self._session, over, "lost")
            return self._sessions.unknown_call(request)
        return child

    @asynccontextmanager
    async def watching(self, child: Child) -> AsyncIterator[None]:
        async with anyio.create_task_group() as watching:
            watching.start_soon(_end_call_at_oom, self._session.anchor, child)
            yield
            watching.cancel_scope.cancel()

    async def verdict(self, child: Child, request: RunRequest, result: RunResult) -> RunResult:
        session, sessions = self._session, self._sessions
        try:
            # Within the call's own timeout and a grace (found by a review: a 3 s call whose anchor
            # was stopped was answered after 31 s, holding its slot).
            ahead = await session.keeper.keepable(max(0.0, request.timeout - result.duration) + KEEPABLE_GRACE)
        except SessionLost as exc:
            child.close_all()
            await sessions.end(session, str(exc), "lost")
            # Its processes went (the call killed them, kill(-1) say, or something outside did, or
            # close_session came): the call's own end is not known, the session's is; what it printed
            # and its numbers are the call's (found by a review: dropped, its duration 0.000s). Said so
            # even where its pid never came and it wrote nothing: "unknown session" would say nothing
            # ran, and a call that killed everything at once did (found by a review: 1 in 10-25 of them;
            # a session ending between the call's take and its start, the other case, is far rarer).
            why = sessions.why_ended(session.handle) or str(exc)
            message = f'the session ended during this call ({why}); start another with session "new"'
            return dataclasses.replace(result, status=Status.SIGNAL, message=message, exit_code=None)
        child.close_all()
        session.used = anyio.current_time()
        others = sessions.held_by_others(session)
        over = over_budget(sessions._budget, ahead.held_bytes, others) if result.status is Status.OK else ""
        lifetime = sessions._config.session_max_seconds
        # Its next call is told the session ended: such a call's answer said "kept", for no call; a failed
        # one, "as it was" (found by a second look).
        ending = (
            f"the session reached RUNNER_SESSION_MAX_SECONDS={lifetime} s during this call and ends with it "
            "(a session's calls end within that time of its start)"
            if session.used - session.started > lifetime
            else ""
        )
        if not over and ending and result.status is Status.OK:
            over = f"not kept: {ending}"
        kept = result.status is Status.OK and ahead.yes and not over
        # The answer goes now, and the verdict (the keeper replaced, or the files put back) is done
        # meanwhile; the next call, handed its pipes with it (after an OOM: in `_settle`), waits for it.
        session.keeper.give_verdict(kept, arm=child.oom_kills == 0)
        session.settled = anyio.Event()
        sessions._tg.start_soon(self._settle, kept, child.oom_kills > 0, session.settled)
        if kept:
            session.held = ahead.held_bytes
        else:
            sessions.count("rolled_back")
        said = notes(result, ahead, kept, over)
        if ending and result.status is not Status.OK:
            said = f"the call did not end ok, and {ending}"
        outcome = SessionOutcome(session.handle, kept, said)
        session.handed = True
        if not kept:
            # Answered once its roll-back is done, or ANSWER_AFTER_ROLLBACK has passed (a roll-back of
            # 20,000 files and 200 MB takes 2.4 s, which the client's next call would wait for anyway),
            # so that one that ends the session says so, not "as it was" (found by a review: a call
            # that unlinked a file the state holds open). A kept call's answer goes at once.
            with anyio.CancelScope(shield=True), anyio.move_on_after(ANSWER_AFTER_ROLLBACK):
                await session.settled.wait()
            if not sessions.is_open(session):
                why = sessions.why_ended(session.handle) or "its roll-back could not be done"
                said = f'the session ended as this call was rolled back ({why}); start another with session "new"'
                outcome = SessionOutcome(session.handle, False, said, ended=True)
        return dataclasses.replace(result, session=outcome)

    async def _settle(self, kept: bool, oom: bool, settled: anyio.Event) -> None:
        """The verdict on a call whose answer is gone: what it said (kept or rolled back) is done,
        or the session ends. After a call that met an OOM, its other OOMs (the kernel goes on killing
        its processes until they fit) are all had before the next call can be mistaken for it."""
        session, sessions = self._session, self._sessions
        try:
            verdict = await session.keeper.verdict_done()
            if oom:
                await session.supply.oom_told(session.anchor)
            # What it holds now, as the anchor read it once the verdict was done: a rolled-back call's
            # /dev/shm and /run stay (found by a review: they counted nowhere).
            if over := self._hold(verdict.held_bytes):
                await sessions.end(session, over, "lost")
            elif verdict.yes != kept:
                await sessions.end(session, f"its last call could not be kept after all: {verdict.why}", "lost")
            elif session.keeper.lost is not None:
                await sessions.end(session, session.keeper.lost, "lost")
            else:
                session.keeper.arm()
        except SessionLost as exc:
            await sessions.end(session, str(exc), "lost")
        except Exception as exc:  # in the pool's task group: a fault ends this session only (and is logged)
            await sessions.end(session, f"its last verdict failed: {exc!r}"[:400], "lost")
        finally:
            settled.set()

    def _hold(self, held: int) -> str:
        """Count `held` bytes, what the session holds after a verdict, as its own; why the session must
        end ('' if not): with the other open sessions' it passes the sessions' budget. Found by a
        review: a rolled-back call left 60 MiB in its /dev/shm under a budget of 64 MiB, the session
        went on, and only other callers' sessions were refused (a roll-back now puts /dev/shm and /run
        back too, but what it holds is still read, not assumed); its memory goes with its end."""
        session, sessions = self._session, self._sessions
        session.held, others = held, sessions.held_by_others(session)
        if not over_budget(sessions._budget, held, others):
            return ""
        return (
            f"what it holds after its last call ({held / MIB:.0f} MiB, its /dev/shm and /run too) "
            f"with the other open sessions' {others / MIB:.0f} MiB passes the sessions' "
            f"memory budget of {sessions._budget / MIB:.0f} MiB (RUNNER_SESSIONS_MEMORY_MB)"
        )

    async def abandon(self, child: Child) -> None:
        """Cancelled (the client went, or the server stops): the call is killed and the session
        rolled back, as for any call that did not end ok; only an anchor that cannot do that ends
        the session."""
        session = self._session
        child.kill_group()
        # Its fds now, not once it has ended: a call that offered its state had left the group the kill
        # reaches, and one sending its report then waited for our read for ever, the roll-back with it
        # (found by a review: 15 s, its slot held, then the session lost; up to 9 cancels in 30).
        child.close_all()
        try:
            with anyio.fail_after(ROLLBACK_PATIENCE):
                await child.wait_exit()
                await session.keeper.keepable()
                verdict = await session.keeper.verdict(False)
        except (SessionLost, TimeoutError):
            await self._sessions.end(session, "a call of it was cancelled and could not be rolled back", "lost")
        else:
            self._sessions.count("rolled_back")
            if over := self._hold(verdict.held_bytes):
                await self._sessions.end(session, over, "lost")
        finally:
            child.close_all()


@asynccontextmanager
async def _turn(
    session: OpenSession, request: RunRequest, admission: Admission, log: logging.Logger
) -> AsyncIterator[RunResult | None]:
    """Hold `session`'s turn for `request` (yields None), or say why it is not held (yields `busy`)."""
    refused = await _take_turn(session, request, admission)
    if refused is not None:
        log_event(log, logging.WARNING, "call rejected", request.request_id, reason="busy")
        yield refused
        return
    try:
        yield None
    finally:
        session.turn.release()


async def _take_turn(session: OpenSession, request: RunRequest, admission: Admission) -> RunResult | None:
    """Take `session`'s turn for `request` (None), or say why not: its line of the pool's admission was
    full, or the session's previous call did not end within `request.timeout`. Waiting calls are held
    in memory, each with its code and files: counted like calls waiting for a slot, RUNNER_MAX_QUEUE
    bounds them too, and a caller with a share fills only its own line."""
    try:
        session.turn.acquire_nowait()  # refused while others wait for it: the turn stays FIFO
        return None
    except anyio.WouldBlock:
        pass
    with anyio.move_on_after(request.timeout):
        # anyio's Lock hands a released turn to its longest waiter, and takes back a turn handed to a
        # waiter cancelled (by this deadline or from outside) before it ran: nothing is held then.
        if await admission.wait_counted(request.caller, session.turn.acquire):
            return None
        return RunResult(request.request_id, Status.BUSY, admission.busy_message(request.caller))
    # `busy`, not `timeout`: nothing of this call ran and the session is exactly as it was, so it can be
    # sent again as it is; `timeout` says the code ran and was killed (in a session, rolled back), which
    # would send the client looking for what its code did wrong.
    message = (
        f"session busy: this call waited {request.timeout:g} s (its own timeout) for the session's "
        "previous call to end; nothing ran and the session is as it was; retry later"
    )
    return RunResult(request.request_id, Status.BUSY, message)


async def expire_forever(sessions: Sessions) -> None:
    """End `sessions` idle too long or too old, or whose anchor went, and forget ended ones after a while
    (a loop of its own, in the pool's task group, beside the table it reads)."""
    c = sessions._config
    while True:
        await anyio.sleep(EXPIRY_INTERVAL)
        now = anyio.current_time()
        for session in list(sessions._open.values()):
            if session.turn.locked() or not session.settled.is_set():
                continue
            if session.keeper.lost is not None:  # its anchor went, or said what is not its wire
                await sessions.end(session, session.keeper.lost, "lost")
            elif stopped(session.anchor):
                await sessions.end(session, "the session's anchor was stopped", "lost")
            elif now - session.used > c.session_idle_seconds:
                await sessions.end(session, f"unused for {c.session_idle_seconds} s", "expired")
            elif now - session.started > c.session_max_seconds:
                await sessions.end(session, f"older than {c.session_max_seconds} s", "expired")
        sessions._ended.forget_before(now - ENDED_REMEMBERED)


async def _end_call_at_oom(anchor: Child, call: Child) -> None:
    """cgroup v1: an OOM in the session's cgroup while `call` runs ends the call (its group killed,
    its result `memory_limit`, the session rolled back), not the session: the kernel's OOM killer
    took the largest process, which is the call or one of its own (each maps the kept state and
    more), and the zygote, told the run is an anchor, only says so (`Child.note_oom`); a spawned
    anchor's cgroup is the server's own, watched here."""
    cgroup = anchor.cgroup
    if cgroup is not None and cgroup.event >= 0:
        while True:
            await anyio.wait_readable(cgroup.event)
            if cgroup.out_of_memory():
                break
    else:
        await anchor.next_oom()
    call.kill_for_oom()


def anchor_pids(sessions: Sessions) -> tuple[int, ...]:
    """The interpreter of each open session's anchor, the top of that session's processes: for the pool
    to measure their memory in a worker thread (a function, not a method: `Sessions` is long enough)."""
    return tuple(s.anchor.interpreter_pid for s in sessions._open.values())
