"""The egress proxy: what a sandboxed run reaches of the network, decided and carried by the server.

A run with egress has a network namespace of its own with only a loopback, and on it one listening
socket that the server accepts on (`RunProxy.serve`): its ``HTTP_PROXY`` and ``HTTPS_PROXY`` name it.
Every connection the run makes there is the server's to answer. A ``CONNECT host:port`` is checked and,
if allowed, tunnelled (TLS is not terminated: the proxy sees names and ports, never paths); a plain-HTTP
request in absolute form is checked, sent on with ``Connection: close`` in origin form, and its response
carried back, each request of a kept-alive connection checked on its own (h11 parses both sides: no
request can hide inside another's body).

A name is checked against RUNNER_EGRESS_ALLOW, then resolved here, and the connection made to an address
this resolution gave, never to one the run names in a Host or an SNI: a public name that resolves to
loopback, private, link-local (cloud metadata) or other non-public addresses is refused unless an entry
lists that address from within its own block (DNS rebinding; `EgressAllow.refusal_of`). Refusals are a 403
with one line naming the host and RUNNER_EGRESS_ALLOW, a warning in the log with the run's request_id, and
a count by reason.

Bounds per run: connections at once (`MAX_CONNECTIONS`, one more is answered 503), an idle timeout per
connection, and the bytes in and out together (RUNNER_MAX_EGRESS_MB: past it every connection of the run
is closed, and each new one at once). Whatever ends the run cancels `serve` at once, and every connection
closes with it.

Why not a proxy library: mitmproxy (regular mode with an addon) and proxy.py (plugins) each bring their
own server loop, acceptor and process model, made to listen on addresses of their own; here the listening
sockets are the runs', each in its own namespace and handed over one at a time, and each connection is
counted against its run. What is left once those are ours is a CONNECT tunnel and a plain-HTTP hop, and
h11 (already here with httpx) does the HTTP parsing, which is the part worth not writing.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable

import anyio
import anyio.abc
import h11

from runner.config import EgressAllow, EgressConfig
from runner.egress.relay import Activity, Reach, Relay, plain_answer, watch_idle
from runner.egress.resolver import AddressInfo, Resolver
from runner.egress.sockets import Socket, accept
from runner.egress.targets import Refusal
from runner.logs import LogBudget, log_event
from runner.outcome import NetworkUse
from runner.rates import Pace

MAX_CONNECTIONS = 16  # a run's connections through the proxy at once
MAX_REACHES = 256  # host:port records kept per run; more are counted together, as OTHER_HOSTS
OTHER_HOSTS = "(other hosts)"
MAX_REFUSALS_LOGGED = 20  # a run's refusals logged; the rest are counted (metrics) and in its result
ACCEPT_PAUSE = 0.05
SLOT_WAIT = 1.0  # how long a connection past MAX_CONNECTIONS waits for one to end before its 503
# Body chunks (h11's events) a run's connections may have parsed, at once and then each second: one costs
# the event loop some 8 us (h11's parse, 5, and the relay's share of the read it came in), so a run takes
# under a tenth of a core for them. A body read 64 KiB at a time is an event a read, far within it; one
# sent as 80-byte lines, each a chunk (a generator given to requests), goes on at 800 KB/s.
PARSED_PER_SECOND = 10_000
# Reads of a run's tunnels, both ways, at once and then each second. A read and its send on cost the event
# loop about the same whatever they carry, a byte or 64 KiB (found by a review: tunnels written a byte at
# a time took 2.29 s of the server's CPU in a run's 3 s for 0.7 MB, as much as 3.6 GB in 64 KiB blocks):
# past the pace a tunnel waits, and what its side sent meanwhile comes in its next read, so a run that
# writes a byte at a time costs what one writing 64 KiB does. A download read 64 KiB at a time goes on at
# 128 MB/s once the first 2,000 reads (up to 128 MiB, past the default budget) are spent.
READS_PER_SECOND = 2_000
# Connections taken and requests read on them, refused ones included, at once and then each second. Each
# costs the event loop 0.3-0.6 ms (a task, h11, the check, a refusal's answer or an upstream's connection),
# whatever it carries (found by a review: one run that connected, asked for a host not listed and read its
# 403 in four processes took 5.5 s of the server's CPU in 6 s, ~2,500 a second, and another run's fetches
# 6x slower). A run's HTTPS is one connection a host for as many requests as it likes (a tunnel).
REQUESTS_PER_SECOND = 200
# What ends a connection because a peer closed or broke its side, or spoke something h11 refuses.
_GONE = (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, h11.ProtocolError)


class EgressProxy:
    """The server's proxy for every run: the list, the budget, and where refusals and bytes are counted."""

    def __init__(
        self,
        config: EgressConfig,
        log: logging.Logger,
        on_refused: Callable[[str], None] | None = None,
        on_bytes: Callable[[str, int], None] | None = None,
        resolver: Resolver | None = None,
        own_ports: frozenset[int] = frozenset(),
    ) -> None:
        self.allow: EgressAllow = config.allow  # parsed once, here
        self.resolver = resolver if resolver is not None else Resolver()
        self.max_bytes = config.max_bytes
        # The ports this server listens on (HTTP's, as bound; none over stdio): at an address of this
        # host, never reached, whatever the list says (found by a review: a listed 127.0.0.2:* reached
        # the server's own endpoint on 0.0.0.0, past a front proxy's authentication, and ran code).
        self.own_ports = own_ports
        self.log = log
        self.on_refused = on_refused
        self.on_bytes = on_bytes

    def for_run(self, request_id: str, caller: str | None = None) -> RunProxy:
        return RunProxy(self, request_id, caller)


class RunProxy:
    """One run's (or one session call's) connections through the proxy, and what they reached."""

    def __init__(self, proxy: EgressProxy, request_id: str, caller: str | None = None) -> None:
        self._proxy = proxy
        self._request_id = request_id
        self._bytes = 0
        self._open = 0
        self._queued = 0  # waiting for one of the open ones to end (`_in_line`)
        self._slot_freed = anyio.Event()  # set as one ends, then made anew
        self._reaches: dict[tuple[str, int, bool], Reach] = {}
        self._refusals = LogBudget(MAX_REFUSALS_LOGGED, "egress refusals: no more logged for this run")
        self._scope: anyio.CancelScope | None = None
        self._spent = False  # its budget (the scope is cancelled too as `serve` ends, whatever ended it)
        now = time.monotonic()
        self._parsing = Pace(PARSED_PER_SECOND, PARSED_PER_SECOND, now)
        self._reading = Pace(READS_PER_SECOND, READS_PER_SECOND, now)
        self._asking = Pace(REQUESTS_PER_SECOND, REQUESTS_PER_SECOND, now)
        self._lookups = proxy.resolver.for_run(caller)

    def reached(self) -> tuple[NetworkUse, ...]:
        """What the run reached and was refused, in the order it first asked."""
        return tuple(
            NetworkUse(reach.host, reach.port, reach.bytes_in, reach.bytes_out, reach.allowed)
            for reach in self._reaches.values()
        )

    def spent(self) -> str:
        """`RunEgress.spent`: what the run's result says once its budget is spent (found by a first hour: a
        download cut by it ended in a bare IncompleteRead, and the result said nothing of why)."""
        if not self._spent:  # not the scope's cancel: the run's end cancels it too (found by a review)
            return ""
        most = f"RUNNER_MAX_EGRESS_MB={self._proxy.max_bytes >> 20}"
        return f"the run's network budget ({most}) was spent: its connections were closed, and new ones refused"

    async def serve(self, listener: socket.socket) -> None:
        """Accept the run's connections on `listener` (a listening TCP socket in the run's network namespace,
        which this takes) until the run's end cancels this; every connection is closed on the way out, and
        past the budget, every connection and each new one at once. Nothing a connection does ends this:
        each one's faults end that one alone."""
        # Our own sockets, not anyio's streams: those read a connection into memory as fast as it came
        # (`runner.egress.sockets`).
        with listener:
            try:
                listener.setblocking(False)
                async with anyio.create_task_group() as tg:
                    self._scope = tg.cancel_scope
                    await self._accept(listener, tg)
                # The budget is spent (its scope cancelled): until the run ends, what it connects is
                # closed at once, not left waiting, at the run's pace still (found by a review: 17,500
                # connections in 6 s, each taken and closed).
                while True:
                    (await _next_connection(listener)).close()
                    if wait := self.asked():
                        await anyio.sleep(wait)
            finally:
                self._lookups.end()  # what stalls in threads still is its caller's from now on
                self._log_paced()

    def _log_paced(self) -> None:
        """One line for a run its pace held back: what it asked of the proxy and how often it waited
        (an operator's answer to a slow download; what the hostile tests count, the CPU they cost being
        the machine's, `make bench`'s egress scenario)."""
        paces = {"requests": self._asking, "reads": self._reading, "chunks": self._parsing}
        if any(pace.held for pace in paces.values()):
            counts: dict[str, int] = {}
            for name, pace in paces.items():
                counts[name], counts[f"{name}_held"] = pace.taken, pace.held
            log_event(self._proxy.log, logging.INFO, "egress paced", self._request_id, **counts)

    async def _accept(self, listener: socket.socket, tg: anyio.abc.TaskGroup) -> None:
        while True:
            stream = await _next_connection(listener)
            if self._open < MAX_CONNECTIONS:
                self._open += 1
                tg.start_soon(self._connection, stream)
            elif self._queued < MAX_CONNECTIONS:
                self._queued += 1
                tg.start_soon(self._in_line, stream)
            else:
                tg.start_soon(self._busy, stream)
            # Past the run's pace the next is not taken: the listener's backlog holds the run back.
            if wait := self.asked():
                await anyio.sleep(wait)

    async def _in_line(self, client: Socket) -> None:
        """A connection past the run's MAX_CONNECTIONS waits SLOT_WAIT for one to end, then is served or
        answered 503 (found by a second look: 16 threads each fetching one URL after another were told
        503, their last connection closed but not yet ended here)."""
        try:
            with anyio.move_on_after(SLOT_WAIT):
                while self._open >= MAX_CONNECTIONS:
                    await self._slot_freed.wait()
        except BaseException:  # the run ended meanwhile: its connection with it, not left to the collector
            client.close()
            raise
        finally:
            self._queued -= 1
        if self._open < MAX_CONNECTIONS:
            self._open += 1
            await self._connection(client)
        else:
            await self._busy(client)

    async def _busy(self, client: Socket) -> None:
        self.refused(Refusal(503, f"this run has {MAX_CONNECTIONS} connections through the proxy open"), "busy")
        try:
            with contextlib.suppress(Exception), anyio.move_on_after(1):
                await client.send(plain_answer(503, f"this run has {MAX_CONNECTIONS} connections open at once"))
        finally:
            client.close()

    async def _connection(self, client: Socket) -> None:
        activity = Activity()
        try:
            async with anyio.create_task_group() as tg:
                # Idle: no byte read or written either way for IDLE_SECONDS, a send the run does not read included.
                tg.start_soon(watch_idle, activity, tg.cancel_scope)
                try:
                    await Relay(self, self._proxy.allow).requests(client, activity)
                except anyio.get_cancelled_exc_class():
                    raise
                except _GONE:
                    pass  # the run or the upstream closed or broke its side: nothing to answer
                except Exception:  # a fault of ours with one connection: that connection ends, logged
                    fields: dict[str, object] = {}
                    self._proxy.log.warning(
                        "egress connection failed",
                        exc_info=True,
                        extra={"request_id": self._request_id, "fields": fields},
                    )
                tg.cancel_scope.cancel()
        except _GONE:
            pass  # closing a socket the peer reset
        finally:
            client.close()
            self._open -= 1
            self._slot_freed.set()
            self._slot_freed = anyio.Event()

    def refused(self, refusal: Refusal, kind: str) -> None:
        proxy = self._proxy
        if refusal.host and kind in ("not_listed", "address", "malformed"):
            self.reach(refusal.host, refusal.port, False)
        if proxy.on_refused is not None:
            proxy.on_refused(kind)
        if not self._refusals.allows(proxy.log, logging.WARNING, self._request_id):
            return
        log_event(
            proxy.log,
            logging.WARNING,
            "egress refused",
            self._request_id,
            host=refusal.host[:253] or "-",
            port=refusal.port,
            status=refusal.status,
            reason=refusal.reason[:300],
        )

    def reach(self, host: str, port: int, allowed: bool) -> Reach:
        """The record of `host`:`port` (allowed or refused); past MAX_REACHES records, one record of the
        rest, allowed or refused as they were."""
        key = (host, port, allowed)
        reach = self._reaches.get(key)
        if reach is None:
            if len(self._reaches) >= MAX_REACHES:
                key = (OTHER_HOSTS, 0, allowed)
                reach = self._reaches.get(key)
                if reach is not None:
                    return reach
            reach = self._reaches[key] = Reach(*key)
        return reach

    def count(self, reach: Reach, bytes_in: int, bytes_out: int) -> None:
        reach.bytes_in += bytes_in
        reach.bytes_out += bytes_out
        self._bytes += bytes_in + bytes_out
        proxy = self._proxy
        if proxy.on_bytes is not None:
            if bytes_in:
                proxy.on_bytes("in", bytes_in)
            if bytes_out:
                proxy.on_bytes("out", bytes_out)
        if self._bytes > proxy.max_bytes:
            self._spend_all()

    @property
    def own_ports(self) -> frozenset[int]:
        """The server's own ports (`EgressProxy.own_ports`), never reached at an address of this host."""
        return self._proxy.own_ports

    async def lookup(self, host: str, port: int) -> AddressInfo:
        """`host`'s addresses, looked up in the proxy's threads, the run's share of them at most."""
        return await self._lookups.lookup(host, port)

    def parsed(self, events: int) -> float:
        """Charge the run `events` of h11's parsing: the seconds its connection waits before it reads
        again (0 within `PARSED_PER_SECOND`), shared by all the run's connections: each pays for what the
        others took."""
        return self._parsing.spend(events, time.monotonic())

    def asked(self, requests: int = 1) -> float:
        """Charge the run one connection taken, or `requests` read on one (a long head counts as more):
        the seconds before the next is taken or read (0 within `REQUESTS_PER_SECOND`), shared by all the
        run's connections."""
        return self._asking.spend(requests, time.monotonic()) if requests else 0.0

    def read(self) -> float:
        """Charge the run one read of a tunnel's, or of a request's head: the seconds that side waits
        before it reads again (0 within `READS_PER_SECOND`), shared by all the run's tunnels, both ways,
        and heads."""
        return self._reading.spend(1, time.monotonic())

    def _spend_all(self) -> None:
        """The budget is spent: every connection of the run, and its listener, closed (once: the cancelled
        scope ends them at their next await)."""
        if self._scope is not None and not self._scope.cancel_called:
            log_event(
                self._proxy.log,
                logging.WARNING,
                "egress budget spent: the run's connections are closed",
                self._request_id,
                bytes=self._bytes,
                limit=self._proxy.max_bytes,
            )
            if self._proxy.on_refused is not None:
                self._proxy.on_refused("budget")
            self._spent = True
            self._scope.cancel()


async def _next_connection(listener: socket.socket) -> Socket:
    """The next connection; one reset before it was taken, or no fd left for it (EMFILE), is passed
    over after a pause that keeps a lasting error from spinning."""
    while True:
        try:
            return await accept(listener)
        except OSError:
            await anyio.sleep(ACCEPT_PAUSE)
