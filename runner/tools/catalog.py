"""What code mode shows of the tools, as pure functions: a result's value as a run gets it, its JSON
made within a bound, and the lines run_python's description gives the tools."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mcp import types

from runner.config import Downstream

MAX_DESCRIBED = 30  # tools the description lists, over every server; help(mcp_tools) lists the rest
MAX_LINE_CHARS = 120
# `dumped_within`: the items of an array or object dumped at once, between looks at the bound; the items
# looked into one by one first (their own items, strings told by their length), at most; how deep.
PIECE_ITEMS = 256
LOOKED_INTO = 1024
MAX_LOOK_DEPTH = 32


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


def message_of_error(result: types.CallToolResult) -> Any:
    """What a run's `ToolError` says of a result with `isError`: its text blocks, joined by a newline, the
    tool's own message (found by a first hour: one with `structuredContent` too said that, dumped and cut,
    where a long stdout pushed the traceback past the cut); where it has none, as `value_of_result`."""
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    return "\n".join(texts) if texts else value_of_result(result)


def dumped_within(value: Any, most: int) -> tuple[str, bool]:
    """`json.dumps(value)` and True if it holds at most `most` characters; else False and what was dumped
    before the bound was seen passed (more than `most` characters): a result a run will be refused costs
    no dump of the rest. A string is told by its length before it is dumped; a long array or object is
    dumped PIECE_ITEMS items at a time, the first LOOKED_INTO items met looked into one by one. What
    passes the bound is seen at the end of a piece: a piece whose items are themselves large (256 records
    of a megabyte) is dumped whole first, as is what lies deeper than MAX_LOOK_DEPTH or, once the looks
    are spent, a short array or object: bounding those too would take a walk at Python's pace of every
    result, which the results of records it is for would pay."""
    dump = _Dump(most)
    try:
        dump.add(value, 0)
    except _Over:
        return "".join(dump.out), False
    return "".join(dump.out), True


class _Over(Exception):
    """The dump has passed its bound."""


class _Dump:
    """A bounded `json.dumps` (`dumped_within`): its text so far, in parts, and what it may still hold."""

    def __init__(self, most: int) -> None:
        self.out: list[str] = []
        self.left = most
        self.looks = LOOKED_INTO

    def put(self, text: str) -> None:
        self.out.append(text)
        self.left -= len(text)
        if self.left < 0:
            raise _Over

    def add(self, value: Any, depth: int) -> None:
        if isinstance(value, str) and len(value) > self.left:
            # Its dump's first characters, those of its first ones' (each character dumped alone), without
            # the closing quote: past the bound already, as the whole would be.
            self.put(json.dumps(value[: max(self.left, 0) + 1])[:-1])
        elif isinstance(value, list | tuple | dict) and value and depth < MAX_LOOK_DEPTH:
            self._container(value, depth)
        else:
            self.put(json.dumps(value))

    def _container(self, value: list[Any] | tuple[Any, ...] | dict[Any, Any], depth: int) -> None:
        mapping = isinstance(value, dict)
        items: list[Any] = list(value.items()) if isinstance(value, dict) else list(value)
        if len(items) <= PIECE_ITEMS and self.looks < len(items):
            self.put(json.dumps(value))  # a short one, past the looks: dumped whole, as it would be
            return
        self.put("{" if mapping else "[")
        for start in range(0, len(items), PIECE_ITEMS):
            piece = items[start : start + PIECE_ITEMS]
            if start:
                self.put(", ")
            if self.looks < len(piece):
                self.put(json.dumps(dict(piece) if mapping else piece)[1:-1])
                continue
            self.looks -= len(piece)
            for n, item in enumerate(piece):
                if n:
                    self.put(", ")
                if mapping:
                    key, item = item
                    # A key as json writes it (a number or null as a string; another type its TypeError).
                    self.put(json.dumps(key) if isinstance(key, str) else json.dumps({key: 0})[1:-4])
                    self.put(": ")
                self.add(item, depth + 1)
        self.put("}" if mapping else "]")


def _shown(text: str) -> str:
    """`text` with each character that is not printable (controls, ANSI escapes, bidirectional overrides,
    NUL) as a visible escape: a downstream's description goes into every client's tool list, read by a
    terminal or a model (found by a review: ANSI escapes, a right-to-left override, NUL and BEL went
    through as they were)."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


def describe(servers: Sequence[tuple[Downstream, Mapping[str, types.Tool], Mapping[str, str]]], others: int = 0) -> str:
    """The paragraph run_python's description gives the tools: each server's Python name and each
    allowed tool's (as `mcp_tools` has it: `Connection.python_names`, the tools it leaves out left
    out here too) with the first line of its description, at most MAX_DESCRIBED of them."""
    lines = [
        "Code mode: `import mcp_tools` calls tools of other MCP servers as functions, "
        "`mcp_tools.<server>.<tool>(**arguments)`; `help(mcp_tools)` lists them, and "
        "`help(mcp_tools.<server>.<tool>)` shows a tool's input schema; a failed call raises `mcp_tools.ToolError`."
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
            first = _shown(((tool.description or "").strip().splitlines() or [""])[0])
            line = f"- mcp_tools.{server.python_name}.{named[name]}: {first}"
            lines.append(line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 3] + "...")
            shown += 1
    if left:
        lines.append(f"help(mcp_tools) lists the rest ({left} more).")
    # A server with no tools listed (not up yet, mostly): said, not left for the model to guess why there are
    # none (found by a first hour: the paragraph offered code mode and no tool).
    waiting = [server.python_name for server, tools, _ in servers if not tools]
    if waiting:
        shown_names = ", ".join(waiting[:MAX_DESCRIBED]) + (" and more" if len(waiting) > MAX_DESCRIBED else "")
        lines.append(
            f"No tools listed yet by: {shown_names} (not up, or none of its allowed tools listed); a call to one "
            "raises ToolError until they are, and help(mcp_tools) then lists them."
        )
    if others:
        lines.append(
            f"Not listed here: {others} server(s) only some callers may use (help(mcp_tools) lists a caller's)."
        )
    return "\n".join(lines)
