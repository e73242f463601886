"""The bound on reads of kept output in flight: a few per caller, half the budget for one caller, the
budget for all; each released once."""

from __future__ import annotations

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from runner.outcome import KeptOutput
from runner.protocol.reads import MAX_READS_PER_CALLER, PER_JSON_BYTE, READ_BUSY, WORST_PER_BYTE, Reads, answer_cost
from runner.protocol.results import kept_contents

MIB = 2**20


def test_a_caller_has_at_most_a_few_reads_in_flight_and_one_more_is_refused_busy() -> None:
    reads = Reads(1024 * MIB)
    held = [reads.admit("alice", 1) for _ in range(MAX_READS_PER_CALLER)]
    with pytest.raises(MCPError) as refused:
        reads.admit("alice", 1)
    assert refused.value.code == READ_BUSY
    assert f"busy: {MAX_READS_PER_CALLER} reads of this caller are in flight" in refused.value.message
    reads.admit("bob", 1)  # another caller is not held up
    reads.release(held[0])
    reads.release(held[0])  # once only
    reads.admit("alice", 1)


def test_one_caller_holds_half_the_budget_at_most_and_the_budget_bounds_all_but_a_lone_read() -> None:
    reads = Reads(100 * MIB)
    first = reads.admit("alice", 5 * MIB // WORST_PER_BYTE)  # charged 5 MiB at worst
    with pytest.raises(MCPError, match="this caller's reads in flight hold 5 MiB"):
        reads.admit("alice", 46 * MIB // WORST_PER_BYTE)
    reads.charge(first, 1 * MIB)  # what it cost once built
    second = reads.admit("alice", 46 * MIB // WORST_PER_BYTE)
    bob = reads.admit("bob", 50 * MIB // WORST_PER_BYTE)
    with pytest.raises(MCPError, match="past the server's 100 MiB"):
        reads.admit("carol", 5 * MIB // WORST_PER_BYTE)
    for held in (first, second, bob):
        reads.release(held)
    assert reads.charged == 0
    lone = reads.admit("carol", 1000 * MIB)  # alone, however large: a stream that may be kept can be read
    reads.release(lone)


def test_an_answer_of_control_characters_is_base64_and_charged_what_its_json_holds() -> None:
    kept = KeptOutput("runner://output/x/stdout", "stdout", 3000, 3000, 60)
    data = b"\x01" * 3000
    contents = kept_contents(kept, data)
    assert isinstance(contents, types.BlobResourceContents)
    assert answer_cost(data, contents) == PER_JSON_BYTE * 4000
    text = kept_contents(kept, b"a\tb\n" * 750)
    assert isinstance(text, types.TextResourceContents)
    assert answer_cost(b"a\tb\n" * 750, text) == PER_JSON_BYTE * 4500
