"""A run's job socket taken apart without processes: tool call frames, then the report, every byte
hostile."""

from __future__ import annotations

from runner.execution.channel import RunChannel
from runner.inrun.wire import encode_end, frame_tool

REPORT = encode_end({"status": 0, "cpu": 0.01, "maxrss_kb": 1000})


def test_tool_calls_come_out_whole_in_order_and_then_the_report_byte_by_byte() -> None:
    channel = RunChannel(1 << 20, 1000)
    data = frame_tool(b'{"op": "call", "n": 1}', b"12.1") + frame_tool(b'{"n": 2}', b"13.1") + REPORT
    calls = [call for byte in data for call in channel.feed(bytes([byte]))]
    assert calls == [(b"12.1", b'{"op": "call", "n": 1}'), (b"13.1", b'{"n": 2}')]
    assert channel.report_whole
    assert bytes(channel.report) == REPORT
    assert not channel.broken


def test_a_tool_call_from_a_run_that_may_call_none_breaks_the_channel() -> None:
    channel = RunChannel(1 << 20)
    assert channel.feed(frame_tool(b"{}", b"1.1")) == []
    assert channel.broken
    assert not channel.report_whole


def test_a_call_over_its_bound_breaks_the_channel_before_its_body_is_read() -> None:
    channel = RunChannel(1 << 20, 100)
    assert channel.feed(b"tool 100000 1.1\n") == []
    assert channel.broken


def test_garbage_breaks_the_channel_and_nothing_is_taken_after() -> None:
    for garbage in (b"tool x\n", b"tool 1\n", b"tool 1 a\n", b"tool 1 2 3\n", b"t" * 70, b"\x00" * 70, b"report 1\n"):
        channel = RunChannel(1 << 20, 100)
        assert channel.feed(garbage) == [], garbage
        assert channel.broken, garbage
        assert channel.feed(frame_tool(b"{}", b"1.1")) == []


def test_what_follows_a_whole_report_is_not_taken() -> None:
    channel = RunChannel(1 << 20, 100)
    assert channel.feed(REPORT + frame_tool(b"{}", b"1.1")) == []
    assert channel.report_whole
    assert bytes(channel.report) == REPORT
