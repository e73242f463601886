"""An HTTP tool server's messages (`runner.tools.streamable_http`): a long one, in a JSON body or an
event, is parsed as a stdio server's long line is (`runner.tools.messages`), not by the SDK's
`validate_json`, which took 2.7x as long on the event loop (18 MiB of small values: 0.38 s, not 0.14)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import mcp.client.streamable_http as sdk
import pytest
from httpx2 import ServerSentEvent
from mcp import types
from mcp.shared.message import SessionMessage

from runner.tools.messages import PARSED_IN_TWO
from runner.tools.streamable_http import _Transport

pytestmark = pytest.mark.anyio

RECORDS = [{"id": n, "name": f"n{n}", "ok": True} for n in range(4_000)]
LONG = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": [], "structuredContent": {"items": RECORDS}}})


@pytest.fixture
def validated_json(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths of what the SDK's transport gives `validate_json`, as it does."""
    lengths: list[int] = []
    adapter = sdk.jsonrpc_message_adapter

    class Spy:
        def validate_json(self, data: Any, **kwargs: Any) -> Any:
            lengths.append(len(data))
            return adapter.validate_json(data, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(adapter, name)

    monkeypatch.setattr(sdk, "jsonrpc_message_adapter", Spy())
    return lengths


async def received(handle: Any) -> list[SessionMessage | Exception]:
    """What `handle(writer)` sends the session."""
    writer, reader = anyio.create_memory_object_stream[SessionMessage | Exception](10)
    async with writer, reader:
        await handle(writer)
        return [reader.receive_nowait() for _ in range(reader.statistics().current_buffer_used)]


async def test_a_long_message_in_an_event_is_parsed_in_two_and_reaches_the_session(validated_json: list[int]) -> None:
    assert len(LONG) > PARSED_IN_TWO
    transport = _Transport("http://127.0.0.1:1/mcp")
    event = ServerSentEvent(event="message", data=LONG, id="e1")
    resumed: list[str] = []

    async def resumption(token: str) -> None:
        resumed.append(token)

    [got] = await received(lambda writer: transport._handle_sse_event(event, writer, 7, resumption))
    assert isinstance(got, SessionMessage)
    assert isinstance(got.message, types.JSONRPCResponse)
    assert got.message.id == 7
    assert got.message.result["structuredContent"]["items"] == RECORDS
    assert resumed == ["e1"]
    assert all(length <= PARSED_IN_TWO for length in validated_json), validated_json


async def test_a_long_event_that_does_not_parse_fails_its_call_as_the_sdk_says_it(validated_json: list[int]) -> None:
    transport = _Transport("http://127.0.0.1:1/mcp")
    event = ServerSentEvent(event="message", data=LONG[:-1])
    [got] = await received(lambda writer: transport._handle_sse_event(event, writer, 7))
    assert isinstance(got, SessionMessage)
    assert isinstance(got.message, types.JSONRPCError)
    assert got.message.id == 7
    assert got.message.error.code == types.PARSE_ERROR
    assert validated_json == []


async def test_a_long_message_in_a_json_body_is_parsed_in_two_and_its_fault_said_as_the_sdk_says_it(
    validated_json: list[int],
) -> None:
    transport = _Transport("http://127.0.0.1:1/mcp")
    response = httpx2.Response(200, content=LONG.encode())
    [got] = await received(lambda writer: transport._handle_json_response(response, writer, request_id=1))
    assert isinstance(got, SessionMessage)
    assert isinstance(got.message, types.JSONRPCResponse)
    assert got.message.result["structuredContent"]["items"] == RECORDS
    broken = httpx2.Response(200, content=LONG[:-1].encode())
    [failed] = await received(lambda writer: transport._handle_json_response(broken, writer, request_id=1))
    assert isinstance(failed, SessionMessage)
    assert isinstance(failed.message, types.JSONRPCError)
    assert failed.message.error.code == types.PARSE_ERROR
    assert validated_json == []


@pytest.mark.parametrize("kind", ["application/json", "text/event-stream"])
async def test_a_compressed_answer_fails_unread_and_none_is_asked_for(kind: str) -> None:
    # Found by a review: the bounds read the bytes as sent, and httpx2 decoded them after; 300 KiB of
    # gzip were 300 MiB in the server's memory, and a gzip'd event stream passed the line pace.
    import gzip

    asked: list[str] = []
    body = gzip.compress(b"x" * (8 << 20))

    def answer(request: httpx2.Request) -> httpx2.Response:
        asked.append(request.headers.get("accept-encoding", ""))

        async def sent() -> AsyncIterator[bytes]:  # streamed, as a server's is: not read at once
            yield body

        return httpx2.Response(200, headers={"content-type": kind, "content-encoding": "gzip"}, content=sent())

    from runner.tools.streamable_http import http_client

    async with http_client({"accept-encoding": "gzip, br"}, 1 << 20, lambda _why: None, lambda _said: None) as client:
        client._transport = httpx2.MockTransport(answer)
        async with client.stream("POST", "http://127.0.0.1:1/mcp", content=b"{}") as response:
            with pytest.raises(httpx2.StreamError, match=r"compressed \(gzip\) although none was asked for"):
                await response.aread()
    assert asked == ["identity"], "ours, whatever the file's headers say"


async def test_an_answer_said_to_be_identity_is_read_as_it_is() -> None:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-encoding": "identity"}, content=b'{"ok": 1}')

    from runner.tools.streamable_http import http_client

    async with http_client({}, 1 << 20, lambda _why: None, lambda _said: None) as client:
        client._transport = httpx2.MockTransport(answer)
        response = await client.post("http://127.0.0.1:1/mcp", content=b"{}")
        assert response.json() == {"ok": 1}


async def test_a_server_setting_thousands_of_cookies_has_twenty_kept_an_affinity_cookie_among_them() -> None:
    # Found by a review: every cookie an HTTP server set was kept and sent back on every request, built on
    # the event loop: 4,000 an answer made a run that used no tool take 6.4 s, and the server grew.
    sent: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.headers.get("cookie", ""))
        many = [("set-cookie", f"c{len(sent)}_{n}=v") for n in range(4000)]
        return httpx2.Response(200, headers=[("set-cookie", "AWSALB=sticky"), *many], content=b"{}")

    from runner.tools.streamable_http import MAX_COOKIES, http_client

    async with http_client({}, 1 << 20, lambda _why: None, lambda _said: None) as client:
        client._transport = httpx2.MockTransport(answer)
        for _ in range(3):
            await client.post("http://127.0.0.1:1/mcp", content=b"{}")
        huge = {"set-cookie": "AWSALB=" + "x" * 5000}
        client._transport = httpx2.MockTransport(lambda _: httpx2.Response(200, headers=huge))
        await client.post("http://127.0.0.1:1/mcp", content=b"{}")
        assert len(client.cookies.jar) == MAX_COOKIES
        assert client.cookies.get("AWSALB") == "sticky", "a cookie past its bytes is not kept"
    assert sent[0] == ""
    assert sent[1].split("; ")[0] == "AWSALB=sticky", "the first cookie set is kept, and sent back"
    assert len(sent[2].split("; ")) == MAX_COOKIES, "no more than the bound, however many come"


async def test_a_compressed_404_is_not_read_for_an_error_and_says_the_endpoint_gone() -> None:
    # Found by a second look: a 404's body was read for a JSON-RPC error before the encoding was looked
    # at, and httpx2 decoded it: gzip of gzip, 496 bytes sent, 200 MiB read.
    import gzip

    body = gzip.compress(gzip.compress(b"x" * (64 << 20)))
    gone: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        async def sent() -> AsyncIterator[bytes]:
            yield body

        headers = {"content-type": "application/json", "content-encoding": "gzip, gzip"}
        return httpx2.Response(404, headers=headers, content=sent())

    from runner.tools.streamable_http import ENDPOINT_GONE, http_client

    async with http_client({}, 1 << 20, gone.append, lambda _said: None) as client:
        client._transport = httpx2.MockTransport(answer)
        async with client.stream("POST", "http://127.0.0.1:1/mcp", content=b"{}") as response:
            with pytest.raises(httpx2.StreamError, match=r"compressed \(gzip, gzip\)"):
                await response.aread()
    assert gone == [ENDPOINT_GONE]


async def test_an_error_status_is_said_of_a_post_alone() -> None:
    # Found by a review: every error status was kept, and the SDK's teardown DELETE, answered 405 as the
    # spec allows, made a server whose tools/list failed with 500 "down: ... it answered HTTP 405".
    said: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(500 if request.method == "POST" else 405, content=b"no")

    from runner.tools.streamable_http import http_client

    async with http_client({}, 1 << 20, lambda _why: None, said.append) as client:
        client._transport = httpx2.MockTransport(answer)
        await client.post("http://127.0.0.1:1/mcp", content=b"{}")
        await client.get("http://127.0.0.1:1/mcp")
        await client.delete("http://127.0.0.1:1/mcp")
    assert said == ["it answered HTTP 500 Internal Server Error"]
