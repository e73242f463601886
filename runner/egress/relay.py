"""One connection of a run's through the egress proxy (`Relay`): its requests read with h11, each checked
against the list and answered, tunnelled (``CONNECT``) or sent on (plain HTTP), with every byte counted in
the run's ledger (`RunProxy`). See `runner.egress.proxy` for what is refused and why."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

import anyio
import h11

from runner.config import EgressAllow
from runner.egress.sockets import Socket, connect, this_host
from runner.egress.targets import Refusal, Target, own_address, reachable, target_of, upstream_headers

if TYPE_CHECKING:
    from runner.egress.proxy import RunProxy

IDLE_SECONDS = 60.0  # a connection with no byte either way for this long is closed
CONNECT_SECONDS = 10.0  # to resolve a name and connect to it
HEAD_SECONDS = 15.0  # for a request's whole head to come
MAX_HEAD = 16 * 1024  # a request's head
MAX_RESPONSE_HEAD = 64 * 1024  # a response's (cookies make them larger)
CHUNK = 64 * 1024  # a read of either side at most: what the proxy holds of a connection's bytes
REASONS = {
    400: b"Bad Request",
    403: b"Forbidden",
    408: b"Request Timeout",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
    504: b"Gateway Timeout",
}
MAX_PHRASE = 200  # characters of why a refusal is, in its status line (`phrase`)
# A head's lines that cost h11 about what a request's other work does (`RunProxy.asked`): 16 of them are
# charged as one request more.
LINES_AN_ASK = 16
# What `Relay._next` gives: an event, NEED_DATA when asked not to read for one, None once the peer is done.
Next: TypeAlias = h11.Event | type[h11.NEED_DATA] | None
_RESPONSE_HOPS = frozenset((b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"trailer"))


@dataclass(slots=True)
class Reach:
    """One host and port of a run's, and its bytes."""

    host: str
    port: int
    allowed: bool
    bytes_in: int = 0
    bytes_out: int = 0


@dataclass(slots=True)
class Activity:
    """When a connection last moved a byte (for its idle timeout)."""

    last: float = field(default_factory=anyio.current_time)

    def touch(self) -> None:
        self.last = anyio.current_time()


async def watch_idle(activity: Activity, scope: anyio.CancelScope) -> None:
    """Cancel `scope` once `activity` has been still for IDLE_SECONDS."""
    while True:
        left = activity.last + IDLE_SECONDS - anyio.current_time()
        if left <= 0:
            scope.cancel()
            return
        await anyio.sleep(left)


class Relay:
    """The requests of one connection, until it closes, is refused or is tunnelled."""

    def __init__(self, run: RunProxy, allow: EgressAllow) -> None:
        self._run = run
        self._allow = allow
        self._unattributed = 0  # what the run sent before its request said where to (its head)
        self._head_lines = 0  # of the head being read: what h11 will parse

    async def requests(self, client: Socket, activity: Activity) -> None:
        """Each request of one connection, until it closes or is tunnelled."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        first = True
        while True:
            # The head's lines: those of what h11 holds already (a request sent with the last one), and
            # those read for it, less those h11 holds after it once it is parsed (below).
            self._head_lines = conn.trailing_data[0].count(b"\n")
            # A whole head within HEAD_SECONDS: a run trickling one byte at a time holds no slot for long.
            with anyio.move_on_after(HEAD_SECONDS) as slow:
                try:
                    event = await self._next(conn, client, activity, None, strict=True)
                except h11.RemoteProtocolError as exc:
                    self._run.asked(self._head_lines // LINES_AN_ASK)  # what h11 parsed: the next waits
                    await self._refuse(
                        conn, client, Refusal(400, f"not an HTTP request a proxy takes ({exc})"), "malformed"
                    )
                    return
            if slow.cancelled_caught:
                await self._refuse(
                    conn, client, Refusal(408, f"no whole request within {HEAD_SECONDS:g} s"), "malformed"
                )
                return
            if not isinstance(event, h11.Request):
                return  # closed
            # A request is charged by its head's lines, what h11's parse costs (found by a second look: a head
            # of 4,000 empty header lines took 6-12 ms, and 200 of them a second more than a core; by a third,
            # counted as headers, 4,000 folded lines were one); the connection itself paid one (`_accept`).
            lines = self._head_lines - conn.trailing_data[0].count(b"\n")
            if wait := self._run.asked(lines // LINES_AN_ASK + (0 if first else 1)):
                await anyio.sleep(wait)
            first = False
            decided = self._decide(event)
            if isinstance(decided, Refusal):
                await self._refuse(conn, client, decided, "malformed" if decided.status == 400 else "not_listed")
                return
            upstream = await open_upstream(self._run, self._allow, decided)
            if isinstance(upstream, Refusal):
                kind = "address" if upstream.status == 403 else "unreachable"
                if kind == "unreachable":  # allowed, tried, and nothing went through
                    self._run.reach(decided.host, decided.port, True)
                await self._refuse(conn, client, upstream, kind)
                return
            reach = self._run.reach(decided.host, decided.port, True)
            self._run.count(reach, 0, self._unattributed)  # the head that asked for it
            self._unattributed = 0
            try:
                if decided.tunnel:
                    await self._tunnel(conn, client, upstream, reach, activity)
                    return
                if not await self._forward(conn, client, upstream, event, decided, reach, activity):
                    return
            finally:
                upstream.close()
            conn.start_next_cycle()

    def _decide(self, request: h11.Request) -> Target | Refusal:
        target = target_of(request.method, request.target, list(request.headers))
        if isinstance(target, Refusal):
            return target
        if not self._allow.allows(target.host, target.port):
            return Refusal(403, f"{target.host}:{target.port} is not on RUNNER_EGRESS_ALLOW", target.host, target.port)
        return target

    async def _tunnel(
        self,
        conn: h11.Connection,
        client: Socket,
        upstream: Socket,
        reach: Reach,
        activity: Activity,
    ) -> None:
        if not isinstance(conn.next_event(), h11.EndOfMessage):  # a CONNECT has no body: h11 ends it at once
            return
        await self._send(client, conn.send(h11.Response(status_code=200, headers=[])), reach, activity)
        early, _ = conn.trailing_data  # what the run sent after its CONNECT, before the answer
        if early:
            await upstream.send(early)
        async with anyio.create_task_group() as tg:

            async def pump(source: Socket, sink: Socket, outward: bool) -> None:
                with contextlib.suppress(OSError):
                    # Read only once the last read is sent on: what one side sends faster than the other
                    # takes waits in the kernel, its sender held back by the window.
                    while data := await source.receive(CHUNK):
                        activity.touch()
                        self._run.count(reach, 0 if outward else len(data), len(data) if outward else 0)
                        await sink.send(data)
                        activity.touch()
                        if wait := self._run.read():  # past the run's pace (`READS_PER_SECOND`)
                            await anyio.sleep(wait)
                # One side is done: so is the tunnel (a half-closed TLS stream is not worth keeping).
                tg.cancel_scope.cancel()

            tg.start_soon(pump, client, upstream, True)
            tg.start_soon(pump, upstream, client, False)

    async def _forward(
        self,
        conn: h11.Connection,
        client: Socket,
        upstream: Socket,
        request: h11.Request,
        target: Target,
        reach: Reach,
        activity: Activity,
    ) -> bool:
        """One plain request sent on and its response carried back; whether the run's connection may
        take another."""
        hop = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_RESPONSE_HEAD)
        sent = hop.send(
            h11.Request(method=request.method, target=target.path, headers=upstream_headers(list(request.headers)))
        )
        await upstream.send(sent)
        if conn.they_are_waiting_for_100_continue:
            # The body is sent on whatever the upstream would say: the run need not wait for it to ask.
            await self._send(client, conn.send(h11.InformationalResponse(status_code=100, headers=[])), reach, activity)
        while True:  # the request's body, as the run sends it: what one read brought, in one send
            data, event = await self._body(conn, client, activity, reach)
            if data:
                await upstream.send(hop.send(h11.Data(data=data)))
            if event is h11.NEED_DATA:
                continue
            if not isinstance(event, h11.EndOfMessage):
                if conn.their_state is h11.ERROR:  # its head went on, its body is no HTTP (found by a review)
                    why = Refusal(400, "the request's body is not HTTP a proxy takes")  # its host: reached, listed once
                    await self._refuse(conn, client, why, "malformed")
                return False
            await upstream.send(hop.send(h11.EndOfMessage()))
            break
        while True:  # the response, as the upstream sends it
            data, event = await self._body(hop, upstream, activity, None)
            if data:
                await self._send(client, conn.send(h11.Data(data=data)), reach, activity)
            if event is h11.NEED_DATA:
                continue
            if isinstance(event, h11.InformationalResponse | h11.Response):
                headers = [(name, value) for name, value in event.headers if name not in _RESPONSE_HOPS]
                kind = h11.Response if isinstance(event, h11.Response) else h11.InformationalResponse
                answer = kind(status_code=event.status_code, headers=headers, reason=event.reason)
                await self._send(client, conn.send(answer), reach, activity)
            elif isinstance(event, h11.EndOfMessage):
                await self._send(client, conn.send(h11.EndOfMessage()), reach, activity)
                return conn.our_state is h11.DONE and conn.their_state is h11.DONE
            else:
                return False

    async def _body(
        self, conn: h11.Connection, stream: Socket, activity: Activity, reach: Reach | None
    ) -> tuple[bytes, Next]:
        """The body bytes `conn` has at hand, joined (`stream` read once if it has none), and the event
        after them: NEED_DATA if there is none yet, None once closed (`_next`). Why joined: a body of
        1-byte chunks was an event and a send on for each, 26 us of the event loop per 6 bytes, a whole
        core at 200 KB/s (found by a review). Each event h11 parsed is the run's (`RunProxy.parsed`), and
        past its pace this connection reads no more until it is paid for."""
        parts: list[bytes] = []
        while isinstance(event := await self._next(conn, stream, activity, reach, read=not parts), h11.Data):
            parts.append(event.data)
        if parts and (wait := self._run.parsed(len(parts))):
            await anyio.sleep(wait)
        return b"".join(parts), event

    async def _next(
        self,
        conn: h11.Connection,
        stream: Socket,
        activity: Activity,
        reach: Reach | None,
        *,
        strict: bool = False,
        read: bool = True,
    ) -> Next:
        """The next event of `conn`, reading `stream` as needed (not `read`: NEED_DATA when it would
        have to); None once it is closed or breaks the protocol (`strict`: the error raised, for an answer
        that says why). What the run sends is counted as out when `reach` is given."""
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                if strict:
                    raise
                return None
            if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return None  # PAUSED: the peer sent more than one message's worth where it should wait
            if isinstance(event, h11.Event):
                return event
            if not read:
                return h11.NEED_DATA
            # Only what h11 needs for its next event is read (b"" at the end), and counted as it comes.
            data = await stream.receive(CHUNK)
            activity.touch()
            if strict and (wait := self._run.read()):  # a head's read: paced as a tunnel's (`READS_PER_SECOND`)
                await anyio.sleep(wait)
            if reach is not None:
                self._run.count(reach, 0, len(data))
            elif stream is not None and conn.our_role is h11.SERVER:
                self._unattributed += len(data)
            if strict:
                self._head_lines += data.count(b"\n")
            conn.receive_data(data)

    async def _send(self, client: Socket, data: bytes | None, reach: Reach, activity: Activity) -> None:
        """`data` to the run, counted as in."""
        if data:
            self._run.count(reach, len(data), 0)
            await client.send(data)
            activity.touch()

    async def _refuse(self, conn: h11.Connection, client: Socket, refusal: Refusal, kind: str) -> None:
        """Count and log `refusal`, and answer it if no answer to this request has begun: through h11 once
        it has the request, as plain bytes when the request never came whole (h11 then has none to answer)."""
        self._run.refused(refusal, kind)
        if conn.our_state is h11.SEND_RESPONSE:
            body = f"python-runner-mcp: {refusal.reason}\n".encode()
            headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
            response = h11.Response(
                status_code=refusal.status,
                headers=[*headers, (b"connection", b"close")],
                reason=phrase(refusal.status, refusal.reason),
            )
            parts = [conn.send(response), conn.send(h11.Data(data=body)), conn.send(h11.EndOfMessage())]
            answer = b"".join(part or b"" for part in parts)
        elif conn.our_state in (h11.IDLE, h11.ERROR) and conn.their_state is not h11.DONE:
            answer = plain_answer(refusal.status, refusal.reason)
        else:
            return
        with anyio.move_on_after(5), contextlib.suppress(OSError):
            await client.send(answer)


async def open_upstream(run: RunProxy, allow: EgressAllow, target: Target) -> Socket | Refusal:
    """A connection to an address of `target` that may be reached (each in turn, until one answers),
    or why there is none."""
    host, port = target.host, target.port
    failed: OSError | None = None
    try:
        with anyio.fail_after(CONNECT_SECONDS):
            addresses = await _addresses(run, allow, target)
            if isinstance(addresses, Refusal):
                return addresses
            if port in run.own_ports:
                # This server's own endpoint, whatever the list says (found by a review: a listed
                # 127.0.0.2:* reached it on 0.0.0.0, past a front proxy's authentication, and ran code).
                addresses = [address for address in addresses if not this_host(address)]
                if not addresses:
                    return Refusal(403, f"{host}:{port} is this server's own, never reached from a run", host, port)
            for address in addresses:
                try:
                    return await connect(address, port)
                except OSError as exc:
                    failed = exc
    except TimeoutError:
        return Refusal(504, f"{host}:{port} did not answer within {CONNECT_SECONDS:g} s", host, port)
    why = (failed.strerror or type(failed).__name__) if failed is not None else "no address"
    return Refusal(502, f"{host}:{port} could not be reached ({why})", host, port)


async def _addresses(run: RunProxy, allow: EgressAllow, target: Target) -> list[str] | Refusal:
    """The addresses of `target` the proxy may connect to: its own, for an address (`own_address`),
    else what the name resolves to here that may be reached (`reachable`: DNS rebinding)."""
    host, port = target.host, target.port
    own = own_address(allow, host, port)
    if own is not None:
        return own
    try:
        found = await run.lookup(host, port)
    except OSError as exc:
        return Refusal(502, f"{host} could not be resolved ({exc.strerror or exc})", host, port)
    return reachable(allow, host, port, [sockaddr for *_, sockaddr in found])


def plain_answer(status: int, reason: str) -> bytes:
    """A whole answer of `status` whose body is one line, `reason`, written without h11 (for a request it
    never had whole, or a connection past the run's limit)."""
    body = f"python-runner-mcp: {reason}\n".encode()
    head = f"HTTP/1.1 {status} {phrase(status, reason).decode()}\r\nContent-Type: text/plain\r\n"
    return (head + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def phrase(status: int, reason: str) -> bytes:
    """The status line's reason phrase for a refusal: its name and why, printable ASCII, bounded. A
    refused CONNECT's body is read by no client: Python's says only "Tunnel connection failed: 403
    Forbidden" (found in a first hour: a run could not see why HTTPS was refused); it shows the phrase."""
    said = "".join(char if " " <= char <= "~" else "?" for char in reason[:MAX_PHRASE])
    return REASONS.get(status, b"Refused") + b": " + said.encode("ascii")
