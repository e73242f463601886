"""End to end: what a client sends can neither forge lines in the server's log nor grow it without bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.raw import raw_server

pytestmark = pytest.mark.anyio

# A tool name a review sent: line breaks for other splitters than "\n" (CR, U+2028, NEL), a tab, a
# terminal's escape, and text made to look like a line of the log.
FORGING_NAME = "x\r2026-01-01T00:00:00.000Z\tINFO\u2028FORGED\x1b[2K\x85forged"


async def test_a_hostile_tool_name_is_logged_escaped_on_its_own_line_and_a_huge_one_cut(
    work_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: such a name forged three lines without a request_id for Python's splitlines(),
    # and a 5 MiB name of emoji grew the log by 15 MiB (each escaped to 12 bytes).
    log = tmp_path / "stderr.log"
    huge_name = "\U0001f600" * (5 * 2**20 // 4)
    async with raw_server(work_dir, log) as session:
        await session.initialize()
        for name in (FORGING_NAME, huge_name):
            size_before = log.stat().st_size
            answer = await session.request("tools/call", {"name": name, "arguments": {"code": "1"}})
            assert answer["result"]["isError"] is True
            grown = log.stat().st_size - size_before
            assert grown < 100_000, grown
    text = log.read_bytes().decode()
    lines = text.splitlines()
    assert len(lines) == text.count("\n")  # no line break but "\n", for any splitter
    assert all(" request_id=" in line for line in lines)
    assert all(line.isascii() and line.isprintable() for line in lines)
    [forging] = [line for line in lines if "FORGED" in line]
    assert 'tool="x\\r2026-01-01T00:00:00.000Z\\tINFO\\u2028FORGED\\u001b[2K\\u0085forged"' in forging
    [huge] = [line for line in lines if "call received" in line and "\\ud83d" in line]
    assert "(cut: 1,310,720 characters)" in huge
