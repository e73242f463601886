"""The HTTP connections a server process holds: a deadline on a client's request, and a bound on how many.

uvicorn waits on a client for ever: a connection whose request's headers never finish, or whose body
stops halfway, holds a file descriptor (and, once its headers are in, a task) until the client hangs up,
which a vanished client or a slow-client attack (slowloris) never does. uvicorn's own
`limit_concurrency` answers 503 past a number of requests, but a request that never finishes is never
one. Its h11 protocol, made stricter here (`bounded_protocol`), bounds both:

- A request's headers must all come within `read_seconds` of the connection, or on a kept-alive
  connection of the request's first byte; bytes trickling in do not extend it. Its body may pause at most
  `read_seconds` between two reads, so that the largest body may take its time and a stopped one may
  not (while the server itself has stopped reading, the app not keeping up, the body's pause is not
  the client's). Past either, the connection is closed; a body's app is told the client left.
- At most `max_connections` are held open by one server process. At the bound, a new connection closes
  the one that has sat idle kept alive the longest, as its keep-alive expiring would (its client opens
  another when it needs one), or, when none is idle, is closed itself at once.

A connection idle between requests is uvicorn's to close (`runner.transports.http.KEEP_ALIVE_SECONDS`).
Each close is logged as a refusal is (`RefusalLog`): a client can cause them without end.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from runner.logs import RefusalLog, log_event


@dataclass(frozen=True)
class ConnectionBounds:
    """What `bounded_protocol`'s connections are held to, and where their closes are told."""

    read_seconds: float
    max_connections: int
    logger: logging.Logger
    late: RefusalLog = field(default_factory=RefusalLog)
    crowded: RefusalLog = field(default_factory=RefusalLog)


def bounded_protocol(bounds: ConnectionBounds) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol held to `bounds` (uvicorn.Config's `http`): one class per server, whose
    connections count one another."""

    class Bounded(BoundedH11Protocol):
        pass

    Bounded.bounds = bounds
    return Bounded


class BoundedH11Protocol(H11Protocol):
    """One connection; its class's `bounds` are set by `bounded_protocol`."""

    bounds: ConnectionBounds

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._idle_since = 0.0  # when its last response ended (the loop's clock)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # its first request's headers, from now
        if len(self.connections) > self.bounds.max_connections:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.SEND_BODY:
            self._arm()  # a body's pause is counted from its last read
        else:
            self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:
            self._idle_since = self.loop.time()
        self._watch()

    def _watch(self) -> None:
        """Arm, keep or disarm the deadline for what the connection now waits on from its client."""
        state = self.conn.their_state
        if self.transport.is_closing() or state not in (h11.IDLE, h11.SEND_BODY):
            self._disarm()  # the request is all in (or the connection ends): the server's turn
        elif state is h11.IDLE and self.timeout_keep_alive_task is not None:
            self._disarm()  # idle between requests: the keep-alive's to close
        elif self._deadline is None:
            self._arm()  # a request's first bytes (or a pipelined one's turn): from now, never extended

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.bounds.read_seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.flow.read_paused:  # the server stopped reading, not the client: its pause from now
            self._arm()
            return
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self._told(self.bounds.late, "HTTP connection closed: its request's body paused too long", "body")
        elif state is h11.IDLE and self.timeout_keep_alive_task is None:
            self._told(self.bounds.late, "HTTP connection closed: its request's headers came too late", "headers")
        else:
            return
        self.transport.close()

    def _make_room(self) -> None:
        """One connection too many: close the one idle the longest, else this new one."""
        idle = [
            other
            for other in self.connections
            if isinstance(other, BoundedH11Protocol)
            and other.timeout_keep_alive_task is not None
            and not other.transport.is_closing()
        ]
        open_ = sum(1 for other in self.connections if not other.transport.is_closing())
        if open_ <= self.bounds.max_connections:
            return  # those over the bound are closing already
        if idle:
            min(idle, key=lambda other: other._idle_since).timeout_keep_alive_handler()
            return
        self._told(self.bounds.crowded, "HTTP connection refused: as many open as allowed, none idle", None)
        self.transport.close()

    def _told(self, refusals: RefusalLog, event: str, waited_for: str | None) -> None:
        count = refusals.note()
        if not count:
            return
        client = self.client or ("unknown", 0)
        fields: dict[str, Any] = {"client": f"{client[0]}:{client[1]}"}
        if waited_for is not None:
            fields["waited_for"] = waited_for
            fields["RUNNER_HTTP_READ_SECONDS"] = self.bounds.read_seconds
        else:
            fields["RUNNER_HTTP_MAX_CONNECTIONS"] = self.bounds.max_connections
        if count > 1:
            fields["refused_since_last_line"] = count
        log_event(self.bounds.logger, logging.WARNING, event, **fields)
