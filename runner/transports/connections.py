"""The HTTP connections a server process holds: a deadline on every wait for a client, and a bound on how many.

uvicorn waits on a client for ever: a connection whose request's headers never finish, whose body stops
halfway, or whose client never reads its answers holds a file descriptor (and, once its headers are in,
a task) until the client hangs up, which a vanished client or a slow-client attack (slowloris) never
does. uvicorn's own `limit_concurrency` answers 503 past a number of requests, but a request that never
finishes is never one. Its h11 protocol, made stricter here (`bounded_protocol`), bounds both.

Each connection is in one phase, kept by `_sync` after every event of uvicorn's that can change it:

- *waiting* for a request's headers: they must all come within `client_seconds` of the connection, or on
  a kept-alive connection of the request's first byte (a pipelined one's: of its turn); bytes trickling
  in do not extend it.
- *body*: the request's body may pause at most `client_seconds` between two reads, so the largest body
  may take its time and a stopped one may not. A pause of the server's own is not the client's: while
  uvicorn has stopped reading (the app not keeping up) or the client waits for its `100 Continue`, and for
  a whole period after.
- *lingering*: answered before its request's body was all in (a 401, a refusal), the rest of the body is
  read only to be dropped, as nginx's `lingering_time` does: within `client_seconds` of the answer in all,
  bytes trickling in do not extend it (found by a review: one byte every 20 s on each of 512 connections,
  none with a token, held every slot, and the server served no one), and such a connection makes room as
  one waiting for its headers does.
- *idle* between requests, kept alive: uvicorn's to close (`runner.transports.http.KEEP_ALIVE_SECONDS`),
  also after an answer sent before its request's body was all in, where uvicorn sets no keep-alive.
- *busy*: the server's turn (the request is all in).

Whatever the phase, bytes written and not yet taken by the client wait on it whenever the client is what
they wait for: the transport's buffer past its high-water mark (uvicorn then holds the app's next write),
or the connection idle, waiting, or being closed with a tail still unsent. The client must take some of
them within each `client_seconds` (as nginx's `send_timeout`): a client reading a large answer slowly but
steadily is served, one that stopped reading is let go.

Past a deadline the connection is aborted (its buffer dropped: a close would wait for a client that does
not read). At most `max_connections` are counted open by one server process; at the bound a new
connection closes the one idle the longest, as its keep-alive expiring would (its client opens another
when it needs one; aborted if its last answer is not all taken, so that no closing connection outlives
its count); with none idle, the one waiting longest for its headers or lingering (a client that sends its request at
once never waits long, so under a flood of connections that send nothing it is the flood's that go);
with none of those, the new one itself. Each close of a client's is logged as a refusal is, each kind on
its own (`RefusalLog`): a client can cause them without end.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass
from typing import Any, Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from runner.logs import RefusalLog, log_event

LINGERED = "HTTP connection closed: its request's body was not all in within its deadline after its answer"
Phase = Literal["waiting", "body", "lingering", "idle", "busy", "gone"]


@dataclass(frozen=True)
class ConnectionBounds:
    """What `bounded_protocol`'s connections are held to, and where their closes are told."""

    client_seconds: float
    max_connections: int
    logger: logging.Logger


class _Held:
    """One server process's connections: how many are open, and those idle and those waiting (for their
    headers, or lingering), each in the order they began to (the first is the longest), so that making room
    costs no scan; and the log of each kind of close (a few constant kinds)."""

    def __init__(self) -> None:
        self.count = 0
        self.idle: collections.OrderedDict[BoundedH11Protocol, None] = collections.OrderedDict()
        self.waiting: collections.OrderedDict[BoundedH11Protocol, None] = collections.OrderedDict()
        self.told: dict[str, RefusalLog] = {}


def bounded_protocol(bounds: ConnectionBounds) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol held to `bounds` (uvicorn.Config's `http`): one class per server, whose
    connections count one another."""

    class Bounded(BoundedH11Protocol):
        pass

    Bounded.bounds = bounds
    Bounded.held = _Held()
    return Bounded


class BoundedH11Protocol(H11Protocol):
    """One connection; its class's `bounds` and `held` are set by `bounded_protocol`."""

    bounds: ConnectionBounds
    held: _Held

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase: Phase = "busy"
        self._counted = False
        self._deadline: asyncio.TimerHandle | None = None  # the phase's wait for the client
        self._unsent_check: asyncio.TimerHandle | None = None  # bytes written that wait on the client
        self._unsent_then = 0  # how many, at the last check
        self._taken = False  # the client took enough since then for uvicorn to write again
        self._server_paused = False  # the last deadline found the server's own pause

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.held.count += 1
        self._counted = True
        self._enter("waiting")  # its first request's headers, from now
        if self.held.count > self.bounds.max_connections:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter("gone")
        self._uncount()
        if self._unsent_check is not None:
            self._unsent_check.cancel()
            self._unsent_check = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._sync(read=True)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._sync(read=False)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._watch_unsent()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._taken = True  # below the low-water mark: the client is taking them

    def timeout_keep_alive_handler(self) -> None:
        super().timeout_keep_alive_handler()
        self._watch_unsent()  # closed: its last answer's tail may still wait on the client

    def shutdown(self) -> None:
        super().shutdown()
        self._watch_unsent()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        # Another protocol takes the transport without a connection_lost here (never: ws="none").
        self._enter("gone")
        self._uncount()
        super().handle_websocket_upgrade(event)

    def _sync(self, *, read: bool) -> None:
        """Enter the phase uvicorn and h11 are now in; a read in a body starts its pause again."""
        if self._phase == "gone":
            return
        conn = self.conn
        state = conn.their_state
        if self.transport.is_closing():
            self._enter("busy")  # uvicorn is closing it: only its answer's flush is left (`_watch_unsent`)
        elif state is h11.SEND_BODY:
            if self.cycle is not None and self.cycle.response_complete:
                self._enter("lingering")  # its deadline from the answer, not from each read
            elif read or self._phase != "body":
                self._enter("body", again=True)
        elif state is not h11.IDLE:
            self._enter("busy")  # the request is all in: the server's turn
        elif conn.trailing_data[0]:
            # Part of a request is in, its headers not all: a pipelined one's too, for which uvicorn set
            # its keep-alive as its turn came.
            self._unset_keepalive_if_required()
            self._enter("waiting")
        elif self.timeout_keep_alive_task is not None:
            self._enter("idle")
        elif self.cycle is not None and self.cycle.response_complete:
            # Answered before its body was all in, then the body came: uvicorn starts the next cycle
            # without a keep-alive, so the connection would be held with no deadline at all.
            expire = self.timeout_keep_alive_handler
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, expire)
            self._enter("idle")
        self._watch_unsent()

    def _enter(self, phase: Phase, *, again: bool = False) -> None:
        """Leave the current phase for `phase` (`again`: its deadline from now even if already in it)."""
        held, old = self.held, self._phase
        if phase == old and not again:
            return
        if old == "idle":
            held.idle.pop(self, None)
        elif old in ("waiting", "lingering"):
            held.waiting.pop(self, None)
        self._phase = phase
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._server_paused = False
        if phase == "idle":
            held.idle[self] = None
        elif phase in ("waiting", "lingering"):
            held.waiting[self] = None
        if phase in ("waiting", "body", "lingering"):
            self._deadline = self.loop.call_later(self.bounds.client_seconds, self._expired)

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self._phase == "lingering":  # answered: no pause of the server's is waited out
            self._told(LINGERED, "body")
            self._drop()
            return
        paused = self.flow.read_paused or (self.cycle is not None and self.cycle.waiting_for_100_continue)
        if paused or self._server_paused:
            # The server's own pause: the client's wait starts again a whole period after it ends.
            self._deadline = self.loop.call_later(self.bounds.client_seconds, self._expired)
            self._server_paused = paused
            return
        if self._phase == "waiting":
            self._told("HTTP connection closed: its request's headers came too late", "headers")
        elif self._phase == "body":
            self._told("HTTP connection closed: its request's body paused too long", "body")
        else:
            return
        self._drop()

    def _owed(self) -> bool:
        """Whether bytes written wait on the client to take them (not on the app to write more)."""
        if self.transport.get_write_buffer_size() == 0:
            return False
        return self.flow.write_paused or self.transport.is_closing() or self._phase not in ("busy", "body")

    def _watch_unsent(self) -> None:
        """Check, each `client_seconds`, that the client takes what waits on it, while anything does."""
        if self._unsent_check is None and self._owed():
            self._unsent_then, self._taken = self.transport.get_write_buffer_size(), False
            self._unsent_check = self.loop.call_later(self.bounds.client_seconds, self._unsent_checked)

    def _unsent_checked(self) -> None:
        self._unsent_check = None
        if not self._owed():
            return  # all taken, or the app's turn to write: watched again if the client owes again
        unsent = self.transport.get_write_buffer_size()
        if self._taken or unsent < self._unsent_then:
            self._watch_unsent()  # some taken: a slow client, served
            return
        self._told("HTTP connection closed: its client did not take its answer", "answer")
        self._drop()

    def _make_room(self) -> None:
        """One connection too many: close the one idle the longest, else the one waiting longest for its
        headers (never this new one, which has just begun to wait), else this one."""
        held = self.held
        if held.idle:
            victim = next(iter(held.idle))
            if victim.transport.get_write_buffer_size():
                victim._drop()  # its last answer not all taken: a close would outlive its count
            else:
                victim.timeout_keep_alive_handler()  # as its keep-alive expiring
                victim._enter("gone")
                victim._uncount()
            return
        victim = next(iter(held.waiting), self)
        if victim is not self:
            victim._told("HTTP connection closed: as many open as allowed, for a new one", None)
        else:
            self._told("HTTP connection refused: as many open as allowed, none idle", None)
        victim._drop()

    def _drop(self) -> None:
        """Close at once, what the transport holds dropped, and count it gone."""
        self._enter("gone")
        self._uncount()
        self.transport.abort()

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self.held.count -= 1

    def _told(self, event: str, waited_for: str | None) -> None:
        refusals = self.held.told.get(event)
        if refusals is None:
            refusals = self.held.told[event] = RefusalLog()
        count = refusals.note()
        if not count:
            return
        client = self.client or ("unknown", 0)
        fields: dict[str, Any] = {"client": f"{client[0]}:{client[1]}"}
        if waited_for is not None:
            fields["waited_for"] = waited_for
            fields["RUNNER_HTTP_CLIENT_SECONDS"] = self.bounds.client_seconds
        else:
            fields["RUNNER_HTTP_MAX_CONNECTIONS"] = self.bounds.max_connections
        if count > 1:
            fields["refused_since_last_line"] = count
        log_event(self.bounds.logger, logging.WARNING, event, **fields)
