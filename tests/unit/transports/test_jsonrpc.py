"""JSON-RPC framing: the request id found early, a message parsed once, and the answers to what is not
JSON-RPC."""

from __future__ import annotations

import mcp_types as types
import pytest

from runner.transports.jsonrpc import InvalidMessage, parse_message, request_id_in, too_large_reply


def test_the_request_id_is_found_near_the_start_or_not_at_all() -> None:
    assert request_id_in(b'{"jsonrpc":"2.0","id":7,"method":"x"') == 7
    assert request_id_in(b'{"id": "r-\\"1\\""') == 'r-"1"'
    assert request_id_in(b'{"method":"tools/call","params":{}') is None
    assert too_large_reply(b'{"id":7', 5000, 100).id == 7


def test_a_valid_message_parses_once_into_its_type() -> None:
    message = parse_message(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    assert isinstance(message, types.JSONRPCRequest)
    assert message.method == "ping"


@pytest.mark.parametrize(
    ("line", "code", "request_id", "says"),
    [
        (b"{not json\n", -32700, None, "Parse error"),
        (b"\xff\xfe\n", -32700, None, "Parse error"),
        (b"[1, 2]\n", -32600, None, "batches are not supported"),
        (b"42\n", -32600, None, "must be a JSON object"),
        (b'{"id": 9, "method": "ping"}\n', -32600, 9, '"jsonrpc" must be "2.0"'),
        (b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": "x"}\n', -32600, 5, '"params" must be'),
        (b'{"jsonrpc": "2.0", "id": "s", "method": 3}\n', -32600, "s", '"method" must be a string'),
        (b'{"jsonrpc": "2.0", "id": 8}\n', -32600, 8, 'a request needs a "method"'),
    ],
)
def test_what_is_not_json_rpc_is_answered_with_the_right_error(
    line: bytes, code: int, request_id: object, says: str
) -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(line)
    reply = caught.value.reply
    assert (reply.error.code, reply.id) == (code, request_id)
    assert says in reply.error.message
