"""Static bearer tokens for the HTTP transport (RFC 6750), as an ASGI middleware in front of the MCP endpoint;
the tokens file is read where the configuration is (`runner.config.tokens`).

Why not the SDK's auth: it is OAuth 2.1 (an issuer, a token verifier, protected-resource metadata),
and a static token has no MCP auth profile. RFC 6750 says what a client gets: no token, 401 with
``WWW-Authenticate: Bearer realm="..."``; a wrong one, the same with ``error="invalid_token"``.

A token is compared as `BearerTokens.name_of` does, in time that does not depend on how much of it
a guess got right. A token never reaches a log; its name does.

A refusal is logged with the client's address and why (no token, an unknown one, one in the URL),
so that an operator can see why a client gets 401; at most one line per `RefusalLog.interval`
seconds, the next saying how many it stood for, so that a client guessing tokens cannot fill the log.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from runner.config.tokens import BearerTokens
from runner.logs import RefusalLog, log_event

REALM = "python-runner-mcp"
# Where the transport leaves the name of the token a request came with, for the handlers' logs,
# metrics and per-token share (Starlette's request.state is this dict of the ASGI scope).
CALLER_STATE_KEY = "caller"


class BearerAuth:
    """Lets a request through to `app` only with a known bearer token; everything else gets 401.

    A token in the query string (RFC 6750's third way) is refused whatever it is: URLs end up in
    proxies' and servers' access logs.
    """

    def __init__(self, app: ASGIApp, tokens: BearerTokens, logger: logging.Logger, refusals: RefusalLog) -> None:
        self._app = app
        self._tokens = tokens
        self._log = logger
        self._refusals = refusals

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        query = scope.get("query_string", b"")
        if re.search(rb"(^|&)access_token=", query):
            self._logged(scope, "a token in the URL")
            await _refuse(send, "invalid_request", "a token in the URL is refused; send it in the Authorization header")
            return
        header = next((value for key, value in scope["headers"] if key == b"authorization"), None)
        if header is None:
            self._logged(scope, "no Authorization header")
            await _refuse(send, None, "")
            return
        scheme, _, token = header.partition(b" ")
        name = self._tokens.name_of(token.strip()) if scheme.lower() == b"bearer" else None
        if name is None and scheme.lower() != b"bearer":
            # Another scheme (Basic): asked for a Bearer token, as with none (RFC 6750 3.1; found by a first
            # hour: "the token is not known" sent a user looking at the token, not the scheme).
            self._logged(scope, "not a Bearer token")
            await _refuse(send, None, "")
            return
        if name is None:
            self._logged(scope, "a token that is not known")
            await _refuse(send, "invalid_token", "the token is not known")
            return
        scope.setdefault("state", {})[CALLER_STATE_KEY] = name
        await self._app(scope, receive, send)

    def _logged(self, scope: Scope, why: str) -> None:
        count = self._refusals.note()
        if count:
            client = scope.get("client") or ("unknown", 0)
            fields: dict[str, Any] = {"client": f"{client[0]}:{client[1]}", "why": why}
            if count > 1:
                fields["refused_since_last_line"] = count
            log_event(self._log, logging.WARNING, "HTTP request refused: no valid bearer token", **fields)


async def _refuse(send: Send, error: str | None, description: str) -> None:
    challenge = f'Bearer realm="{REALM}"'
    if error:
        challenge += f', error="{error}", error_description="{description}"'
    status = 400 if error == "invalid_request" else 401
    body = (description or "authentication required: send Authorization: Bearer <token>").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"www-authenticate", challenge.encode()),
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
