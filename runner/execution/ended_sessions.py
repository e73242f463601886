"""Why sessions ended, remembered for a while: a call that names an ended session is told why, not
only that no session has its handle."""

from __future__ import annotations

from runner.logs import SHOWN_CHARS, cut
from runner.outcome import RunRequest, RunResult, Status

# How long the server remembers why a session ended, to say so to the next call that names it.
ENDED_REMEMBERED = 3600.0
# And for how many at most, the oldest forgotten first: what a server that ends many sessions an hour
# keeps is bounded (a forgotten handle is told "no open session of this caller has that handle").
ENDED_REMEMBERED_MAX = 10_000


class EndedSessions:
    """Why sessions ended, by handle, to say so to a call that names one: for `ENDED_REMEMBERED`
    seconds and `ENDED_REMEMBERED_MAX` sessions at most, the oldest forgotten first."""

    def __init__(self) -> None:
        self._ended: dict[str, tuple[str | None, str, float]] = {}  # handle -> (caller, why, when)

    def add(self, handle: str, caller: str | None, why: str, when: float) -> None:
        self._ended[handle] = (caller, why, when)
        if len(self._ended) > ENDED_REMEMBERED_MAX:
            del self._ended[next(iter(self._ended))]

    def why(self, handle: str) -> str:
        ended = self._ended.get(handle)
        return ended[1] if ended is not None else ""

    def forget_before(self, when: float) -> None:
        for handle, (_, _, ended) in list(self._ended.items()):
            if ended < when:
                del self._ended[handle]

    def unknown_call(self, request: RunRequest) -> RunResult:
        """The answer to a call that names no open session of its caller's: nothing ran."""
        why = self.unknown_message(request.session or "", request.caller)
        return RunResult(request.request_id, Status.INVALID_ARGUMENTS, why)

    def unknown_message(self, handle: str, caller: str | None) -> str:
        """Why a call names no open session: the caller's session of `handle` ended, or none of the
        caller's ever had it."""
        shown = cut(handle, SHOWN_CHARS)
        ended = self._ended.get(handle)
        if ended is not None and ended[0] == caller:
            return f'unknown session {shown!r}: it ended ({ended[1]}); start another with session "new"'
        nothing = "no open session of this caller has that handle"
        return f'unknown session {shown!r}: {nothing}; start one with session "new"'
