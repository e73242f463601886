"""A downstream MCP server (stdio) whose tools are hostile to a broker: input schemas that recurse,
that name a $ref nowhere, whose $refs expand exponentially, a pattern that backtracks (in an input
schema, and in an output schema its result does not match), a result far larger than a run may take,
errors that tell its credential or run long; and tools that say what they got (`texts`, `measure`) or
take their time (`slow`). It checks no arguments itself. With HOSTILE_STDERR set, it starts by
writing a line of 1,990 characters and that on its stderr. Code mode's tests start it with the
official SDK's low-level server (which speaks 2026-07-28)."""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

SCHEMAS: dict[str, dict[str, Any]] = {
    # A $ref to a file (or a URL): a broker that followed it would read the server's disk for a run.
    "elsewhere": {
        "type": "object",
        "properties": {"a": {"$ref": os.environ.get("HOSTILE_REF", "file:///nonexistent")}},
    },
    "nested": {
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/tree"}},
        "$defs": {"tree": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/$defs/tree"}}]}},
    },
    "nowhere": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
    "backtracks": {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}},
    "huge": {"type": "object", "properties": {"megabytes": {"type": "integer"}}},
    "texts": {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "string"}}}},
    "measure": {"type": "object", "properties": {"x": {"type": "number"}}},
    "slow": {"type": "object", "properties": {"seconds": {"type": "number"}}},
    "leaks": {"type": "object"},
    "verbose": {"type": "object"},
    # 2^40 ways through: a validator that follows every $ref never ends.
    "expands": {
        "type": "object",
        "$ref": "#/$defs/d0",
        "$defs": {
            **{f"d{n}": {"allOf": [{"$ref": f"#/$defs/d{n + 1}"}, {"$ref": f"#/$defs/d{n + 1}"}]} for n in range(40)},
            "d40": {"type": "object"},
        },
    },
    "shaped": {"type": "object"},
    "wide": {"type": "object"},
    # A check that recurses for ever without walking into the instance: Python's recursion limit struck
    # inside rpds (Rust), whose panic ended the server (found by a review).
    "selfref": {"type": "object", "$ref": "#"},
    "cycle": {"type": "object"},
}
OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {
    "shaped": {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}},
    # Its result is 200 KB of text, which no branch takes: a validator writes each branch's error with it.
    "wide": {"type": "object", "properties": {"s": {"anyOf": [{"type": "integer"}] * 3000}}},
    "cycle": {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"a": {"type": "object", "properties": {"a": {"$ref": "#/$defs/r"}}}}}
        },
        "$defs": {"r": {"type": "object", "not": {"not": {"$ref": "#/$defs/r"}}}},
    },
}


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name=name,
                description=f"A hostile tool: {name}.",
                input_schema=schema,
                output_schema=OUTPUT_SCHEMAS.get(name),
            )
            for name, schema in SCHEMAS.items()
        ]
    )


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    if params.name == "huge":
        text = "x" * (int(arguments.get("megabytes", 1)) * 1_000_000)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
    if params.name == "texts":
        return _text(f"texts {len(arguments.get('xs', []))}")
    if params.name == "measure":
        return _text(f"measure {arguments.get('x')!r}")
    if params.name == "slow":
        await anyio.sleep(float(arguments.get("seconds", 1)))
    if params.name == "shaped":
        shape = {"s": "a" * 40 + "!"}  # does not match: a backtracking check takes 2^40 steps to say so
        return types.CallToolResult(content=[types.TextContent(type="text", text="shaped")], structured_content=shape)
    if params.name == "wide":
        shape = {"s": "a" * 200_000}
        return types.CallToolResult(content=[types.TextContent(type="text", text="wide")], structured_content=shape)
    if params.name == "cycle":
        shape = {"a": {"a": {"a": {}}}}
        return types.CallToolResult(content=[types.TextContent(type="text", text="cycle")], structured_content=shape)
    if params.name == "verbose":
        text = "why " * 150_000
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
    if params.name == "leaks" and arguments.get("told"):  # in a result, not an error: its environment, say
        told = {name: value for name, value in os.environ.items() if name.startswith("HOSTILE")}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=repr(told))],
            structured_content={"environment": told, "numbers": [int(v) for v in told.values() if v.isdigit()]},
        )
    if params.name == "leaks":
        refused = f"upstream refused the credential {os.environ.get('HOSTILE_SECRET', '')}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=refused)], is_error=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name} ok")])


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def main() -> None:
    if os.environ.get("HOSTILE_STDERR"):
        sys.stderr.write("x" * 1990 + os.environ["HOSTILE_STDERR"] + "\n")
        sys.stderr.flush()
    server: Server[Any] = Server("hostile", on_list_tools=list_tools)
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
