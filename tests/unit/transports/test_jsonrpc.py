"""The wire: lines read without a thread and with a bound, and the answers to what is not JSON-RPC."""

from __future__ import annotations

import os

import anyio
import mcp_types as types
import pytest

from runner.transports.jsonrpc import InvalidMessage, parse_message, request_id_in, too_large_reply
from runner.transports.stdio import Dropped, LineReader


async def read_all(chunks: list[bytes], max_line: int) -> list[bytes | Dropped]:
    read_end, write_end = os.pipe()

    async def write() -> None:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                await anyio.wait_writable(write_end)
                view = view[os.write(write_end, view) :]
        os.close(write_end)

    try:
        os.set_blocking(write_end, False)
        os.set_blocking(read_end, False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            return [line async for line in LineReader(read_end, max_line)]
    finally:
        os.close(read_end)


@pytest.mark.anyio
async def test_lines_arrive_whole_whatever_the_chunking() -> None:
    lines = await read_all([b'{"a":', b'1}\n{"b"', b":2}\n", b'{"c":3}'], 100)
    assert lines == [b'{"a":1}\n', b'{"b":2}\n', b'{"c":3}']


@pytest.mark.anyio
async def test_an_oversized_line_is_discarded_as_it_arrives_and_the_next_line_survives() -> None:
    big = b'{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"code":"' + b"x" * 500_000 + b'"}}\n'
    lines = await read_all([big[:70_000], big[70_000:], b'{"ok":1}\n'], 1000)
    assert lines == [Dropped(big[:4096], len(big)), b'{"ok":1}\n']


@pytest.mark.anyio
async def test_a_line_just_over_the_limit_is_dropped_even_when_it_arrives_in_one_read() -> None:
    line = b'{"id":"a"}' + b" " * 100 + b"\n"
    assert await read_all([line + b"{}\n"], 100) == [Dropped(line, 111), b"{}\n"]


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
