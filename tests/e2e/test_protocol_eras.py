"""Raw JSON-RPC over stdio, written by hand: every protocol era completes a session, and bad frames get
the JSON-RPC errors they deserve while the server keeps serving."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runner.config import Config
from runner.protocol.schemas import input_schema, output_schema
from tests.helpers import SEED_PLAIN, check_structured, settled_async
from tests.raw import RawSession, raw_server

pytestmark = pytest.mark.anyio

HANDSHAKE_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
MODERN = "2026-07-28"
MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}


@pytest.fixture
async def session(work_dir: Path, tmp_path: Path) -> AsyncIterator[RawSession]:
    async with raw_server(work_dir, tmp_path / "stderr.log") as session:
        yield session
    assert await settled_async(lambda: list(work_dir.iterdir())) == []


async def check_tools(session: RawSession, meta: dict[str, Any] | None = None) -> None:
    params: dict[str, Any] = {"_meta": meta} if meta else {}
    listed = await session.request("tools/list", params)
    [tool, close] = listed["result"]["tools"]
    assert (tool["name"], close["name"]) == ("run_python", "close_session")
    assert tool["inputSchema"] == input_schema(Config.from_env({}))
    assert tool["outputSchema"] == output_schema()
    call = {**params, "name": "run_python", "arguments": {"code": "print(sum(range(10)))"}}
    result = (await session.request("tools/call", call))["result"]
    assert result["isError"] is False
    assert re.fullmatch(SEED_PLAIN, result["content"][0]["text"])
    assert check_structured(result["structuredContent"])["stdout"] == "45\n"


@pytest.mark.parametrize("version", HANDSHAKE_VERSIONS)
async def test_every_handshake_version_completes_a_session(session: RawSession, version: str) -> None:
    result = await session.initialize(version)
    assert result["protocolVersion"] == version
    assert result["serverInfo"]["name"] == "python-runner-mcp"
    assert "tools" in result["capabilities"]
    assert (await session.request("ping"))["result"] == {}
    await check_tools(session)


async def test_the_2026_era_completes_a_session_from_discover(session: RawSession) -> None:
    discovered = (await session.request("server/discover", {"_meta": MODERN_META}))["result"]
    assert MODERN in discovered["supportedVersions"]
    assert "tools" in discovered["capabilities"]
    await check_tools(session, MODERN_META)
    # ping does not exist in this era.
    assert (await session.request("ping", {"_meta": MODERN_META}))["error"]["code"] == -32601


async def test_an_unknown_protocol_version_is_answered_with_one_the_server_speaks(session: RawSession) -> None:
    result = await session.initialize("1999-01-01")
    assert result["protocolVersion"] in HANDSHAKE_VERSIONS


async def test_a_request_before_initialize_gets_an_error_and_the_session_can_still_start(session: RawSession) -> None:
    early = await session.request("tools/list")
    assert early["error"]["code"] == -32602
    assert (await session.initialize())["protocolVersion"] == "2025-11-25"
    await check_tools(session)


@pytest.mark.parametrize(
    ("frame", "request_id", "code"),
    [
        (b"{this is not json\n", None, -32700),
        (b"\xff\xfe garbage\n", None, -32700),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]\n', None, -32600),
        (b'"just a string"\n', None, -32600),
        (b'{"id": 31, "method": "ping"}\n', 31, -32600),
        (b'{"jsonrpc": "2.0", "id": 32, "method": "tools/call", "params": "code"}\n', 32, -32600),
        (b'{"jsonrpc": "2.0", "id": 33, "method": "no/such/method", "params": {}}\n', 33, -32601),
        (b'{"jsonrpc": "2.0", "id": 34, "method": "tools/call", "params": {"name": 5}}\n', 34, -32602),
        (b'{"jsonrpc": "2.0", "id": "s35", "method": "tools/call", "params": {}}\n', "s35", -32602),
    ],
)
async def test_a_bad_frame_gets_its_json_rpc_error_and_the_server_keeps_serving(
    session: RawSession, frame: bytes, request_id: int | str | None, code: int
) -> None:
    await session.initialize()
    await session.send_line(frame)
    answer = await session.response(request_id)
    assert answer["error"]["code"] == code
    assert answer["error"]["message"]
    await check_tools(session)
