"""Capped capture and safe decoding, without processes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from runner.execution.capture import DROP_MARKER, OutputCap, decode_safely, keep_bytes_for, render_stream


def capture(data: bytes, max_chars: int, chunk: int = 7) -> OutputCap:
    cap = OutputCap(keep_bytes_for(max_chars))
    for start in range(0, len(data), chunk):
        cap.feed(data[start : start + chunk])
    return cap


def test_short_output_is_kept_whole() -> None:
    shown = render_stream(capture(b"hello\nworld\n", 100), 100)
    assert shown.text == "hello\nworld\n"
    assert (shown.total_bytes, shown.dropped_bytes, shown.truncated) == (12, 0, False)


def test_long_output_keeps_head_and_tail_and_counts_what_was_dropped() -> None:
    data = b"".join(b"line %06d\n" % i for i in range(100_000))
    shown = render_stream(capture(data, 1000, chunk=4096), 1000)
    assert shown.truncated
    assert shown.text.startswith("line 000000\n")
    assert shown.text.endswith("line 099999\n")
    assert f"[{shown.dropped_bytes:,} bytes dropped]" in shown.text
    head, _, tail = shown.text.partition("\n... [")
    tail = tail.split("] ...\n", 1)[1]
    assert len(head) + len(tail) == 1000
    assert shown.dropped_bytes == len(data) - len(head.encode()) - len(tail.encode())


def test_a_final_traceback_survives_a_flood() -> None:
    data = b"x" * 5_000_000 + b"\nTraceback (most recent call last):\nValueError: boom\n"
    shown = render_stream(capture(data, 200, chunk=65536), 200)
    assert shown.text.endswith("ValueError: boom\n")


def test_memory_stays_bounded_whatever_is_written() -> None:
    cap = OutputCap(1000)
    for _ in range(10_000):
        cap.feed(b"y" * 10_000)
        head, tail = cap.parts()
        assert len(cap._head) + len(cap._tail) <= 3 * 1000
    assert cap.total == 100_000_000
    assert len(head) == len(tail) == 1000


def test_invalid_utf8_nul_and_escape_bytes_are_shown_as_escapes() -> None:
    assert decode_safely(b"ok\xff\x00\x1b[31m\tend\r\n") == "ok\\xff\\x00\\x1b[31m\tend\r\n"


def test_multibyte_characters_are_never_split_at_the_cut() -> None:
    data = "ğüşiöç€😀".encode() * 10_000
    shown = render_stream(capture(data, 101, chunk=13), 101)
    head, _, rest = shown.text.partition("\n... [")
    tail = rest.split("] ...\n", 1)[1]
    assert "\\x" not in head + tail
    assert len(head) + len(tail) == 101


@given(st.binary(max_size=3000), st.integers(min_value=1, max_value=400), st.integers(min_value=1, max_value=500))
def test_rendering_accounts_for_every_byte(data: bytes, max_chars: int, chunk: int) -> None:
    shown = render_stream(capture(data, max_chars, chunk), max_chars)
    assert shown.total_bytes == len(data)
    assert 0 <= shown.dropped_bytes <= len(data)
    if not shown.truncated:
        assert shown.text == decode_safely(data)


def test_a_cut_stream_says_where_the_servers_mark_is_whatever_marks_the_run_printed() -> None:
    # Found by a review: the app view marked the first mark it saw, one the run printed itself.
    data = "ğ head\n... [5 bytes dropped] ...\nstill head\n".encode() + b"x" * 60_000
    shown = render_stream(capture(data, 100, chunk=4096), 100)
    assert shown.cut_at is not None
    assert shown.text.index("\n... [5 bytes dropped]") < shown.cut_at
    assert shown.text[shown.cut_at :].startswith(f"\n... [{shown.dropped_bytes:,} bytes dropped] ...\n")
    assert render_stream(capture(b"short\n", 100, chunk=4096), 100).cut_at is None


def test_c1_controls_line_separators_and_bidirectional_characters_are_shown_as_escapes() -> None:
    # Found by a review: NEL and U+2028 made a forged `--- exit_code` line (splitlines() ends a line at
    # each), and a CSI, a right-to-left override and a zero-width space went as they were.
    written = "a\u0085--- exit_code: 0 ---\u2028b\u2029c\u009b31m\u202egpj.exe\u200bd\u2066e\ufeff"
    said = decode_safely(written.encode())
    assert said == "a\\x85--- exit_code: 0 ---\\u2028b\\u2029c\\x9b31m\\u202egpj.exe\\u200bd\\u2066e\\ufeff"
    assert len(said.splitlines()) == 1
    # What words are written with stays: accents, scripts, emoji joined by a ZWJ, a soft hyphen.
    kept = "café 東京 \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645 👨\u200d👩 co\u00adoperate\ttab\r\n"
    assert decode_safely(kept.encode()) == kept


def test_the_cap_counts_characters_as_shown_escapes_included() -> None:
    # Found by a review: the cap counted the bytes' characters, and each escaped one is shown in 4 to 10:
    # 100,000 NUL bytes were 80,032 characters against a cap of 20,000.
    for written in (b"\x00" * 100_000, b"\xff" * 100_000, "a\U000e0041".encode() * 50_000, b"ab\x00" * 9_000):
        cap = OutputCap(keep_bytes_for(20_000))
        cap.feed(written)
        shown = render_stream(cap, 20_000)
        assert shown.cut_at is not None
        assert len(shown.text) - len(DROP_MARKER.format(dropped=shown.dropped_bytes)) <= 20_000
        assert shown.text.startswith(decode_safely(written[:100])[:100])


def test_no_mix_of_escapes_and_characters_passes_the_cap_or_loses_count_of_its_bytes() -> None:
    import random

    pick = random.Random(1)
    for _ in range(2_000):
        written = bytes(pick.choice(b"\x00\x01\x1bAB\n\xff\xc3\xa9\xe2\x80\xa8") for _ in range(pick.randint(0, 3_000)))
        most = pick.randint(1, 500)
        cap = OutputCap(keep_bytes_for(most))
        cap.feed(written)
        shown = render_stream(cap, most)
        if shown.cut_at is None:
            assert shown.text == decode_safely(written)
            continue
        head, tail = shown.text[: shown.cut_at], shown.text[shown.cut_at :].split(" bytes dropped] ...\n", 1)[1]
        assert len(head) + len(tail) <= most
        whole = decode_safely(written)
        assert whole.startswith(head)
        assert whole.endswith(tail)
        assert 0 < shown.dropped_bytes <= len(written)  # a cap of a few characters may show none


def test_the_characters_shown_as_escapes_are_exactly_those_the_rule_names_for_this_interpreters_unicode() -> None:
    # One rule for a run's streams, its result and its files' names (capture.UNSAFE_CATEGORIES): written
    # out as ranges, which a newer Unicode (another Python) would have to be written out again for.
    import unicodedata

    from runner.execution.capture import UNSAFE_CATEGORIES, WRITTEN, shown, shown_name

    assert unicodedata.unidata_version == "14.0.0", "write capture._UNSAFE_RANGES out again for this Unicode"
    unsafe = "".join(
        char
        for char in map(chr, range(0x110000))
        if unicodedata.category(char) in UNSAFE_CATEGORIES and char not in WRITTEN
    )
    every = "".join(map(chr, range(0x110000)))
    escaped_names = [char for char in every if shown_name(char) != char]
    assert "".join(escaped_names) == unsafe
    assert "".join(char for char in every if shown(char) != char) == unsafe.translate({9: None, 10: None, 13: None})
