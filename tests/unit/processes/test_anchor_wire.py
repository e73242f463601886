"""The anchor's lines, parsed: exactly the wire, and for anything else `Malformed`, never another
exception (a line is hostile input: a call's code can have the anchor relay what it wrote)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.processes.anchor_wire import MAX_LINE, Ended, Lost, Malformed, Ready, Said, Started, parse


def test_each_message_of_the_wire_is_read_with_its_numbers() -> None:
    assert parse(b"R") == Ready()
    assert parse(b"S 4242") == Started(4242)
    assert parse(b"X 4242 9 0.25 1e-05 2048") == Ended(4242, 9, 0.25001, 2048)
    assert parse(b"P 1 0 2048 -") == Said(b"P", True, False, "", 2048 * 1024)
    assert parse(b"V 0 1 0 its files could not be read") == Said(b"V", False, True, "its files could not be read")
    assert parse(b"V 0 0 40960 -") == Said(b"V", False, False, "", 40960 * 1024)
    assert parse(b"E the session's keeper process was killed") == Lost("the session's keeper process was killed")


@pytest.mark.parametrize(
    "line",
    [
        b"X 101 0 abc def ghi",  # the review's: a D whose numbers were not numbers, relayed
        b"X 101 0 1 2",
        b"X 101 0 1 2 3 4",
        b"X 101 0 nan 0 0",
        b"X 101 0 inf 0 0",
        b"X 101 0 -1 0 0",
        b"X 101 0 1e999 0 0",
        b"X 101 70000 0 0 0",
        b"X 0 0 0 0 0",
        b"X 99999999999999999999999 0 0 0 0",
        b"S",
        b"S 1 2",
        b"S -5",
        b"S \xd9\xa3",  # an Arabic-Indic digit: isdigit() says yes, the wire says no
        b"P 2 0 0 -",
        b"P 1 0 -",
        b"P 1 0 x -",
        b"P 1 0 0",
        b"P 1 0 0 ",
        b"R R",
        b"",
        b"Q 1",
        b"E " + b"x" * MAX_LINE,
    ],
)
def test_a_line_off_the_wire_is_malformed(line: bytes) -> None:
    with pytest.raises(Malformed):
        parse(line)


@given(st.binary(max_size=2 * MAX_LINE))
def test_any_bytes_parse_to_a_message_or_malformed_and_nothing_else(line: bytes) -> None:
    try:
        message = parse(line)
    except Malformed:
        return
    assert isinstance(message, Ready | Started | Ended | Said | Lost)


@given(
    st.integers(1, 1 << 22),
    st.integers(0, 0xFFFF),
    st.floats(0, 1e6),
    st.floats(0, 1e6),
    st.integers(0, 1 << 40),
)
def test_an_end_as_the_anchor_writes_it_reads_back(pid: int, status: int, utime: float, stime: float, kb: int) -> None:
    message = parse(b"X %d %d %r %r %d" % (pid, status, utime, stime, kb))
    assert message == Ended(pid, status, utime + stime, kb)
