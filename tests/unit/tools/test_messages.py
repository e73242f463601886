"""A downstream server's message as it is parsed (`message_of`) and a listed tool as it is kept
(`kept_tool`), without a server."""

from __future__ import annotations

import json

from mcp import types

from runner.config import Downstream
from runner.tools.credentials import Credentials
from runner.tools.messages import MAX_BLOCKS, MAX_TOOLS, PARSED_IN_TWO, kept_tool, listed_bytes, message_of


def test_an_answer_of_more_content_blocks_than_the_bound_is_an_error_for_its_call() -> None:
    # Found by a review: pydantic checked a million empty blocks for 5.4 s on the event loop.
    blocks = [{"type": "text", "text": ""}] * (MAX_BLOCKS + 1) + [{"type": "text", "text": "x" * PARSED_IN_TWO}]
    message = message_of(json.dumps({"jsonrpc": "2.0", "id": 3, "result": {"content": blocks}}))
    assert isinstance(message, types.JSONRPCError)
    assert message.error.message == "its answer has 1,002 content blocks, more than 1,000"
    within = blocks[: MAX_BLOCKS - 1] + blocks[-1:]
    message = message_of(json.dumps({"jsonrpc": "2.0", "id": 3, "result": {"content": within}}))
    assert isinstance(message, types.JSONRPCResponse)


def test_a_listing_of_more_tools_than_are_kept_has_the_rest_left_out_before_they_are_checked() -> None:
    tools = [{"name": f"t{n}", "inputSchema": {"type": "object"}} for n in range(MAX_TOOLS * 3)]
    message = message_of(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}))
    assert isinstance(message, types.JSONRPCResponse)
    assert [tool["name"] for tool in message.result["tools"]] == [f"t{n}" for n in range(MAX_TOOLS)]


def test_a_kept_tool_holds_no_title_icons_annotations_nor_meta_and_is_counted_whole() -> None:
    # Found by a review: 60 MiB of `_meta` a tool were neither counted nor cut, 1.9 GB held.
    big = "m" * 100_000
    tool = types.Tool(
        name="t",
        title=big,
        description="d" * 5000,
        input_schema={"type": "object"},
        icons=[types.Icon(src="data:," + big)],
        annotations=types.ToolAnnotations(title=big),
        _meta={"x": big},
    )
    kept = kept_tool(tool, Credentials(Downstream("s", "s", ("*",), None, command="x")))
    assert len(kept.model_dump_json(by_alias=True, exclude_none=True)) < listed_bytes(kept) + 200
    assert kept.title is kept.icons is kept.annotations is kept.meta is None
    assert kept.description is not None
    assert len(kept.description) == 2000
    assert kept.input_schema == {"type": "object"}


def test_icons_count_with_the_blocks_and_a_listings_unkept_fields_are_dropped_before_they_are_checked() -> None:
    # Found by a second look: one block of a million icons held the event loop 3.4 s, past the bound on
    # blocks; a listed tool's million icons 3 s, though they are not kept.
    icons = [{"src": "data:,x"}] * MAX_BLOCKS
    link = {"type": "resource_link", "uri": "file:///a", "name": "a", "icons": icons}
    pad = {"type": "text", "text": "x" * PARSED_IN_TWO}
    message = message_of(json.dumps({"jsonrpc": "2.0", "id": 3, "result": {"content": [link, pad]}}))
    assert isinstance(message, types.JSONRPCError)
    assert message.error.message == "its answer has 1,002 content blocks and icons, more than 1,000"
    tool = {"name": "t", "inputSchema": {"type": "object"}, "icons": icons * 100, "_meta": {"x": "y"}}
    padded = {**tool, "description": "d" * PARSED_IN_TWO}
    listing = message_of(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": [padded]}}))
    assert isinstance(listing, types.JSONRPCResponse)
    [kept] = listing.result["tools"]
    assert "icons" not in kept
    assert "_meta" not in kept


def test_a_credential_in_a_tools_description_or_schemas_is_masked_as_in_its_results() -> None:
    # Found by a review: a server that put its API key in a description and a schema's default had it in
    # help(mcp_tools), the tool's schema and run_python's description, every client's to read.
    key = "sk-" + "k" * 20
    credentials = Credentials(Downstream("s", "s", ("*",), None, command="x", env=(("SERVICE_API_KEY", key),)))
    tool = types.Tool(
        name="whoami",
        description=f"Tells who you are (as {key})",
        input_schema={"type": "object", "properties": {"key": {"type": "string", "default": key}}},
        output_schema={"type": "object", "description": f"for {key}"},
    )
    kept = kept_tool(tool, credentials)
    assert key not in kept.model_dump_json()
    assert kept.description == "Tells who you are (as ***)"
    assert kept.input_schema == {"type": "object", "properties": {"key": {"type": "string", "default": "***"}}}
    # A tool with none of them is kept as it came.
    plain = types.Tool(name="t", description="no key here", input_schema={"type": "object"})
    assert kept_tool(plain, credentials) == plain


def test_a_listing_keeps_a_header_value_not_named_as_a_credential_and_masks_a_key_across_the_cut() -> None:
    # Found by a second look: every header's value was masked, so an `X-Environment: production` header
    # made the schema's enum ['***', 'staging'] and every call naming production was refused; and a key
    # across the description's cut was left whole but for its last characters.
    key = "sk-live-0123456789abcdef0123456789"
    server = Downstream(
        "s", "s", ("*",), None, url="http://x", headers=(("X-Environment", "production"), ("X-Api-Key", key))
    )
    tool = types.Tool(
        name="deploy",
        description="d" * 1990 + key,
        input_schema={"type": "object", "properties": {"env": {"enum": ["production", "staging"]}}},
    )
    kept = kept_tool(tool, Credentials(server))
    assert kept.input_schema == tool.input_schema
    assert kept.description == "d" * 1990 + "***"
