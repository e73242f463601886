"""A `notifications/cancelled` POSTed over stateless HTTP reaches the request it names.

Served statelessly, every POST is an exchange of its own: a cancel POSTed beside a request lands
where that request is unknown, and the SDK acknowledges and drops it. Yet that is how clients of
the handshake era cancel (the TypeScript SDK's AbortSignal sends one and leaves the request's
response open), and the run would go on to its timeout. So every request in flight here is kept
under (who, JSON-RPC id), and a cancel from the same who for that id cancels the request's exchange,
as a dropped connection does: the handler is cancelled and the run killed.

Who is the token's name. Without tokens it is the client's address, and then posted cancels are
honoured only on a loopback address: behind a proxy (`--insecure-no-auth`) every client has the
proxy's address. A cancel acts only if the SDK would take the POST itself: to the endpoint, as JSON,
with an allowed Host and Origin (a web page must not be able to cancel a local user's runs). A
cancel for an id that two requests of one client share cancels both: the client reused an id.

The body is read here once, within the endpoint's bound, and handed on unchanged, as one message (its
chunks let go); one declared or found to be over the bound is handed on as it comes, for the SDK to
refuse (413). The bodies in flight, all clients together, hold at most BODIES_IN_FLIGHT
times the bound, and one client's at most half of that (503 past it), each counted as its bytes arrive,
not as declared (found by a review: four requests that declared the bound and sent nothing held every
other client's POSTs busy); a body of PARSED_BYTES or less is always read (a cancel, a ping, a small call).
A body is held in that bound until its answer, a call's too, though that makes a token's third call
of a body near the bound busy while two run. Let go once the SDK had parsed it (the SDK holds it until
the answer all the same), the calls waiting in the pool's queue held theirs past the bound: 30 calls of
3 MiB bodies from one token, one running, took the server from 67 to 499 MiB; held, 12 were taken and
the rest told busy, 246 MiB (tried after a third review, not kept).

Only a body of PARSED_BYTES or less is parsed here, and so known at once for what it is: a cancel, or a
request that a cancel can reach from the moment it is handed on. A longer one is not parsed here (the
SDK parses it) and one that would parse into more than MAX_JSON_VALUES values (`json_values`, counted
without parsing) is answered 400 before anything parses it: a few MiB of `{}` are gigabytes of objects.
A longer request's id is the one the SDK parsed, told by the middleware before its handler runs, never
a guess from its bytes (found by a review: a scan of its start and end took a nested `"id"` for it,
and missed one in its middle, so its cancels were dropped or cancelled another request).

A cancel may come before the request it names can be reached: posted at once, it overtakes the
request's body still arriving, or a longer body not yet parsed by the SDK (found by a review: such a
cancel was dropped and the run went on to its timeout, 1 of 6 and 1 of 8 calls of 1 MiB). So a cancel that finds
nothing is kept (`EarlyCancels`) for EARLY_CANCEL_SECONDS, and a request of the same who that began
before it and turns out to have that id is cancelled once it is reachable, before its handler runs.
Only one that began before it: a cancel that came after its request had ended (a client giving up as
the answer comes) must not cancel the next request that reuses the id. They are bounded per who and
all together, so a client cannot grow them, and keyed by who, so it cannot cancel another's requests.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeGuard

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runner.jsonvalues import json_values
from runner.transports.auth import CALLER_STATE_KEY
from runner.transports.jsonrpc import (
    CANCELLED_METHOD,
    MAX_JSON_VALUES,
    REQUEST_CANCELLED,
    SERVER_BUSY,
    error_reply,
    request_id_in,
)

Key = tuple[str, str | int]
# A body up to this long is parsed here for its method and ids; a longer one is not parsed here at all.
PARSED_BYTES = 64 * 1024
# The bodies of all requests in flight at once, in bodies as long as may be (a lone one is always read).
BODIES_IN_FLIGHT = 4
# An answer's body goes to the HTTP server in pieces of at most this: uvicorn waits for the client to take
# what it holds before it takes the next piece, not after the last, so a body sent whole left the app at
# once, however little the client had read (found by a clean clone: 3 of 8 unread tasks/get answers of
# 40 MB let go of the reads' budget at once, each held by uvicorn all the same).
PIECE_BYTES = 64 * 1024
# How long a cancel that found no request is kept for one that began before it and is not yet reachable.
EARLY_CANCEL_SECONDS = 5.0
# Such cancels kept at most, per who and all whos together (past either, a new one is dropped).
EARLY_CANCELS_PER_CALLER = 64
EARLY_CANCELS = 4096
# Nor one whose id is longer (characters, or bits of an integer): a client's ids are short, and a body of
# 64 KiB can hold a 64 KiB id, 256 MiB for EARLY_CANCELS of them.
EARLY_CANCEL_ID_CHARS = 200
# Where a POST's scope keeps what is to be called once its answer has been sent (`after_answer`).
AFTER_ANSWER_KEY = "after_answer"
# Where a POST's scope keeps its `_Exchange`, for the server's middleware (`identified`).
EXCHANGE_KEY = "posted_exchange"


def after_answer(request: object, callback: Callable[[], None]) -> bool:
    """Call `callback` once the answer to `request` (the SDK's, of a POST that `PostedCancels` serves)
    has been sent; False if that cannot be told (the callback is then the caller's to call)."""
    scope = getattr(request, "scope", None)
    state = scope.get("state") if isinstance(scope, dict) else None
    waiting = state.get(AFTER_ANSWER_KEY) if isinstance(state, dict) else None
    if not isinstance(waiting, list):
        return False
    waiting.append(callback)
    return True


async def identified(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: the SDK has parsed a POST's message; its exchange learns the request's id,
    exact (a cancel can reach it by that id from now on)."""
    scope = getattr(ctx.request, "scope", None)
    state = scope.get("state") if isinstance(scope, dict) else None
    exchange = state.get(EXCHANGE_KEY) if isinstance(state, dict) else None
    if isinstance(exchange, _Exchange) and _is_id(ctx.request_id) and exchange.identified(ctx.request_id):
        # A cancel came before it could be reached: its handler must not start. The exchange is cancelled
        # and answers nothing; this error goes nowhere. (Found by a load hunt: only the exchange was
        # cancelled, and the handler, in the SDK's task, started the run, 3 of 12 times under load, before
        # the exchange's end reached it.)
        raise MCPError(REQUEST_CANCELLED, "cancelled before it ran")
    return await call_next(ctx)


def _in_pieces(send: Send) -> Send:
    """`send`, a long answer body handed on in PIECE_BYTES pieces, then an empty last one."""

    async def sending(message: Message) -> None:
        body = message.get("body", b"") if message["type"] == "http.response.body" else b""
        if len(body) <= PIECE_BYTES:
            await send(message)
            return
        whole = memoryview(body)
        for start in range(0, len(body), PIECE_BYTES):
            piece = bytes(whole[start : start + PIECE_BYTES])
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": message.get("more_body", False)})

    return sending


class PostedCancels:
    """ASGI middleware in front of the SDK's MCP endpoint at `path`."""

    def __init__(
        self,
        app: ASGIApp,
        path: str,
        max_body_bytes: int,
        security: TransportSecuritySettings,
        *,
        anonymous_cancels: bool,
    ) -> None:
        self._app = app
        self._path = path
        self._max = max_body_bytes
        self._checks = TransportSecurityMiddleware(security)
        self._anonymous_cancels = anonymous_cancels  # honour cancels without a token (loopback only)
        self._in_flight: dict[Key, set[anyio.CancelScope]] = {}
        self._early = EarlyCancels()
        self._arrivals = itertools.count()  # the order in which POSTs began, for `EarlyCancels`
        self._bodies = _Bodies(BODIES_IN_FLIGHT * max_body_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self._path:
            await self._app(scope, receive, send)
            return
        # Whoever answers this request may ask to be told when its answer has been sent (`after_answer`):
        # the ASGI app returns only once the client has taken nearly all of it.
        waiting: list[Callable[[], None]] = []
        state = scope.setdefault("state", {})
        state[AFTER_ANSWER_KEY] = waiting
        try:
            await self._serve(scope, receive, _in_pieces(send))
        finally:
            state[AFTER_ANSWER_KEY] = None  # too late to ask now: the asker is told so
            for answered in waiting:
                answered()

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrival = next(self._arrivals)  # before its body is read: a cancel posted from now on may name it
        declared = _declared(scope)
        if declared is not None and declared > self._max:
            await self._app(scope, receive, send)  # as it comes, for the SDK to refuse (413)
            return
        held = _Held(self._bodies, _who(scope, anonymous=True) or "")
        try:
            read = await _buffer(receive, self._max, held)
            if read is None:
                await _refuse(send, 503, None, f"busy: {self._bodies.held / 2**20:,.0f} MiB of requests are being read")
                return
            buffered, body = read
            if len(body) > PARSED_BYTES and (values := json_values(body, MAX_JSON_VALUES)) > MAX_JSON_VALUES:
                # The id is a guess here (nothing parsed it), for an answer only: this request is over.
                await _refuse(
                    send, 400, request_id_in(body), f"{values:,} JSON values or more, past {MAX_JSON_VALUES:,}"
                )
                return
            exchange = _Exchange(arrival)
            scope["state"][EXCHANGE_KEY] = exchange
            try:
                await self._route(scope, receive, send, buffered, body, exchange)
            finally:
                exchange.register = None  # too late to be identified now
        finally:
            held.release()

    async def _route(
        self, scope: Scope, receive: Receive, send: Send, buffered: list[Message], body: bytes, exchange: _Exchange
    ) -> None:
        async def replay() -> Message:
            return buffered.pop(0) if buffered else await receive()

        # Only what is needed is kept for the length of the call, not the body or its parse.
        parsed = len(body) <= PARSED_BYTES
        method, request_id, cancels = _routing(body) if parsed else (None, None, None)
        del body
        # What the SDK will refuse (a bad Host, Origin or Content-Type) must not act here either.
        refused = (parsed and method is None) or await self._checks.validate_request(
            Request(scope), is_post=True
        ) is not None
        who = None if refused else _who(scope, self._anonymous_cancels)
        if who is not None:
            if _is_id(cancels):
                found = self._in_flight.get((who, cancels), ())
                for cancel_scope in found:
                    cancel_scope.cancel()
                if not found:  # its request may not be reachable yet
                    self._early.remember((who, cancels), exchange.arrival)
            # A longer body may be a request: its id comes from the SDK's parse (`identified`).
            if _is_id(request_id) or not parsed:
                await self._serve_request(scope, replay, send, who, request_id, exchange)
                return
        await self._app(scope, replay, send)

    async def _serve_request(
        self, scope: Scope, receive: Receive, send: Send, who: str, request_id: object, exchange: _Exchange
    ) -> None:
        started = ended = False

        async def watched(message: Message) -> None:
            nonlocal started, ended
            started = started or message["type"] == "http.response.start"
            ended = ended or (message["type"] == "http.response.body" and not message.get("more_body", False))
            await send(message)

        cancel_scope = anyio.CancelScope()
        keys: list[Key] = []

        def register(request_id: str | int) -> bool:
            key = (who, request_id)
            if key not in keys:
                keys.append(key)
                self._in_flight.setdefault(key, set()).add(cancel_scope)
                if self._early.cancelled(key, exchange.arrival):
                    cancel_scope.cancel()  # before its handler runs (or at once, on entering)
            return cancel_scope.cancel_called

        if _is_id(request_id):
            register(request_id)
        exchange.register = register
        try:
            with cancel_scope:
                await self._app(scope, receive, watched)
        finally:
            exchange.register = None
            for key in keys:
                scopes = self._in_flight[key]
                scopes.discard(cancel_scope)
                if not scopes:
                    del self._in_flight[key]
        if cancel_scope.cancelled_caught and not ended:
            # A cancelled request gets no JSON-RPC answer; the HTTP exchange still needs an end (an empty
            # one, or the end of an event stream already begun), or the client sees a broken response.
            if not started:
                await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Exchange:
    """What the server's middleware tells a POST once the SDK has parsed its message (`identified`)."""

    def __init__(self, arrival: int) -> None:
        self.arrival = arrival
        # Makes the request reachable by a cancel under its id, True if it was cancelled before; None
        # where no cancel may reach it.
        self.register: Callable[[str | int], bool] | None = None

    def identified(self, request_id: str | int) -> bool:
        """Whether the request, now reachable, had been cancelled already (`EarlyCancels`)."""
        return self.register(request_id) if self.register is not None else False


class EarlyCancels:
    """Cancels that found no request, each kept EARLY_CANCEL_SECONDS under (who, id) with the order of
    its POST, for a request that began before it and becomes reachable after it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._kept: OrderedDict[Key, tuple[float, int]] = OrderedDict()  # (deadline, arrival), oldest first
        self._by_who: dict[str, int] = {}

    def remember(self, key: Key, arrival: int) -> None:
        self._expire()
        request_id = key[1]
        size = len(request_id) if isinstance(request_id, str) else request_id.bit_length()
        if size > EARLY_CANCEL_ID_CHARS:
            return
        if key in self._kept:
            del self._kept[key]  # kept again, from now and at its new arrival
        elif len(self._kept) >= EARLY_CANCELS or self._by_who.get(key[0], 0) >= EARLY_CANCELS_PER_CALLER:
            return
        else:
            self._by_who[key[0]] = self._by_who.get(key[0], 0) + 1
        self._kept[key] = (self._clock() + EARLY_CANCEL_SECONDS, arrival)

    def cancelled(self, key: Key, arrival: int) -> bool:
        """Whether a request under `key` that began at `arrival` was cancelled before it was reachable."""
        self._expire()
        kept = self._kept.get(key)
        return kept is not None and arrival < kept[1]

    def __len__(self) -> int:
        return len(self._kept)

    def _expire(self) -> None:
        now = self._clock()
        while self._kept:
            key, (deadline, _) = next(iter(self._kept.items()))
            if deadline > now:
                return
            del self._kept[key]
            left = self._by_who.pop(key[0]) - 1
            if left:
                self._by_who[key[0]] = left


class _Bodies:
    """The bytes of the request bodies being read or served, together and by client: each byte is held
    from its arrival until its exchange ends, for the SDK keeps the body and its parse for that long."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.bodies = 0
        self.by_client: dict[str, int] = {}


class _Held:
    """One request's share of `_Bodies`, its client's `who`."""

    def __init__(self, bodies: _Bodies, who: str) -> None:
        self._bodies = bodies
        self._who = who
        self._size = 0
        bodies.bodies += 1

    def take(self, size: int) -> bool:
        """Hold `size` more bytes; False past the limit, or past half of it for one client, unless the
        body is still within PARSED_BYTES or is the only one (those are always read)."""
        bodies = self._bodies
        mine = bodies.by_client.get(self._who, 0)
        small = self._size + size <= PARSED_BYTES
        over = bodies.held + size > bodies.limit or mine + size > bodies.limit // 2
        if over and not small and bodies.bodies > 1:
            return False
        bodies.held += size
        bodies.by_client[self._who] = mine + size
        self._size += size
        return True

    def release(self) -> None:
        bodies = self._bodies
        bodies.held -= self._size
        bodies.bodies -= 1
        left = bodies.by_client.pop(self._who, 0) - self._size
        if left > 0:
            bodies.by_client[self._who] = left
        self._size = 0


def _declared(scope: Scope) -> int | None:
    declared = next((value for key, value in scope["headers"] if key == b"content-length"), None)
    return int(declared) if declared is not None and declared.isdigit() else None


async def _buffer(receive: Receive, limit: int, held: _Held) -> tuple[list[Message], bytes] | None:
    """What to hand on (the whole body as one message, its chunks let go; or the messages read until the
    body went past `limit`, for the SDK to refuse), and the body (b"" when it went past); None when the
    server's bound of bodies in flight has no room for what came (each chunk taken as it comes)."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, b""
        chunk = len(message.get("body", b""))
        if not held.take(chunk):
            return None
        size += chunk
        if size > limit:
            return messages, b""
        if not message.get("more_body", False):
            body = b"".join(part.get("body", b"") for part in messages)
            messages.clear()  # one copy held, not two
            return [{"type": "http.request", "body": body, "more_body": False}], body


async def _refuse(send: Send, status: int, request_id: object, why: str) -> None:
    """Answer a JSON-RPC error without handing the request on."""
    busy = status == 503
    code, message = (SERVER_BUSY, why) if busy else (types.INVALID_REQUEST, f"Invalid Request: {why}")
    answer = error_reply(request_id if _is_id(request_id) else None, code, message)
    body = answer.model_dump_json(by_alias=True, exclude_none=True).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if busy:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _routing(body: bytes) -> tuple[str | None, object, object]:
    """A message's method, its id, and the id a `notifications/cancelled` names (None where absent), of a
    body of PARSED_BYTES or less (a longer one is taken for no cancel: a cancel is a few hundred bytes)."""
    try:
        value: Any = json.loads(body) if body else None
    except (ValueError, RecursionError):
        return None, None, None
    if not isinstance(value, dict) or not isinstance(value.get("method"), str):
        return None, None, None
    params = value.get("params")
    cancels = params.get("requestId") if value["method"] == CANCELLED_METHOD and isinstance(params, dict) else None
    return value["method"], value.get("id"), cancels


def _is_id(value: object) -> TypeGuard[str | int]:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _who(scope: Scope, anonymous: bool) -> str | None:
    caller = scope.get("state", {}).get(CALLER_STATE_KEY)
    if isinstance(caller, str):
        return "token:" + caller
    client = scope.get("client")
    return "address:" + client[0] if anonymous and client else None
