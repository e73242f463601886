"""A `notifications/cancelled` POSTed over stateless HTTP reaches the request it names.

Served statelessly, every POST is an exchange of its own: a cancel POSTed beside a request lands
where that request is unknown, and the SDK acknowledges and drops it. Yet that is how clients of
the handshake era cancel (the TypeScript SDK's AbortSignal sends one and leaves the request's
response open), and the run would go on to its timeout. So every request in flight here is kept
under (who, JSON-RPC id), and a cancel from the same who for that id cancels the request's exchange,
as a dropped connection does: the handler is cancelled and the run killed. Who is the token's name,
or without tokens the client's address, so a client can cancel only its own requests (a cancel
for an id that two requests of one client share cancels both: the client reused an id in flight).

The body is read here once, within the endpoint's bound, and handed on unchanged; past the bound
it is handed on as it comes, and the SDK refuses it (413).
"""

from __future__ import annotations

import json
from typing import Any, TypeGuard

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runner.transports.auth import CALLER_STATE_KEY

Key = tuple[str, str | int]


class PostedCancels:
    """ASGI middleware in front of the SDK's MCP endpoint."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self._app = app
        self._max = max_body_bytes
        self._in_flight: dict[Key, set[anyio.CancelScope]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        buffered, body = await _buffer(receive, self._max)

        async def replay() -> Message:
            return buffered.pop(0) if buffered else await receive()

        message = _parsed(body)
        who = _who(scope)
        if message.get("method") == "notifications/cancelled":
            params = message.get("params")
            request_id = params.get("requestId") if isinstance(params, dict) else None
            if _is_id(request_id):
                for cancel_scope in self._in_flight.get((who, request_id), ()):
                    cancel_scope.cancel()
        request_id = message.get("id")
        if "method" not in message or not _is_id(request_id):
            await self._app(scope, replay, send)
            return
        await self._serve_request(scope, replay, send, (who, request_id))

    async def _serve_request(self, scope: Scope, receive: Receive, send: Send, key: Key) -> None:
        started = ended = False

        async def watched(message: Message) -> None:
            nonlocal started, ended
            started = started or message["type"] == "http.response.start"
            ended = ended or (message["type"] == "http.response.body" and not message.get("more_body", False))
            await send(message)

        cancel_scope = anyio.CancelScope()
        self._in_flight.setdefault(key, set()).add(cancel_scope)
        try:
            with cancel_scope:
                await self._app(scope, receive, watched)
        finally:
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


async def _buffer(receive: Receive, limit: int) -> tuple[list[Message], bytes]:
    """The request's messages up to its end, or up to `limit` bytes of body (then b"" as the body)."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, b""
        size += len(message.get("body", b""))
        if size > limit:
            return messages, b""
        if not message.get("more_body", False):
            return messages, b"".join(part.get("body", b"") for part in messages)


def _parsed(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body) if body else None
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _is_id(value: object) -> TypeGuard[str | int]:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _who(scope: Scope) -> str:
    caller = scope.get("state", {}).get(CALLER_STATE_KEY)
    if isinstance(caller, str):
        return "token:" + caller
    client = scope.get("client")
    return "address:" + (client[0] if client else "")
