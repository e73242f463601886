"""A stdio server's lines out of its stdout's chunks (`Lines`), and how a line is parsed, without a
process; the transport itself is tested with real servers (tests/e2e/tools/test_hostile_servers.py)."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.client.stdio import StdioServerParameters
from mcp.shared.message import SessionMessage

from runner.tools.stdio import Lines, LineTooLong, parse


@given(
    st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=8),
    st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=10),
)
def test_lines_come_out_whole_and_in_order_however_the_stream_is_cut(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines) + b"the start of a line not ended"
    got: list[bytes] = []
    splitter = Lines(most=1000)
    at, n = 0, 0
    while at < len(stream):
        size = cuts[n % len(cuts)]
        got += splitter.feed(stream[at : at + size])
        at, n = at + size, n + 1
    assert got == lines


def test_a_line_of_exactly_the_bound_passes_and_one_byte_more_does_not_whether_ended_or_held() -> None:
    assert Lines(most=5).feed(b"12345\n") == [b"12345"]
    assert Lines(most=5).feed(b"123") == []
    with pytest.raises(LineTooLong, match="more than 5 bytes"):
        Lines(most=5).feed(b"123456\n")
    held = Lines(most=5)
    assert held.feed(b"1234") == []
    assert held.feed(b"5") == []
    with pytest.raises(LineTooLong):
        held.feed(b"6")  # not ended yet: the bound holds before its newline comes


def test_a_line_held_across_chunks_counts_from_its_own_start_not_from_the_lines_before_it() -> None:
    splitter = Lines(most=5)
    assert splitter.feed(b"12345\n123") == [b"12345"]
    assert splitter.feed(b"45\n12") == [b"12345"]
    with pytest.raises(LineTooLong):
        splitter.feed(b"3456\n")


def test_a_line_that_comes_in_tiny_chunks_is_held_in_about_its_own_size() -> None:
    # Found by a review: a list of its chunks held 16 MiB of 2-byte chunks in 450 MiB (28x).
    splitter = Lines(most=1 << 30)
    tracemalloc.start()
    try:
        for _ in range(1 << 19):
            splitter.feed(bytes(bytearray(b"xy")))  # each chunk its own object, as each read's is
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 2 << 20, f"{held:,} bytes for a line of 1 MiB"
    assert splitter.feed(b"\n") == [b"xy" * (1 << 19)]


def test_a_line_is_a_message_or_the_error_that_says_why_not_and_a_byte_that_is_not_utf8_is_replaced() -> None:
    server = StdioServerParameters(command="x", encoding_error_handler="replace")
    message = parse(b'{"jsonrpc": "2.0", "id": 1, "result": {}}', server)
    assert isinstance(message, SessionMessage)
    assert message.message.model_dump(exclude_unset=True) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert isinstance(parse(b"not json", server), ValueError)
    # Replaced, so it parses, and the result that is not an object is the error.
    assert isinstance(parse(b'{"jsonrpc": "2.0", "id": 1, "result": "\xff"}', server), ValueError)
    said = parse(
        b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "\xff"}}', server
    )
    assert isinstance(said, SessionMessage)
    assert "\ufffd" in said.message.model_dump_json()


def test_a_long_line_is_parsed_as_a_short_one_is_and_one_nested_too_deep_is_an_error() -> None:
    server = StdioServerParameters(command="x")
    long = b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "%s"}}' % (
        b"x" * (1 << 17)
    )
    message = parse(long, server)
    assert isinstance(message, SessionMessage)
    assert message.message.model_dump()["params"]["data"] == "x" * (1 << 17)
    deep = b'{"jsonrpc": "2.0", "id": 1, "result": {"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}}"
    assert isinstance(parse(deep, server), RecursionError | ValueError)
    # Found by a review: `json` took a lone surrogate (and nesting 990 deep) where the short path refuses
    # it; a listing with one then broke our own tools/list for every client.
    lone = b'{"jsonrpc": "2.0", "id": 1, "result": {"a": "\\ud800", "pad": "%s"}}' % (b"x" * (1 << 17))
    assert isinstance(parse(lone, server), ValueError)
    nested = b'{"jsonrpc": "2.0", "id": 1, "result": {"pad": "%s", "a": %s1%s}}' % (
        b"x" * (1 << 17),
        b"[" * 500,
        b"]" * 500,
    )
    assert isinstance(parse(nested, server), ValueError)
    assert isinstance(parse(b"[" * 100_000, server), RecursionError | ValueError)
