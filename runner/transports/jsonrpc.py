"""JSON-RPC framing shared by every transport: one parse per message, and the error that answers
what is not a message. Pure functions over bytes, no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any

import mcp_types as types
from pydantic import ValidationError

# The notification that cancels a request (it is answered by nothing).
CANCELLED_METHOD = "notifications/cancelled"
# The JSON-RPC error of a request the server has no room to take now (its own range, -32000 to -32099).
SERVER_BUSY = -32011
# The error a request cancelled before its handler ran is refused with, inside the server (its exchange,
# cancelled too, answers nothing: no client sees it).
REQUEST_CANCELLED = -32012
# Where to look for the id of a request too large to parse: clients put it near the start.
ID_SEARCH_BYTES = 4096
_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)')
# The id written last, as the TypeScript SDK writes a request (`{...request, jsonrpc, id}`): followed by
# the object's end alone (a nested one is followed by more than one), or by the version and that end.
_LAST_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*\Z')


def request_id_in(message: bytes) -> str | int | None:
    """The JSON-RPC id of a message, if it can be seen without parsing the whole: at its end, where the
    TypeScript SDK writes it, else at its start, where the Python SDK does."""
    match = _LAST_ID.search(message[-ID_SEARCH_BYTES:]) or _ID.search(message[:ID_SEARCH_BYTES])
    if match is None:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, str | int) else None


def error_reply(request_id: str | int | None, code: int, message: str) -> types.JSONRPCError:
    """A JSON-RPC error response."""
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


class InvalidMessage(Exception):
    """A line that is not a JSON-RPC message; `reply` is the error response that answers it."""

    def __init__(self, reply: types.JSONRPCError) -> None:
        super().__init__(reply.error.message)
        self.reply = reply


def parse_message(line: bytes) -> types.JSONRPCMessage:
    """Parse one line of the wire; raise `InvalidMessage` carrying the JSON-RPC error that answers it."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except (ValidationError, ValueError, RecursionError):
        raise InvalidMessage(_explain_invalid(line)) from None
    request_id = getattr(message, "id", None)
    if isinstance(request_id, str) and not _encodable(request_id):
        # No answer could carry this id back (it is not valid Unicode): answer as for a missing one.
        raise InvalidMessage(error_reply(None, types.INVALID_REQUEST, "Invalid Request: the id is not valid Unicode"))
    return message


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _explain_invalid(line: bytes) -> types.JSONRPCError:
    try:
        value: Any = json.loads(line)
    except RecursionError:
        return error_reply(_usable_id(request_id_in(line)), types.INVALID_REQUEST, "Invalid Request: nested too deeply")
    except ValueError as exc:
        return error_reply(None, types.PARSE_ERROR, f"Parse error: {exc}")
    if not isinstance(value, dict):
        what = "batches are not supported" if isinstance(value, list) else "a message must be a JSON object"
        return error_reply(None, types.INVALID_REQUEST, f"Invalid Request: {what}")
    request_id = _usable_id(value.get("id"))
    problems = []
    if value.get("jsonrpc") != "2.0":
        problems.append('"jsonrpc" must be "2.0"')
    if "method" in value and not isinstance(value["method"], str):
        problems.append('"method" must be a string')
    if "params" in value and not isinstance(value["params"], dict):
        problems.append('"params" must be an object')
    if not {"method", "result", "error"} & value.keys():
        problems.append('a request needs a "method"')
    detail = "; ".join(problems) or "not a valid JSON-RPC 2.0 message"
    return error_reply(request_id, types.INVALID_REQUEST, f"Invalid Request: {detail}")


def _usable_id(value: object) -> str | int | None:
    """An id an error reply can carry back: a string of valid Unicode or an integer, else None."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return value if not isinstance(value, str) or _encodable(value) else None


def too_large_reply(head: bytes, size: int, limit: int) -> types.JSONRPCError:
    """The answer to a line discarded for its size, addressed to its id when that is visible."""
    message = f"Invalid Request: {size:,} bytes, more than the limit of {limit:,} (see RUNNER_MAX_CODE_MB)"
    return error_reply(_usable_id(request_id_in(head)), types.INVALID_REQUEST, message)


# The values of one message at most, counted as `runner.jsonvalues.json_values` does: a call has a few
# dozen (1,000 files of three fields, at most, each a few); past this a body is refused before it is parsed.
MAX_JSON_VALUES = 100_000
