"""The sessions' rules, pure functions over what `runner.execution.sessions` holds: who may start one
more session (`refusal`), whether a state may be kept within the sessions' memory (`over_budget`), and
what a session call's result says of its state (`notes`)."""

from __future__ import annotations

from typing import Protocol

import anyio

from runner.config import MIB, SessionsConfig
from runner.outcome import RunResult, Status
from runner.processes.anchor_wire import Said

# How many of a caller's open handles a refusal names (the cap is usually a few).
HANDLES_NAMED = 10


class Holder(Protocol):
    """An open session, as the caps see it (`sessions.OpenSession`)."""

    @property
    def handle(self) -> str: ...

    @property
    def caller(self) -> str | None: ...

    @property
    def used(self) -> float: ...


def notes(result: RunResult, ahead: Said, kept: bool, over: str) -> str:
    """What a session call's result says of its state: why it was not kept, though the call ended ok;
    that its threads do not carry over."""
    said = [over or ahead.why] if not kept and result.status is Status.OK and (over or ahead.why) else []
    if ahead.threads and kept:
        said.append("threads it started do not carry over to the next call")
    return "; ".join(said)


def refusal(c: SessionsConfig, holders: list[Holder | str | None], caller: str | None) -> str:
    """Why `caller` may not start one more session now, or ''; `holders`: the sessions open, and the
    callers of those being started or ended. A caller at its own cap is told its open handles, each
    with how long it has been idle, so that it can close one (nothing else lists them); but not the
    caller with no name where that may be many clients (found by a review: over HTTP without tokens,
    one client was told another's handles, and ran code in its session)."""
    callers = [holder if holder is None or isinstance(holder, str) else holder.caller for holder in holders]
    if c.refused:
        return c.refused
    if len(callers) >= c.max_sessions:
        return (
            f"too many open sessions: {len(callers)} of RUNNER_MAX_SESSIONS={c.max_sessions}; "
            "close one with close_session, or run without `session`"
        )
    mine = callers.count(caller)
    if mine >= c.max_sessions_per_caller:
        now = anyio.current_time()
        open_ones = [h for h in holders if h is not None and not isinstance(h, str) and h.caller == caller]
        own = sorted(open_ones, key=lambda s: -s.used)
        most = c.max_sessions_per_caller
        said = f"this caller has {mine} open sessions, the most RUNNER_MAX_SESSIONS_PER_CALLER={most} allows"
        if caller is None and c.anonymous_shared:
            idle = ", ".join(f"{now - s.used:.0f} s" for s in own[:HANDLES_NAMED])
            return (
                f"{said}; close one with close_session (its handles are not named here: without a token every "
                f"client is this caller), or wait for one to be unused for RUNNER_SESSION_IDLE_SECONDS="
                f"{c.session_idle_seconds} (idle now: {idle})"
            )
        named = ", ".join(f"{s.handle} (idle {now - s.used:.0f} s)" for s in own[:HANDLES_NAMED])
        return f"{said}; close one with close_session: {named}"
    return ""


def over_budget(budget: int, held: int, others: int) -> str:
    """Why a session's next state, holding `held` bytes, may not be kept while the other open sessions'
    kept states hold `others` ('' if it may): together they would pass `budget`."""
    if others + held <= budget:
        return ""
    return (
        f"not kept: its state would hold {held / MIB:.0f} MiB, which with the other open sessions' "
        f"{others / MIB:.0f} MiB passes the sessions' memory budget of {budget / MIB:.0f} MiB "
        "(RUNNER_SESSIONS_MEMORY_MB)"
    )
