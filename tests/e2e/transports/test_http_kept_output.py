"""The whole of a cut stream over Streamable HTTP, against `python -m runner --transport http` as a real
process: read back byte for byte by the token that ran it, "resource not found" for another token, for
a link that expired and for one evicted to make room."""

from __future__ import annotations

import base64
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import MCPError

from runner.protocol.view import VIEW_URI
from tests.e2e.transports.test_http_sessions import ALICE, BOB, client_for
from tests.helpers import SIX_MB_CODE, SIX_MB_OUTPUT, check_structured
from tests.http_server import http_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def links_of(result: types.CallToolResult) -> list[types.ResourceLink]:
    return [block for block in result.content if isinstance(block, types.ResourceLink)]


async def test_a_6_mb_stdout_is_read_back_byte_for_byte_by_its_token_and_is_not_found_for_another(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice:{ALICE}\nbob:{BOB}\n")
    with http_server(work_dir, tmp_path / "log", RUNNER_AUTH_TOKENS_FILE=str(tokens)) as server:
        async with client_for(server, ALICE) as alice, client_for(server, BOB) as bob:
            result = await alice.call_tool("run_python", {"code": SIX_MB_CODE})
            structured = check_structured(result.structured_content)
            assert structured["stdout_truncated"]
            [link] = links_of(result)
            assert (link.name, link.size) == ("stdout", len(SIX_MB_OUTPUT))
            read = await alice.read_resource(link.uri)
            with pytest.raises(MCPError) as foreign:
                await bob.read_resource(link.uri)
            listed_by_bob = await bob.list_resources()
            listed_by_alice = await alice.list_resources()
        assert server.stop() == 0
    [contents] = read.contents
    assert isinstance(contents, types.TextResourceContents)
    assert contents.text.encode() == SIX_MB_OUTPUT
    assert foreign.value.code == -32602
    assert "resource not found" in foreign.value.message
    # Each lists the app view (every caller's), and only its own kept output.
    assert [str(r.uri) for r in listed_by_bob.resources] == [VIEW_URI]
    assert [str(r.uri) for r in listed_by_alice.resources] == [VIEW_URI, str(link.uri)]


async def test_a_link_past_its_time_or_evicted_for_a_newer_one_is_resource_not_found(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    # Room for one 6 MB stream per caller: the second evicts the first. One second to live.
    env = {"RUNNER_MAX_KEPT_CALLER_MB": "8", "RUNNER_KEPT_OUTPUT_SECONDS": "1"}
    with http_server(work_dir, tmp_path / "log", **env) as server:
        async with client_for(server, None) as client:
            [first] = links_of(await client.call_tool("run_python", {"code": SIX_MB_CODE}))
            [second] = links_of(await client.call_tool("run_python", {"code": SIX_MB_CODE}))
            with pytest.raises(MCPError, match="resource not found"):
                await client.read_resource(first.uri)
            await client.read_resource(second.uri)
            await anyio.sleep(1.2)  # past the second's time
            with pytest.raises(MCPError, match="resource not found"):
                await client.read_resource(second.uri)
            assert [str(r.uri) for r in (await client.list_resources()).resources] == [VIEW_URI]
        assert server.stop() == 0


async def test_a_file_over_the_budgets_is_linked_and_read_back_byte_for_byte_by_its_token_only(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice:{ALICE}\nbob:{BOB}\n")
    code = "open('data.bin', 'wb').write(bytes(range(256)) * 1000)\nopen('rows.csv', 'w').write('a,b\\n' * 50_000)"
    with http_server(work_dir, tmp_path / "log", RUNNER_AUTH_TOKENS_FILE=str(tokens)) as server:
        async with client_for(server, ALICE) as alice, client_for(server, BOB) as bob:
            result = await alice.call_tool("run_python", {"code": code})
            structured = check_structured(result.structured_content)  # the output schema has linked_files
            links = {link.name: link for link in links_of(result)}
            binary = await alice.read_resource(links["data.bin"].uri)
            rows = await alice.read_resource(links["rows.csv"].uri)
            with pytest.raises(MCPError, match="resource not found"):
                await bob.read_resource(links["rows.csv"].uri)
        assert server.stop() == 0
    assert {(f["path"], f["mime_type"], f["bytes"]) for f in structured["linked_files"]} == {
        ("data.bin", "application/octet-stream", 256_000),
        ("rows.csv", "text/csv", 200_000),
    }
    assert structured["not_returned"] == []
    [blob] = binary.contents
    assert isinstance(blob, types.BlobResourceContents)
    assert base64.b64decode(blob.blob) == bytes(range(256)) * 1000
    [text] = rows.contents
    assert isinstance(text, types.TextResourceContents)
    assert (text.mime_type, text.text) == ("text/csv", "a,b\n" * 50_000)
