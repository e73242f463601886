"""MCP over Streamable HTTP, the wire side; runner/serving/http.py is the serving side (the process around it).

The SDK's own app, behind bearer tokens, served by uvicorn.

The SDK's `Server.streamable_http_app` does the protocol: every version the stdio server speaks
(2024-11-05 to 2025-11-25 in stateless mode, so no request needs the replica that saw an earlier
one, and 2026-07-28, which has no sessions at all), SSE for progress, the Host and Origin checks
(421, 403) and the body bound (413). This module adds what a remote server needs around it:

- `BearerAuth` in front of the MCP endpoint (`runner.transports.auth`);
- `PostedCancels`: a `notifications/cancelled` POSTed beside a request cancels it (`runner.transports.cancels`);
- `ExplainedRefusals`: the SDK's 421, 403 and 413 name the setting to change, and `CutErrorAnswers`: its
  JSON-RPC refusals say back what a client sent cut, as every answer does (`runner.transports.refusals`);
- /healthz, /readyz and /metrics, which carry no MCP and so need neither a token nor a known Host
  (a kubelet's probe names the pod's IP);
- a listening socket made before anything else starts (so that a port in use stops the start with a
  clear line, port 0 works, and workers can share it);
- shutdown on request: stop accepting, let requests in flight finish for `shutdown_grace` seconds,
  then cancel what is left (the runs are killed and cleaned by the pool as on stdio);
- idle kept-alive connections closed by their clients, not under them (`KEEP_ALIVE_SECONDS`);
- a deadline on each request's headers and body's pauses, and a bound on the connections held open
  (`runner.transports.connections`).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from runner.config import OPERATIONS_PATHS, HttpConfig
from runner.config.tokens import BearerTokens
from runner.logs import RefusalLog
from runner.transports.auth import CALLER_STATE_KEY, BearerAuth
from runner.transports.cancels import PostedCancels
from runner.transports.connections import ConnectionBounds, bounded_protocol
from runner.transports.refusals import CutErrorAnswers, ExplainedRefusals

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# How long a kept-alive connection may sit idle before the server closes it. Longer than any common client
# or proxy keeps one (httpx 5 s, Node's undici 4 s, nginx's upstream keepalive and cloud load balancers
# 60 s, Go's 90 s): a client reusing a connection just as the server closes it gets a reset with its
# request unanswered, and does not retry a POST. uvicorn's 5 s equalled httpx's own expiry, and on a busy
# machine a client's request met the server's close (64 clients of 20 calls each: 4 ReadErrors in a run).
KEEP_ALIVE_SECONDS = 120


def caller_of(request: object) -> str | None:
    """The name of the token an HTTP request came with (set by `BearerAuth`), if any."""
    scope = getattr(request, "scope", None)
    state = scope.get("state") if isinstance(scope, dict) else None
    caller = state.get(CALLER_STATE_KEY) if isinstance(state, dict) else None
    return caller if isinstance(caller, str) else None


def name_header_of(request: object) -> str | None:
    """The Mcp-Name header of an HTTP request, decoded (SEP-2243's base64 form included); None without one."""
    headers = getattr(request, "headers", None)
    if headers is None:
        return None
    value = headers.get(MCP_NAME_HEADER)
    return decode_header_value(value.strip()) if isinstance(value, str) else None


def http_app(
    server: Server[Any],
    http: HttpConfig,
    tokens: BearerTokens | None,
    ready: Callable[[], str | None],
    metrics: Callable[[], Awaitable[bytes]],
    logger: logging.Logger,
) -> ASGIApp:
    """The whole ASGI app. `ready()` says why the server is not ready, or None; `metrics()` is the
    Prometheus text for a scrape."""

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(request: Request) -> Response:
        why = ready()
        return PlainTextResponse("ready\n" if why is None else f"not ready: {why}\n", 200 if why is None else 503)

    async def scrape(request: Request) -> Response:
        return Response(await metrics(), media_type=METRICS_CONTENT_TYPE)

    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(http.allowed_hosts),
        allowed_origins=list(http.allowed_origins),
    )
    app = server.streamable_http_app(
        streamable_http_path=http.path,
        stateless_http=True,
        transport_security=security,
        max_request_body_size=http.max_body_bytes,
        host=http.host,
        custom_starlette_routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", scrape, methods=["GET"]),
        ],
    )
    mcp = PostedCancels(CutErrorAnswers(app), http.path, http.max_body_bytes, security, anonymous_cancels=http.loopback)
    guarded = BearerAuth(mcp, tokens, logger, RefusalLog()) if tokens is not None else mcp
    return _Front(app, ExplainedRefusals(guarded, http, logger), http.path)


NO_OAUTH = (
    "python-runner-mcp has no OAuth: it takes static bearer tokens (Authorization: Bearer <token>). "
    "A client that asks for OAuth was refused its token: check the token.\n"
)


class _Front:
    """Operations endpoints go straight to the app; everything else through authentication. The MCP
    endpoint takes POST only: stateless, a GET stream would never carry anything (and would hold a
    connection and the shutdown's grace), and there is no session to DELETE."""

    def __init__(self, app: ASGIApp, guarded: ASGIApp, path: str) -> None:
        self._app = app
        self._guarded = guarded
        self._path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPERATIONS_PATHS:
            await self._app(scope, receive, send)
        elif scope["path"].startswith("/.well-known/"):
            # No OAuth metadata: a 401 there made OAuth clients (the Inspector) start an OAuth flow for
            # a token that was only wrong (found by a first hour); a 404 tells them there is none.
            await PlainTextResponse(NO_OAUTH, 404)(scope, receive, send)
        elif scope["path"] == self._path and scope["method"] != "POST":
            await PlainTextResponse("Method Not Allowed\n", 405, headers={"allow": "POST"})(scope, receive, send)
        else:
            await self._guarded(scope, receive, send)


class HttpServer:
    """uvicorn on a listening socket of ours. `serve()` returns after `stop()` and the grace period."""

    def __init__(self, app: ASGIApp, http: HttpConfig, sock: socket.socket, logger: logging.Logger) -> None:
        self._sock = sock
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="on",
            ws="none",
            server_header=False,
            proxy_headers=False,
            timeout_graceful_shutdown=http.shutdown_grace,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            http=bounded_protocol(ConnectionBounds(http.client_seconds, http.max_connections, logger)),
        )
        self._server = _QuietServer(config)

    async def serve(self) -> None:
        """Serve until `stop()`; requests still open after the grace are cancelled."""
        await self._server.serve(sockets=[self._sock])

    def stop(self) -> None:
        """Stop accepting; requests in flight get the grace period. A second call stops at once."""
        if self._server.should_exit:
            self._server.force_exit = True
        self._server.should_exit = True


class _QuietServer(uvicorn.Server):
    """uvicorn without its own signal handling: the server's signal task decides when to stop (uvicorn
    would re-raise SIGTERM after its shutdown, ending the process before the pool is cleaned up)."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def url_of(sock: socket.socket, path: str) -> str:
    """Where clients find the MCP endpoint on `sock`."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"


def reached_as(sock: socket.socket, allowed_hosts: tuple[str, ...]) -> dict[str, str]:
    """The log's word on how clients reach a server bound to every address (0.0.0.0, ::): by the Host
    names it allows, not by the address in its URL (found by a first hour: http://0.0.0.0:8000/mcp
    was logged, which no client can use, and its Host gets 421). Nothing for one address."""
    host = sock.getsockname()[0]
    if host not in ("0.0.0.0", "::") or not allowed_hosts:  # noqa: S104  (told, not bound)
        return {}
    return {"clients_use_hosts": ",".join(allowed_hosts)}


def listening(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host`:`port` (0: any free port). Raises `OSError` (in use, no such
    address) before anything else starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP said outright: asyncio sets TCP_NODELAY only on connections of a socket whose proto
    # is IPPROTO_TCP, and with proto 0 every answer on a kept-alive connection waited ~40 ms for the
    # client's delayed ACK (Nagle's algorithm holding the response's last chunk).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock
