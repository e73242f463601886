"""A downstream server's message, parsed as its transport reads it (a stdio line, an HTTP body or
event): by pydantic, as the SDK's transports do, but a long one in two, parsed into Python values and
then checked, not checked from its JSON: 2.7-5x faster on many small values (an 18 MiB result of
records: 0.38 s -> 0.14 s with the SDK's HTTP transport's `validate_json`, 2.12 s -> 0.43 s with its
stdio one's), 1 us slower on a small message. Its parser refuses what pydantic's JSON check does
(`json` took a lone surrogate, whose listing then broke our own tools/list for every client, and
nesting five times deeper). Either way the parse holds the GIL, on the event loop or not: a worker
thread would not let the loop run meanwhile.

What is kept of it is bounded here too, before pydantic checks it where that is the cost (an answer's
blocks and icons, a listing's tools, `MAX_BLOCKS`, `MAX_TOOLS`), and a tool as it is kept (`kept_tool`);
an answer's id is read from its first and last bytes alone (`answer_id`), for an error that answers
its call where the rest cannot be kept or parsed."""

from __future__ import annotations

import json
import re
from typing import Any

import pydantic
import pydantic_core
from mcp import types

from runner.tools.credentials import Credentials

PARSED_IN_TWO = 64 << 10  # a message longer than this, in bytes or characters, is parsed in two
MAX_TOOLS = 1000  # a listing's most: more are left out (before pydantic checks them)
MAX_LISTING_BYTES = 4 << 20  # a listing's names, descriptions and schemas, as JSON: past it, the rest left out
MAX_DESCRIPTION_CHARS = 2000  # a tool's description as runs and the log see it
# An answer's content blocks, at most: more fail its call. Found by a review: pydantic checks a block
# in some 5 us on the event loop, and an answer of a million empty ones (25 MiB) held it for 5.4 s.
MAX_BLOCKS = 1000
ID_BYTES = 512  # of a message's head and of its tail, looked into for an answer's id

# An answer's id: JSON-RPC's fields first (`{"jsonrpc":"2.0","id":7,...`) or last (`...,"id":7}`), each
# anchored at the message's start or end, where only the server writes (what a run sent is inside).
# Only an answer's: a request of the server's own (elicitation, sampling) has an id too, from the same
# counter as ours, and taken for an answer it failed another run's call (found by a second look).
_ID = rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")'
_ID_FIRST = re.compile(rb'\A\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*' + _ID + rb'\s*,\s*"(?:result|error)"\s*:')
_ANSWER_FIRST = re.compile(rb'\A\s*\{\s*"(?:result|error)"\s*:')  # the TypeScript SDK's answers
_ID_LAST = re.compile(rb",\s*" + _ID + rb"\s*\}\s*\Z")


def message_of(data: str | bytes) -> types.JSONRPCMessage:
    """The JSON-RPC message `data` holds; ValueError (pydantic's ValidationError among them) if none. An
    answer of more content blocks than MAX_BLOCKS is an error for its call; a listing's tools past
    MAX_TOOLS are left out."""
    adapter = types.jsonrpc_message_adapter
    if len(data) <= PARSED_IN_TWO:
        return adapter.validate_json(data, by_name=False)
    value = pydantic_core.from_json(data)
    return _too_many(value) or adapter.validate_python(_listing_cut(value), by_name=False)


def answer_id(head: bytes, tail: bytes) -> int | str | None:
    """The id of the answer whose first and last bytes are `head` and `tail`; None if none is read."""
    found = _ID_FIRST.search(head)
    if found is None and _ANSWER_FIRST.search(head):
        found = _ID_LAST.search(tail)
    if found is None:
        return None
    try:
        request_id = json.loads(found[1])
    except ValueError:
        return None
    return request_id if isinstance(request_id, int | str) else None


def error_answer(request_id: int | str, said: str) -> types.JSONRPCError:
    """The error that answers request `request_id`, as the session would have it from the server."""
    error = types.ErrorData(code=types.INTERNAL_ERROR, message=said)
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


def listed_bytes(tool: types.Tool) -> int:
    """About what a listed tool costs to keep and to hand runs: its name, description and schemas."""
    schemas = json.dumps([tool.input_schema, tool.output_schema])
    return len(tool.name) + min(len(tool.description or ""), MAX_DESCRIPTION_CHARS) + len(schemas)


def kept_tool(tool: types.Tool, credentials: Credentials) -> types.Tool:
    """`tool` as it is kept: its name, schemas and description, cut to MAX_DESCRIPTION_CHARS. Its title,
    icons, annotations and `_meta` serve no run and are not counted (found by a review: 60 MiB of
    `_meta` a tool, 31 tools, held 1.9 GB). The credentials of its server's entry named as such are
    masked in its description and schemas (`Credentials.masked_listing`)."""
    said = [tool.description, tool.input_schema, tool.output_schema]
    # Masked before it is cut: a credential across the cut would be left whole but its last characters
    # (found by a second look).
    description, input_schema, output_schema = credentials.masked_listing(said)
    if description is not None and len(description) > MAX_DESCRIPTION_CHARS:
        description = description[: MAX_DESCRIPTION_CHARS - 3] + "..."
    return types.Tool(name=tool.name, description=description, input_schema=input_schema, output_schema=output_schema)


def _too_many(value: Any) -> types.JSONRPCError | None:
    """An error for the answer `value` if its content blocks, with their icons, are more than MAX_BLOCKS
    (found by a second look: one block of a million icons held the loop 3.4 s, as many blocks had)."""
    result = value.get("result") if isinstance(value, dict) else None
    content = result.get("content") if isinstance(result, dict) else None
    if not isinstance(content, list) or not isinstance(value.get("id"), int | str):
        return None
    items = len(content)
    for block in content[:MAX_BLOCKS]:
        icons = block.get("icons") if isinstance(block, dict) else None
        items += len(icons) if isinstance(icons, list) else 0
    if items > MAX_BLOCKS:
        what = "content blocks" if items == len(content) else "content blocks and icons"
        said = f"its answer has {items:,} {what}, more than {MAX_BLOCKS:,}"
        return error_answer(value["id"], said)
    return None


def _listing_cut(value: Any) -> Any:
    """`value` with a listing's tools past MAX_TOOLS left out, and what of each is not kept (`kept_tool`),
    before pydantic checks them: a review's server of 400,000 tools had it check them all, 2 s of the
    event loop, at each listing; a second look's one tool of a million icons, 3 s."""
    result = value.get("result") if isinstance(value, dict) else None
    tools = result.get("tools") if isinstance(result, dict) else None
    if isinstance(tools, list):
        del tools[MAX_TOOLS:]
        for tool in tools:
            if isinstance(tool, dict):
                for unkept in ("icons", "annotations", "_meta", "title"):
                    tool.pop(unkept, None)
    return value


def said_of(exc: BaseException) -> str:
    """What `exc` says, in a line: pydantic's first error with where it is, not its header alone."""
    if isinstance(exc, pydantic.ValidationError) and exc.errors():
        # An answer's: the union's other members (a request, a notification) say only it is not one.
        errors = exc.errors()
        first = next((error for error in errors if "Response" in str(error["loc"][:1])), errors[0])
        where = ".".join(str(part) for part in first["loc"][:6])
        return f"ValidationError: {first['msg']}{f' at {where}' if where else ''}"[:200]
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
