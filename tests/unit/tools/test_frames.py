"""A run's frame counted and decoded without a process: what is refused undecoded, and what is not JSON."""

from __future__ import annotations

import gc
import json

import pytest

from runner.tools.frames import MOST_DEPTH, MOST_VALUES, NotJson, decode, too_many, unsendable


def call(arguments: str) -> bytes:
    return ('{"op": "call", "server": "s", "tool": "t", "arguments": {"x": ' + arguments + "}}").encode()


@pytest.mark.parametrize(
    "arguments",
    [
        "[" + "[]," * (MOST_VALUES // 2) + "[]]",
        "[" + "0," * MOST_VALUES + "0]",
        "[" + '"a",' * (MOST_VALUES // 2) + '"a"]',
    ],
    ids=["lists", "numbers", "strings"],
)
def test_a_frame_of_more_values_than_the_bound_is_refused_undecoded(arguments: str) -> None:
    # Found by a review: 16 MiB of `[],` held the event loop 3.5 s in the decoder, and 450 MB.
    assert too_many(call(arguments)) == (
        "the run sent a call of more than 1,000,000 JSON values; send them in smaller calls"
    )


@pytest.mark.parametrize(
    "arguments",
    [
        json.dumps("a,b,[{:" * MOST_VALUES),  # a long text with commas and brackets (a CSV, say) is one value
        json.dumps(['a\\",[{' * 10] * 1000),  # escaped quotes do not end a string
        "[" + "0," * 300_000 + "0]",
        "[" + '"a",' * 300_000 + '"a"]',
    ],
    ids=["text", "escapes", "numbers", "strings"],
)
def test_a_frame_within_the_bound_is_decoded_whatever_its_strings_hold(arguments: str) -> None:
    assert too_many(call(arguments)) == ""
    assert decode(call(arguments))["arguments"]["x"] == json.loads(arguments)


@pytest.mark.parametrize(
    "number",
    [
        *("1e400", "-1e400", "1E+309", "1e0400", "1.8e308", "0.1e310", "1" + "0" * 400 + ".0"),
        # Found by a second look: fewer digits in a row than 309, their exponent short.
        *("1" + "0" * 300 + "e10", "1" + "0" * 260 + ".5e50", "9" * 250 + "e60", "1" + "0" * 250 + "E+60"),
        *("Infinity", "-Infinity", "NaN", "9" * 1001),
    ],
)
def test_numbers_json_has_no_place_for_or_too_long_to_decode_at_ease_are_not_json(number: str) -> None:
    # Found by a review: 1e400 passed as infinity, checked as a number, and reached the tool as null.
    with pytest.raises(NotJson):
        decode(call(number))


@pytest.mark.parametrize(
    "text",
    ["[1.5, 2.5e-3, 1e300]", '[1e308, -1e-400, 12345678901234567890123, "e400"]', "[" + "9" * 1000 + ", 1.5]"],
)
def test_numbers_that_fit_a_float_are_decoded_where_a_large_one_may_be_or_not(text: str) -> None:
    assert decode(call(text))["arguments"]["x"] == json.loads(text)


@pytest.mark.parametrize("body", [b"", b"{", b'{"a": }', b"[" * 100_000 + b"]" * 100_000, b'"\x00"'])
def test_what_does_not_decode_is_not_json(body: bytes) -> None:
    with pytest.raises(NotJson):
        decode(body)


def test_a_frame_that_is_not_utf8_is_not_decoded() -> None:
    with pytest.raises(UnicodeDecodeError):
        decode(b'{"x": "\xed\xa0\x80"}')  # a surrogate, in bytes UTF-8 has no place for


def test_the_collector_is_as_it_was_after_a_decode() -> None:
    assert gc.isenabled()
    decode(call("[]"))
    with pytest.raises(NotJson):
        decode(b"{")
    assert gc.isenabled()
    gc.disable()
    try:
        decode(call("[]"))
        assert not gc.isenabled()
    finally:
        gc.enable()


def nested(levels: int) -> str:
    return "[" * (levels - 1) + "0" + "]" * (levels - 1)  # `x` is the arguments' first level


def test_arguments_nested_past_the_bound_are_refused_and_within_it_not() -> None:
    # Found by a review: a Python SDK tool server dropped a call nested 199 deep unanswered (pydantic
    # parses a message 200 deep), and the call waited out the run's timeout.
    for levels, said in [
        (MOST_DEPTH, ""),
        (MOST_DEPTH + 1, "the arguments nest 101 levels deep, more than 100, which a tool server may not parse"),
    ]:
        body = call(nested(levels))
        assert unsendable(body, decode(body)["arguments"]) == said
    text = call(json.dumps("[{" * 1_000))
    assert unsendable(text, decode(text)["arguments"]) == ""  # a string's brackets nest nothing
