"""Counting a JSON text's values from its bytes: exact for what a parse makes, whatever its strings hold."""

from __future__ import annotations

import json
import time

import pytest

from runner.jsonvalues import json_depth, json_values


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


def depth(value: object) -> int:
    """How deep `value` nests, from the parse: `{}` 1, `[{}]` 2, a string or number 0."""
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


def chain(levels: int, leaf: object = 1) -> object:
    value = leaf
    for level in range(levels):
        value = {"a": value} if level % 2 else [value]
    return value


@pytest.mark.parametrize(
    "value",
    [
        chain(150),
        [chain(99)] * 50 + [chain(120, "[[{{")],
        {"text": "[" * 500, "escaped": '\\"[{' * 200, "tree": chain(101, ']"}')},
        [chain(100)] * 2_000,  # past the bound in brackets, within it in depth
        ["[{" * 300, {"a": []}],  # within it whatever the string holds
    ],
    ids=["chain", "chains", "strings", "wide", "text"],
)
def test_json_depth_is_exact_past_the_bound_and_within_it_says_so_whatever_the_strings_hold(value: object) -> None:
    body, exact = json.dumps(value).encode(), depth(value)
    found = json_depth(body, 100)
    assert found == exact if exact > 100 else exact <= found <= 100


def test_json_depth_of_a_million_brackets_or_16_mib_of_them_in_strings_takes_a_fraction_of_a_cpu_second() -> None:
    # The broker counts a call's depth on the event loop every run shares, before it sends it on.
    chains = json.dumps([chain(99)] * 5_000).encode()
    text = json.dumps(["[{" * 64] * 2**17).encode()
    started = time.thread_time()
    assert json_depth(chains, 100) == 100
    assert json_depth(text, 100) == 1
    assert time.thread_time() - started < 2
