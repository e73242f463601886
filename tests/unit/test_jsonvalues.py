"""Counting a JSON text's values from its bytes: exact for what a parse makes, whatever its strings hold."""

from __future__ import annotations

import json
import time

import pytest

from runner.jsonvalues import json_values


def counted(value: object) -> int:
    """What `json_values` counts, from the parse: strings and keys, and `{`, `[`, `,`, `:` outside them."""
    if isinstance(value, dict):
        return 1 + max(len(value) - 1, 0) + sum(2 + counted(item) for item in value.values())
    if isinstance(value, list):
        return 1 + max(len(value) - 1, 0) + sum(counted(item) for item in value)
    return 1 if isinstance(value, str) else 0


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2, {"b": "x,y{[:"}], "c": 'q"\\"\\\\', "d": "\\"},
        [{"path": "data.json", "content": json.dumps([{"k": i, "v": 'a "b", {c} [d]\\'} for i in range(20_000)])}],
        {"code": "print({1: [2, 3]})\n" * 10_000, "empty": ["", {}, []]},
    ],
)
def test_json_values_counts_what_a_parse_makes_whatever_the_strings_hold(value: object) -> None:
    body = json.dumps(value).encode()
    exact = counted(value)
    assert json_values(body, limit=exact) <= exact
    assert json_values(body, limit=exact - 1) > exact - 1
    assert json_values(body, 100_000) <= 100_000  # each a legal body, however many commas and braces its strings hold


def test_json_values_of_60_mib_of_empty_objects_or_of_escaped_text_takes_a_fraction_of_a_cpu_second() -> None:
    # Found by a review: such a body was parsed whole on the event loop to read its method and id.
    empties = b'{"x":[' + b"{}," * (20 * 2**20) + b"{}]}"
    text = json.dumps({"content": 'a "b", {c}\\' * (4 * 2**20)}).encode()
    started = time.thread_time()
    assert json_values(empties, 100_000) > 100_000
    assert json_values(text, 100_000) == 4  # {, :, and two strings
    assert time.thread_time() - started < 2
