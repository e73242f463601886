"""The answers that replace the SDK's 421, 403 and 413 bodies, and its JSON-RPC refusals cut
(runner/transports/refusals.py)."""

from __future__ import annotations

import json

import anyio
import pytest
from starlette.types import Message, Receive, Scope, Send

from runner.config import HttpConfig
from runner.transports.refusals import CutErrorAnswers, explained


def test_a_refused_host_or_origin_of_64_kib_is_said_back_cut_saying_so() -> None:
    # Found by a review: whatever Host or Origin a client sent was said back whole in the answer.
    http = HttpConfig(allowed_hosts=("runner.example:8000",), allowed_origins=("https://app.example",))
    huge = b"h" * 65536
    host, _ = explained(421, {b"host": huge}, http)
    origin, _ = explained(403, {b"origin": huge}, http)
    for why in (host, origin):
        assert len(why) < 500, len(why)
        assert "hhh... (cut: 65,536 characters)" in why


def answered(status: int, content_type: bytes, body: bytes) -> list[Message]:
    """What `CutErrorAnswers` sends of an app's answer of `status`, sent in two chunks."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body[:10], "more_body": True})
        await send({"type": "http.response.body", "body": body[10:], "more_body": False})

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        raise AssertionError("not read")

    anyio.run(CutErrorAnswers(app), {"type": "http"}, receive, send)
    return sent


def test_a_json_rpc_refusal_is_said_back_cut_its_length_told_anew() -> None:
    error = {"code": -32022, "message": "m" * 3000, "data": {"supported": ["2026-07-28"], "requested": "x" * 9000}}
    start, body = answered(400, b"application/json", json.dumps({"jsonrpc": "2.0", "id": 1, "error": error}).encode())
    said = json.loads(body["body"])["error"]
    assert said["message"] == "m" * 2000 + "... (cut: 3,000 characters)"
    assert said["data"] == {"supported": ["2026-07-28"], "requested": "x" * 2000 + "... (cut: 9,000 characters)"}
    assert dict(start["headers"])[b"content-length"] == str(len(body["body"])).encode()


@pytest.mark.parametrize(
    ("status", "content_type", "body"),
    [
        (200, b"application/json", json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"x": "x" * 9000}}).encode()),
        (400, b"text/plain", b"x" * 9000),
        (400, b"application/json", b"not json" + b"x" * 9000),
        (
            400,
            b"application/json",
            json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "short"}}).encode(),
        ),
    ],
    ids=["a result", "not json", "not parsed", "short already"],
)
def test_what_is_no_long_json_rpc_refusal_passes_as_it_came(status: int, content_type: bytes, body: bytes) -> None:
    sent = answered(status, content_type, body)
    assert b"".join(message.get("body", b"") for message in sent[1:]) == body
