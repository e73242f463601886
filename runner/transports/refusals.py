"""The SDK's refusals of an HTTP request, said so that whoever reads them knows what to change.

The SDK's Streamable HTTP app answers a Host it does not allow with ``421 Invalid Host header``, an
Origin with ``403 Invalid Origin header`` and a body over its bound with ``413 Request body too large``:
none of them names the setting, and `localhost` in RUNNER_HTTP_ALLOWED_HOSTS not matching a Host of
`localhost:18123` is a common surprise. `ExplainedRefusals` keeps the status and replaces exactly those
bodies with one that names the value refused and the variable, and logs it with what the variable holds:
the first of each status, then at most one a `RefusalLog.interval`, saying how many it stands for
(a client needs no token to be refused a Host, so it could fill the log).

`CutErrorAnswers` cuts what the SDK's JSON-RPC refusals say back, as the server's middleware cuts its
handlers' errors (`runner.logs.cut_error`): the SDK refuses a 2026-07-28 request whose protocol version it
does not serve before that middleware runs, saying the version back whole in its data (found by a review:
the header must equal the body's version, and uvicorn takes headers of some 60 KB, so a 60,000-character
version was said back in 60,140 bytes; a posted notification's header alike).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runner.config import HttpConfig
from runner.logs import SHOWN_CHARS, RefusalLog, cut, cut_error, log_event

# The SDK's bodies (mcp.server.transport_security, RequestBodyLimitMiddleware; its 2026-07-28 endpoint's
# 406, which has none), by status.
SDK_BODIES = {421: b"Invalid Host header", 403: b"Invalid Origin header", 413: b"Request body too large", 406: b""}


def explained(status: int, headers: dict[bytes, bytes], http: HttpConfig) -> tuple[str, str]:
    """What to say instead of the SDK's body for `status` (the value refused, the variable, the fix),
    and what the log adds: the variable's value, which the answer does not tell a caller who may hold
    no token."""
    if status == 421:
        host = cut(headers.get(b"host", b"").decode("latin-1"), SHOWN_CHARS)
        why = f"Host {host!r} is not in RUNNER_HTTP_ALLOWED_HOSTS"
        name, colon, port = host.rpartition(":")
        if colon and port.isdigit() and name in http.allowed_hosts:
            why += f"; {name!r} there matches no port: {host!r} needs {host!r} or {name + ':*'!r}"
        return why, ", ".join(http.allowed_hosts)
    if status == 403:
        origin = cut(headers.get(b"origin", b"").decode("latin-1"), SHOWN_CHARS)
        return f"Origin {origin!r} is not in RUNNER_HTTP_ALLOWED_ORIGINS", ", ".join(http.allowed_origins)
    if status == 406:  # found by a review: a 2026-07-28 POST was answered 406 with no body at all
        accept = cut(headers.get(b"accept", b"").decode("latin-1"), SHOWN_CHARS)
        return f"Not Acceptable: Accept {accept!r} must name both application/json and text/event-stream", ""
    why = (
        f"Request body too large: over {http.max_body_bytes:,} bytes, the largest call the input caps allow "
        "(RUNNER_MAX_CODE_MB, RUNNER_MAX_STDIN_MB, RUNNER_MAX_INPUT_MB; see docs/http.md)"
    )
    return why, ""


class ExplainedRefusals:
    """ASGI middleware: the SDK's 421, 403 (Origin), 413 and 406 answers get a body that says what to change."""

    def __init__(self, app: ASGIApp, http: HttpConfig, logger: logging.Logger) -> None:
        self._app = app
        self._http = http
        self._log = logger
        self._refusals = {status: RefusalLog() for status in SDK_BODIES}  # one each: a flood of one hides no other

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        held: list[Message] = []  # a refusal's start, until its body shows whether it is the SDK's

        async def explaining(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in SDK_BODIES:
                held.append(message)
                return
            if held and message["type"] == "http.response.body":
                start = held.pop()
                status = start["status"]
                if message.get("body", b"") == SDK_BODIES[status] and not message.get("more_body", False):
                    text, allowed = explained(status, dict(scope["headers"]), self._http)
                    self._logged(status, text, allowed)
                    body = (text + "\n").encode()
                    unsaid = (b"content-length", b"content-type")
                    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in unsaid]
                    said = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"%d" % len(body))]
                    start = {**start, "headers": [*headers, *said]}
                    message = {**message, "body": body}
                await send(start)
            await send(message)

        await self._app(scope, receive, explaining)

    def _logged(self, status: int, why: str, allowed: str) -> None:
        count = self._refusals[status].note()
        if count:
            fields: dict[str, Any] = {"allowed": allowed} if allowed else {}
            if count > 1:
                fields["refused_since_last_line"] = count
            log_event(self._log, logging.WARNING, "HTTP request refused", status=status, why=why, **fields)


class CutErrorAnswers:
    """ASGI middleware: a JSON answer of a status of 400 or more (the SDK's refusals of a request, each a
    JSON-RPC error) says at most as much of its error's message and data as `cut_error` leaves. Answers
    of 200, results and the errors of the handlers (cut by the server's middleware), pass untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        start: Message | None = None  # a refusal's start, held until its whole body has come
        chunks: list[bytes] = []

        async def cutting(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400 and _is_json(message):
                start = message
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = _cut_answer(b"".join(chunks))
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self._app(scope, receive, cutting)


def _is_json(start: Message) -> bool:
    return any(
        key.lower() == b"content-type" and value.split(b";")[0].strip().lower() == b"application/json"
        for key, value in start.get("headers", [])
    )


def _cut_answer(body: bytes) -> bytes:
    """`body`, or, if it is a JSON-RPC error whose message or data `cut_error` cuts, that error cut."""
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        return body
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return body
    message, data = cut_error(error["message"], error.get("data"))
    if message == error["message"] and data == error.get("data"):
        return body
    error["message"] = message
    if "data" in error:
        error["data"] = data
    return json.dumps(answer, separators=(",", ":")).encode()
