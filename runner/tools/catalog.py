"""What code mode shows of the tools, as pure functions: a result's value as a run gets it, and the
lines run_python's description gives the tools."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mcp import types

from runner.config import Downstream

MAX_DESCRIBED = 30  # tools the description lists, over every server; help(mcp_tools) lists the rest
MAX_LINE_CHARS = 120


def value_of_result(result: types.CallToolResult) -> Any:
    """A tool result as the run gets it: its ``structuredContent`` when it has one; else, when every
    content block is text, their text joined by a newline; else the content blocks as JSON objects (as
    MCP writes them). Only what is not text is dumped to JSON."""
    if result.structured_content is not None:
        return result.structured_content
    blocks = result.content
    if all(isinstance(block, types.TextContent) for block in blocks):
        return "\n".join(block.text for block in blocks)  # type: ignore[union-attr]
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in blocks]


def describe(servers: Sequence[tuple[Downstream, Mapping[str, types.Tool], Mapping[str, str]]], others: int = 0) -> str:
    """The paragraph run_python's description gives the tools: each server's Python name and each
    allowed tool's (as `mcp_tools` has it: `Connection.python_names`, the tools it leaves out left
    out here too) with the first line of its description, at most MAX_DESCRIBED of them."""
    lines = [
        "Code mode: `import mcp_tools` calls tools of other MCP servers as functions, "
        "`mcp_tools.<server>.<tool>(**arguments)`; `help(mcp_tools)` lists them with their input schemas; "
        "a failed call raises `mcp_tools.ToolError`."
    ]
    shown = 0
    left = 0
    for server, tools, named in servers:
        for name, tool in sorted(tools.items()):
            if name not in named:
                continue
            if shown >= MAX_DESCRIBED:
                left += 1
                continue
            first = ((tool.description or "").strip().splitlines() or [""])[0]
            line = f"- mcp_tools.{server.python_name}.{named[name]}: {first}"
            lines.append(line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 3] + "...")
            shown += 1
    if left or others:
        lines.append("help(mcp_tools) lists the rest.")
    return "\n".join(lines)
