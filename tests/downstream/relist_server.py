"""A 2026-07-28 stdio tool server (the official SDK's low-level server) whose every call is answered with
HEADER_MISMATCH (-32020), and whose listing pages always have a cursor and new tool names, each with an
output schema: a client that re-lists on each such call, as the spec's recovery says, reads pages without
end. It counts the pages it was asked for in the file its first argument names."""

from __future__ import annotations

import itertools
import sys
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

PAGES = itertools.count(1)
SCHEMA = {"type": "object", "properties": {f"p{n}": {"type": "string", "description": "d" * 100} for n in range(25)}}


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    page = next(PAGES)
    with open(sys.argv[1], "w") as told:
        told.write(str(page))
    if page == 1:  # the first listing's first page: echo, and a cursor
        return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema={"type": "object"})], next_cursor="c1")
    tools = [types.Tool(name=f"t{page}_{n}", input_schema={"type": "object"}, output_schema=SCHEMA) for n in range(200)]
    return types.ListToolsResult(tools=tools, next_cursor=f"c{page}")


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    raise MCPError(-32020, "header mismatch")


async def main() -> None:
    server: Server[Any] = Server("relist", on_list_tools=list_tools)
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
