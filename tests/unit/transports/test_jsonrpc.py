"""JSON-RPC framing: the request id found early, a message parsed once, and the answers to what is not
JSON-RPC."""

from __future__ import annotations

import json

import mcp_types as types
import pytest

from runner.transports.jsonrpc import InvalidMessage, parse_message, request_id_in, too_large_reply


def test_the_request_id_is_found_near_the_start_or_not_at_all() -> None:
    assert request_id_in(b'{"jsonrpc":"2.0","id":7,"method":"x"') == 7
    assert request_id_in(b'{"id": "r-\\"1\\""') == 'r-"1"'
    assert request_id_in(b'{"method":"tools/call","params":{}') is None
    assert too_large_reply(b'{"id":7', 5000, 100).id == 7


def test_the_request_id_written_last_is_found_past_a_large_params_and_a_nested_id_is_not_taken_for_it() -> None:
    # Found by a review: the TypeScript SDK writes a request as `{...request, jsonrpc, id}`, the id after
    # its params; in a body past 64 KiB it was looked for in the first 4 KiB only, so its cancel was
    # dropped and the run went on to its timeout.
    params = json.dumps({"name": "run_python", "arguments": {"code": "x = 1\n" * 30_000, "id": 3}})
    last = f'{{"method":"tools/call","params":{params},"jsonrpc":"2.0","id":9}}'.encode()
    assert request_id_in(last) == 9
    assert request_id_in(f'{{"method":"tools/call","params":{params},"id":"r-9"}}'.encode()) == "r-9"
    # A notification whose params end with an id of their own has none.
    assert request_id_in(f'{{"jsonrpc":"2.0","method":"x","params":{{"code":"{"y" * 9000}","id":4}}}}'.encode()) is None


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
