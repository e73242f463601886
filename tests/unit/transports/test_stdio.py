"""The stdio transport's line reader: lines read from a pipe without a thread and with a bound."""

from __future__ import annotations

import os

import anyio
import pytest

from runner.transports.stdio import Dropped, LineReader, Written, after_written


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


def test_requests_sharing_an_id_are_told_their_answers_were_written_only_once_all_of_that_id_were() -> None:
    written, told = Written(), []
    read, ping, other = written.opened(1), written.opened(1), written.opened("1")
    assert after_written(read, lambda: told.append("read"))
    assert after_written(other, lambda: told.append("other"))
    written.answered(1)  # the ping's answer, or the read's: an answer says only its id
    assert told == []
    written.answered(1)
    assert told == ["read"]
    written.settled(other)  # cancelled: no answer will come
    assert told == ["read", "other"]
    assert not after_written(ping, lambda: told.append("late")), "its answer is written: the caller's to call"
    assert not after_written(object(), lambda: None)
