"""A downstream server's message, parsed as its transport reads it (a stdio line, an HTTP body or
event): by pydantic, as the SDK's transports do, but a long one in two, parsed into Python values and
then checked, not checked from its JSON: 2.7-5x faster on many small values (an 18 MiB result of
records: 0.38 s -> 0.14 s with the SDK's HTTP transport's `validate_json`, 2.12 s -> 0.43 s with its
stdio one's), 1 us slower on a small message. Its parser refuses what pydantic's JSON check does
(`json` took a lone surrogate, whose listing then broke our own tools/list for every client, and
nesting five times deeper). Either way the parse holds the GIL, on the event loop or not: a worker
thread would not let the loop run meanwhile."""

from __future__ import annotations

import pydantic_core
from mcp import types

PARSED_IN_TWO = 64 << 10  # a message longer than this, in bytes or characters, is parsed in two


def message_of(data: str | bytes) -> types.JSONRPCMessage:
    """The JSON-RPC message `data` holds; ValueError (pydantic's ValidationError among them) if none."""
    adapter = types.jsonrpc_message_adapter
    if len(data) > PARSED_IN_TWO:
        return adapter.validate_python(pydantic_core.from_json(data), by_name=False)
    return adapter.validate_json(data, by_name=False)
