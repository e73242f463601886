"""Static bearer tokens for the HTTP transport (RFC 6750), as an ASGI middleware in front of the MCP endpoint.

Why not the SDK's auth: it is OAuth 2.1 (an issuer, a token verifier, protected-resource metadata),
and a static token has no MCP auth profile. RFC 6750 says what a client gets: no token, 401 with
``WWW-Authenticate: Bearer realm="..."``; a wrong one, the same with ``error="invalid_token"``.

A token is compared in time that does not depend on how much of it a guess got right: every
candidate is hashed, and the digest is compared with every known token's digest, all of them,
with `hmac.compare_digest`. A token never reaches a log; its name does.

A refusal is logged with the client's address and why (no token, an unknown one, one in the URL),
so that an operator can see why a client gets 401; at most one line per `RefusalLog.interval`
seconds, the next saying how many it stood for, so that a client guessing tokens cannot fill the log.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from runner.errors import ConfigError
from runner.logs import log_event

REALM = "python-runner-mcp"
# Where the transport leaves the name of the token a request came with, for the handlers' logs,
# metrics and per-token share (Starlette's request.state is this dict of the ASGI scope).
CALLER_STATE_KEY = "caller"
MIN_TOKEN_CHARS = 16
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_TOKEN = re.compile(r"[\x21-\x7e]+")  # RFC 6750's b64token is narrower; any visible ASCII is accepted


@dataclass(frozen=True, slots=True)
class BearerTokens:
    """The known tokens, as (name, SHA-256 digest) pairs; the tokens themselves are not kept."""

    digests: tuple[tuple[str, bytes], ...]

    @property
    def names(self) -> tuple[str, ...]:
        """The tokens' names, in the file's order."""
        return tuple(name for name, _ in self.digests)

    @classmethod
    def parse(cls, text: str, source: str = "RUNNER_AUTH_TOKENS_FILE") -> BearerTokens:
        """One token per line, ``name:token`` or ``token`` (named token-N by its line); blank lines and
        lines starting with # are skipped. Raises `ConfigError` naming the line, never echoing a token."""
        digests: list[tuple[str, bytes]] = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            name, colon, token = line.partition(":")
            if not colon:
                name, token = f"token-{number}", line
            if not _NAME.fullmatch(name):
                raise ConfigError(source, f"line {number}: a name is 1-64 letters, digits, '_', '.' or '-'")
            if not _TOKEN.fullmatch(token) or len(token) < MIN_TOKEN_CHARS:
                raise ConfigError(
                    source, f"line {number}: a token is at least {MIN_TOKEN_CHARS} visible ASCII characters, no spaces"
                )
            digest = _digest(token.encode())
            if any(hmac.compare_digest(digest, known) for _, known in digests):
                raise ConfigError(source, f"line {number}: the same token as an earlier line")
            if name in (known for known, _ in digests):
                raise ConfigError(source, f"line {number}: the name {name!r} is used twice")
            digests.append((name, digest))
        if not digests:
            raise ConfigError(source, "no token in the file")
        return cls(tuple(digests))

    @classmethod
    def read(cls, path: str) -> BearerTokens:
        """Parse the file at `path` (RUNNER_AUTH_TOKENS_FILE)."""
        try:
            with open(path, encoding="utf-8") as file:
                return cls.parse(file.read())
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError("RUNNER_AUTH_TOKENS_FILE", f"cannot read {path!r}: {exc}") from None

    def name_of(self, token: bytes) -> str | None:
        """The name of `token`, or None. Compares with every known token, whatever matches."""
        digest = _digest(token)
        found = None
        for name, known in self.digests:
            if hmac.compare_digest(digest, known):
                found = name
        return found


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class RefusalLog:
    """Decides which refusals get a log line: the first, then at most one per `interval` seconds.

    Sans-IO: `clock` is injected, and `note` returns how many refusals the line stands for (0: none
    is written). One counter for every client, not one per address: a map of addresses would grow
    with whatever a scanner sends.
    """

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._last: float | None = None
        self._held = 0

    def note(self) -> int:
        """Count one refusal; the number of refusals to log now (this one and those held), or 0."""
        self._held += 1
        now = self._clock()
        if self._last is not None and now - self._last < self.interval:
            return 0
        self._last, held, self._held = now, self._held, 0
        return held


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
        if name is None:
            why = "a token that is not known" if scheme.lower() == b"bearer" else "not a Bearer token"
            self._logged(scope, why)
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
