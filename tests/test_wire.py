"""The stdin line reader: lines in order, oversized lines dropped and reported, EOF ends it."""

from __future__ import annotations

import logging
import os

import anyio
import pytest

from runner.wire import LineReader, request_id_in

pytestmark = pytest.mark.anyio


async def read_all(chunks: list[bytes], max_line: int) -> tuple[list[str], list[tuple[object, int]]]:
    read_end, write_end = os.pipe()
    dropped: list[tuple[object, int]] = []

    async def note(request_id: str | int | None, size: int) -> None:
        dropped.append((request_id, size))

    async def write() -> None:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                await anyio.wait_writable(write_end)
                view = view[os.write(write_end, view) :]
        os.close(write_end)

    lines = []
    try:
        os.set_blocking(write_end, False)
        async with anyio.create_task_group() as tg, LineReader(read_end, max_line, logging.getLogger("t")) as reader:
            reader.on_oversize = note
            tg.start_soon(write)
            lines = [line async for line in reader]
    finally:
        os.close(read_end)
    return lines, dropped


async def test_lines_arrive_whole_whatever_the_chunking() -> None:
    lines, dropped = await read_all([b'{"a":', b'1}\n{"b"', b":2}\n", b'{"c":3}'], 100)
    assert lines == ['{"a":1}\n', '{"b":2}\n', '{"c":3}']
    assert dropped == []


async def test_an_oversized_line_is_dropped_and_answered_and_the_next_line_survives() -> None:
    big = b'{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"code":"' + b"x" * 500_000 + b'"}}\n'
    lines, dropped = await read_all([big[:70_000], big[70_000:], b'{"ok":1}\n'], 1000)
    assert lines == ['{"ok":1}\n']
    assert dropped == [(42, len(big))]


async def test_a_line_just_over_the_limit_is_dropped_even_when_it_arrives_in_one_read() -> None:
    lines, dropped = await read_all([b'{"id":"a"}' + b" " * 100 + b"\n" + b"{}\n"], 100)
    assert lines == ["{}\n"]
    assert dropped == [("a", 111)]


def test_the_request_id_is_found_near_the_start_or_not_at_all() -> None:
    assert request_id_in(b'{"jsonrpc":"2.0","id":7,"method":"x"') == 7
    assert request_id_in(b'{"id": "r-\\"1\\""') == 'r-"1"'
    assert request_id_in(b'{"method":"tools/call","params":{}') is None
