"""A downstream server over Streamable HTTP: the official SDK's transport (`streamable_http_client`) on
an httpx2 client of ours (`http_client`), the SDK's own but for its event hooks (`Hooks`), which bound
what the server sends where the SDK does not.

The SDK reads a body that is not an event stream whole, with no bound (a JSON answer, an error's, a
redirect's it follows, the DELETE's at the end): one that never ended took the whole server's memory.
It reads an event stream event by event, each within 1 MiB, but what is no message there (comments,
events of a type it does not know) never reaches the session's rations (`Rationed`), and it opens the
stream of the server's own messages (GET) again after whatever wait the server asks for, none too.
And a 404 to a request of our session says the server no longer has it, whatever its body says.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx2
from mcp.client.streamable_http import MCP_SESSION_ID
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

from runner.tools.rates import ByteRate

# A GET's event stream (the server's own messages, or a call's resumed) is read at most 1 MiB a second
# after 4 MiB at once (past it, reading waits, and the server with it), and a GET is sent at most once
# a second: comments at wire speed cost the event loop a whole core, and `retry: 0` and an end made
# hundreds of GETs a second.
GET_BYTES = (4 << 20, float(1 << 20))
GET_SECONDS = 1.0


def http_client(headers: dict[str, str], most_bytes: int, session_gone: Callable[[], None]) -> httpx2.AsyncClient:
    """The SDK's own client (`create_mcp_http_client`: its timeouts) with `headers`, and our `Hooks`;
    its transports httpx2's own (a proxy the environment names, say)."""
    hooks = Hooks(most_bytes, session_gone)
    return httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        event_hooks={"request": [hooks.request], "response": [hooks.response]},
    )


class Hooks:
    """httpx2's event hooks for one HTTP server's connection.

    A body that is not an event stream ends within `most` bytes and some: the SDK reads it whole, with
    no bound (a JSON answer; an error's; a redirect's it follows, of a GET or a POST; the DELETE's), and
    one that never ends would fill our memory. Past it, the body fails (`httpx2.StreamError`: that
    call's error, or the stream's). An event stream is read event by event, each bounded by the SDK
    (1 MiB), and may be open for hours: a GET's (the server's own messages; or a call's stream resumed)
    is read at a rate (`GET_BYTES`), and a GET is sent at most once a second (`GET_SECONDS`); a POST's
    carries a call's answer, as fast as it comes. A 404 to a request of our session calls
    `session_gone`, before the SDK reads what the server says of it."""

    def __init__(self, most: int, session_gone: Callable[[], None]) -> None:
        self._limit = most + (1 << 20)  # the envelope around a result a run may take whole
        self._session_gone = session_gone
        # One for all its GETs: a stream opened again starts no burst.
        self._bytes = ByteRate(GET_BYTES[0], GET_BYTES[1], anyio.current_time())
        self._next_get = -math.inf

    async def request(self, request: httpx2.Request) -> None:
        if request.method == "GET":
            now = anyio.current_time()
            wait, self._next_get = self._next_get - now, max(now, self._next_get) + GET_SECONDS
            if wait > 0:
                await anyio.sleep(wait)

    async def response(self, response: httpx2.Response) -> None:
        if response.status_code == 404 and MCP_SESSION_ID in response.request.headers:
            self._session_gone()
        if not _event_stream(response):
            response.stream = _BoundedBody(response.stream, self._limit)
        elif response.request.method == "GET":
            response.stream = _PacedBody(response.stream, self._bytes)


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


class _PacedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, rate: ByteRate) -> None:
        self._inner, self._rate = inner, rate

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            wait = self._rate.spend(len(chunk), anyio.current_time())
            if wait:
                await anyio.sleep(wait)  # the next chunk is read once this one's turn has come
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
