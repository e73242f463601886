"""A downstream server over Streamable HTTP: the official SDK's transport (`streamable_http_client`) on
an httpx2 client of ours (`http_client`), the SDK's own but for its event hooks (`Hooks`), which bound
what the server sends where the SDK does not; and a call given up hung up (`_Transport`).

The SDK reads a body that is not an event stream whole, with no bound (a JSON answer, an error's, a
redirect's it follows, the DELETE's at the end): one that never ended took the whole server's memory.
It reads an event stream event by event, each bounded, but what is no message there (comments,
events of a type it does not know) never reaches the session's rations (`Rationed`), and it opens the
stream of the server's own messages (GET) again after whatever wait the server asks for, none too.
A 404 to a request of our session says the server no longer has it, whatever its body says; one to a
request without a session that is no JSON-RPC error says the endpoint is not there (the SDK's own word
for it, METHOD_NOT_FOUND, read as the server's answer, kept a gone endpoint "alive"). And it
hangs up the stream of a call given up (its POST's, or that stream resumed) only when the server
speaks 2026-07-28: with an earlier one it read on for as long as the server wrote. A long message,
in a JSON body or an event, is parsed as a stdio server's long line is (`runner.tools.messages`).
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx2
from httpx2 import ServerSentEvent
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import MCP_SESSION_ID, StreamableHTTPTransport
from mcp.shared._compat import resync_tracer
from mcp.shared._context_streams import create_context_streams
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage
from mcp.types import (
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from runner.rates import Pace
from runner.tools.messages import PARSED_IN_TWO, message_of

logger = logging.getLogger(__name__)
MAX_COOKIES = 20  # an HTTP server's cookies a connection keeps (`FewCookies`): a browser keeps 50 a site
MAX_COOKIE_BYTES = 4096  # a cookie's name and value at most, as RFC 6265 asks a client to keep at least

# A GET's event stream (the server's own messages, or a call's resumed) is read at most 1 MiB a second
# after 4 MiB at once (past it, reading waits, and the server with it), and a GET is sent at most once
# a second: comments at wire speed cost the event loop a whole core, and `retry: 0` and an end made
# hundreds of GETs a second.
# Around a result a run may take whole (`most_bytes`), what its message may hold more: a body that is no
# event stream, and an event, are bounded by the two together.
ENVELOPE = 1 << 20
GET_BYTES = (4 << 20, float(1 << 20))
GET_SECONDS = 1.0
# A call's stream (its POST's answer) is read at most 32 MiB a second after as much as a run may take
# at once, as a stdio server's stdout is (`runner.tools.stdio`): each byte is parsed on the event loop.
CALL_BYTES_PER_SECOND = float(32 << 20)
# The lines of all of a server's event streams, at most: each costs the SDK's parser 0.1-1.3 us
# (comment lines at wire speed kept the loop busy for as long as a call waited), and a legitimate
# server's take three or four a message.
LINES = (100_000, 20_000.0)
# Why the connection is lost at an HTTP 404, said to its `gone` callback: to a request of our session,
# the server no longer has it (started again, say), and the spec has the client start a new one; to a
# request without one, in words that are no JSON-RPC error, the URL is wrong or the endpoint is gone
# (the SDK calls it METHOD_NOT_FOUND, which is an answer to a ping). A JSON-RPC error in a 404 is the
# server's answer, whatever it says; its body is read for it within ENVELOPE (past it, not one).
SESSION_GONE = "the server no longer has our session (HTTP 404)"
ENDPOINT_GONE = "its endpoint answered 404 to a request without a session (a wrong URL, or gone)"


def http_client(
    headers: dict[str, str], most_bytes: int, gone: Callable[[str], None], answered: Callable[[str], None]
) -> httpx2.AsyncClient:
    """The SDK's own client (`create_mcp_http_client`: its timeouts) with `headers`, and our `Hooks`;
    its transports httpx2's own (a proxy the environment names, say)."""
    hooks = Hooks(most_bytes, gone, answered)
    return httpx2.AsyncClient(
        # Bodies as they are sent: httpx2 decodes a compressed one after our bounds have read it, so
        # 300 KiB of gzip were 300 MiB in the server's memory (found by a review); one compressed all
        # the same is refused (`Hooks.response`). Ours, whatever the file's headers say.
        headers={**{k: v for k, v in headers.items() if k.lower() != "accept-encoding"}, "Accept-Encoding": "identity"},
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        event_hooks={"request": [hooks.request], "response": [hooks.response]},
        cookies=FewCookies().jar,
    )


class FewCookies(http.cookiejar.DefaultCookiePolicy):
    """The cookies an HTTP server sets, kept as a client would (a load balancer's affinity cookie works),
    but at most MAX_COOKIES of at most MAX_COOKIE_BYTES each: every request carries them all, built on the
    event loop every run shares (found by a review: a server setting 4,000 cookies an answer made a run
    that used no tool take 6.4 s, and grew the server without end). One past the bound is not kept."""

    def __init__(self) -> None:
        super().__init__()
        self.jar = http.cookiejar.CookieJar(policy=self)

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        if len(cookie.name) + len(cookie.value or "") > MAX_COOKIE_BYTES:
            return False
        held = [(held.name, held.domain, held.path) for held in self.jar]
        if len(held) >= MAX_COOKIES and (cookie.name, cookie.domain, cookie.path) not in held:
            return False
        return bool(super().set_ok(cookie, request))


class Hooks:
    """httpx2's event hooks for one HTTP server's connection.

    A body that is not an event stream ends within `most` bytes and some: the SDK reads it whole, with
    no bound (a JSON answer; an error's; a redirect's it follows, of a GET or a POST; the DELETE's), and
    one that never ends would fill our memory. Past it, the body fails (`httpx2.StreamError`: that
    call's error, or the stream's). An event stream is read event by event, each bounded by the SDK
    (as `most` and some: `streamable_http_client`), and may be open for hours: a GET's (the server's
    own messages; or a call's stream resumed) is read at a rate (`GET_BYTES`), and a GET is sent at
    most once a second (`GET_SECONDS`); a POST's carries a call's answer, read at a rate after as
    much as a run may take at once (`CALL_BYTES_PER_SECOND`); and the lines of all of them at a rate
    (`LINES`). A 404 to a request of our session, or one without a session that is no JSON-RPC error,
    calls `gone` with why (`SESSION_GONE`, `ENDPOINT_GONE`), before the SDK reads what the server
    says of it; another error status, `answered` with it (the SDK says "Server returned an error
    response" and no more)."""

    def __init__(self, most: int, gone: Callable[[str], None], answered: Callable[[str], None]) -> None:
        self._limit = most + ENVELOPE
        self._gone, self._answered = gone, answered
        # One of each for all its streams: a stream opened again starts no burst.
        now = anyio.current_time()
        self._get_bytes = Pace(GET_BYTES[0], GET_BYTES[1], now)
        self._call_bytes = Pace(self._limit, CALL_BYTES_PER_SECOND, now)
        self._lines = Pace(LINES[0], LINES[1], now)
        self._next_get = -math.inf

    async def request(self, request: httpx2.Request) -> None:
        if request.method == "GET":
            now = anyio.current_time()
            wait, self._next_get = self._next_get - now, max(now, self._next_get) + GET_SECONDS
            if wait > 0:
                await anyio.sleep(wait)

    async def response(self, response: httpx2.Response) -> None:
        # Before anything reads the body (a 404's is read for a JSON-RPC error): httpx2 would decode it
        # past every bound (found by a second look: gzip of gzip, 496 bytes sent, 200 MiB read).
        encoding = _encoding(response)
        if response.status_code >= 400 and response.status_code != 404 and response.request.method == "POST":
            # A POST's: the SDK's stand-in for it is what fails (a GET's or the DELETE's at the teardown
            # is not, and would say another status: found by a review, a 405 to the DELETE).
            # Whole (h11 bounds a status line): a credential it echoes is masked before it is cut (found
            # by a review: cut first, a key's first 15 characters reached runs and the log).
            self._answered(f"it answered HTTP {response.status_code} {response.reason_phrase}".rstrip())
        if response.status_code == 404:
            if MCP_SESSION_ID in response.request.headers:
                self._gone(SESSION_GONE)
            elif encoding or not await _jsonrpc_error(response):
                self._gone(ENDPOINT_GONE)
        if encoding:
            response.stream = _RefusedBody(response.stream, encoding)
        elif not _event_stream(response):
            response.stream = _BoundedBody(response.stream, self._limit)
        else:
            size = self._get_bytes if response.request.method == "GET" else self._call_bytes
            response.stream = _PacedBody(response.stream, size, self._lines)


async def _jsonrpc_error(response: httpx2.Response) -> bool:
    """Whether `response` (a 404) holds a JSON-RPC error, as the SDK tells it, its body read within
    ENVELOPE (the SDK then reads what was read: a body past it fails there too)."""
    if not response.headers.get("content-type", "").lower().startswith("application/json"):
        return False  # the SDK does not read it
    response.stream = _BoundedBody(response.stream, ENVELOPE)
    try:
        body = await response.aread()
        return isinstance(jsonrpc_message_adapter.validate_json(body, by_name=False), JSONRPCError)
    except (httpx2.StreamError, ValidationError):
        return False


def _encoding(response: httpx2.Response) -> str:
    """The Content-Encoding of `response` but identity ('' if none): what httpx2 would decode, past
    every bound on what was read."""
    codings = [c.strip().lower() for c in response.headers.get_list("content-encoding", split_commas=True)]
    return ", ".join(c for c in codings if c not in ("", "identity"))[:100]


def _event_stream(response: httpx2.Response) -> bool:
    """Whether the SDK reads `response` as an event stream: a success (a redirect's body it reads whole,
    whatever it says it is), of the type the SDK's `EventSource` takes."""
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    return response.is_success and kind == "text/event-stream"


class _BoundedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, most: int) -> None:
        self._inner, self._most = inner, most

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._most:
                raise httpx2.StreamError(f"an answer of more than {self._most:,} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _RefusedBody(httpx2.AsyncByteStream):
    """A body compressed although we asked for none: it fails at its first read (that call's error, or
    the stream's), none of it decoded."""

    def __init__(self, inner: Any, encoding: str) -> None:
        self._inner, self._encoding = inner, encoding

    async def __aiter__(self) -> AsyncIterator[bytes]:
        raise httpx2.StreamError(f"an answer compressed ({self._encoding}) although none was asked for")
        yield b""  # pragma: no cover  (an async generator)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _PacedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, size: Pace, lines: Pace) -> None:
        self._inner, self._size, self._lines = inner, size, lines

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            now = anyio.current_time()
            # An event stream's line ends at CR, LF or both (a CRLF counted twice: no matter).
            ends = chunk.count(b"\n") + chunk.count(b"\r")
            wait = max(self._size.spend(len(chunk), now), self._lines.spend(ends, now))
            if wait:
                await anyio.sleep(wait)  # the next chunk is read once this one's turn has come
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


@contextlib.asynccontextmanager
async def streamable_http_client(
    url: str, http_client: httpx2.AsyncClient, most_bytes: int
) -> AsyncIterator[TransportStreams]:
    """The SDK's `streamable_http_client(url, http_client=http_client)`, its transport ours
    (`_Transport`), an event as large as a result a run may take (`most_bytes`) and its envelope: the
    SDK's 1 MiB failed larger results from a server that answers in an event stream (the SDK's own
    servers do), which in JSON passed. Its own code but for that (mcp==2.3.0's, the SDK's pinned
    version: the private helpers are its)."""
    transport = _Transport(url, max_sse_event_size=most_bytes + ENVELOPE)
    read_stream_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_stream_reader = create_context_streams[SessionMessage](0)
    async with read_stream_writer, read_stream, write_stream, write_stream_reader, anyio.create_task_group() as tg:

        def start_get_stream() -> None:
            tg.start_soon(transport.handle_get_stream, http_client, read_stream_writer)

        writer = transport.post_writer
        tg.start_soon(writer, http_client, write_stream_reader, read_stream_writer, write_stream, start_get_stream, tg)
        try:
            yield read_stream, write_stream
        finally:
            if transport.session_id:
                await transport.terminate_session(http_client)
            tg.cancel_scope.cancel()
    await resync_tracer()


class _Transport(StreamableHTTPTransport):
    """The SDK's transport, which hangs up a call given up whatever the server speaks, and parses a
    long message as a stdio server's long line is (`message_of`): the SDK's `validate_json` took 2.7x
    as long on the event loop (an 18 MiB result of small values: 0.38 s, now 0.14 s).

    When a call is given up (its time is out, or its run ended) the SDK sends `notifications/cancelled`
    for it. At 2026-07-28 that hangs up the call's stream (its POST's, or the stream resumed: the same
    task), which is the cancellation there; below it, the notification is POSTed and the stream read on
    for as long as the server writes it, or resumed each time it ends after an event with an id. The
    spec lets a client hang up at any time; the call's answer, if it ever came, would go to no one."""

    def _consume_modern_cancellation(self, session_message: SessionMessage) -> bool:
        message = session_message.message
        if isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            request_id = cancelled_request_id_from_params(message.params)
            post = self._in_flight_posts.get(request_id) if request_id is not None else None
            if post is not None and not post.modern:
                post.scope.cancel()  # and the notification is POSTed, as the SDK does below 2026-07-28
                return False
        return super()._consume_modern_cancellation(session_message)

    async def _handle_json_response(
        self, response: httpx2.Response, read_stream_writer: Any, *, request_id: RequestId
    ) -> None:
        """The SDK's, its body parsed by `message_of`."""
        try:
            message = message_of(await response.aread())
        except (httpx2.StreamError, ValueError) as exc:
            logger.debug("an answer from a tool server did not parse", exc_info=True)
            error = ErrorData(code=PARSE_ERROR, message=f"Failed to parse JSON response: {exc}")
            await read_stream_writer.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=error)))
            return
        await read_stream_writer.send(SessionMessage(message))

    async def _handle_sse_event(
        self,
        sse: ServerSentEvent,
        read_stream_writer: Any,
        original_request_id: RequestId | None = None,
        resumption_callback: Callable[[str], Awaitable[None]] | None = None,
    ) -> bool:
        """The SDK's, a long message parsed by `message_of`: whether it was the answer."""
        if sse.event != "message" or len(sse.data) <= PARSED_IN_TWO:
            return await super()._handle_sse_event(sse, read_stream_writer, original_request_id, resumption_callback)
        try:
            message = message_of(sse.data)
        except ValueError as exc:
            logger.debug("an event from a tool server did not parse", exc_info=True)
            if original_request_id is None:
                await read_stream_writer.send(exc)
                return False
            error = ErrorData(code=PARSE_ERROR, message=f"Failed to parse SSE message: {exc}")
            await read_stream_writer.send(
                SessionMessage(JSONRPCError(jsonrpc="2.0", id=original_request_id, error=error))
            )
            return True
        answer = isinstance(message, JSONRPCResponse | JSONRPCError)
        if original_request_id is not None and answer:
            message.id = original_request_id  # type: ignore[union-attr]
        await read_stream_writer.send(SessionMessage(message))
        if sse.id and resumption_callback:
            await resumption_callback(sse.id)
        return answer
