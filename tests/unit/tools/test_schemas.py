"""Bounded schema checks (`runner.tools.schemas`): the plain schemas' own check never lets through what
jsonschema refuses, in any draft a tool may name, and a refusal is still said by jsonschema; every part
of an instance, and the schema against its meta-schema, is checked within the bounds, whatever draft a
part names or a `$ref` leads to."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.tools import schemas as checks
from runner.tools.schemas import MOST_NODES, MOST_SCHEMA_NODES, SchemaCheck, _plain_check

DRAFTS = [
    "http://json-schema.org/draft-03/schema#",
    "http://json-schema.org/draft-04/schema#",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-07/schema#",
    "https://json-schema.org/draft/2019-09/schema",
    "https://json-schema.org/draft/2020-12/schema",
]
ECHO = {
    "type": "object",
    "properties": {"message": {"type": "string", "description": "Message to echo"}},
    "required": ["message"],
    "additionalProperties": False,
    "$schema": DRAFTS[3],
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, 1.0, 1.5, -2.0]),
    st.sampled_from(["", "a", "b", "1"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abcd"), inner, max_size=3)),
    max_leaves=10,
)
type_names = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array"])


def schemas(depth: int = 2) -> st.SearchStrategy[Any]:
    """Schemas of the plain keywords, and now and then one that is not plain (then there is no check)."""
    leaf = st.fixed_dictionaries(
        {},
        optional={
            "type": st.one_of(type_names, st.lists(type_names, min_size=1, max_size=3, unique=True)),
            "enum": st.one_of(
                st.lists(st.sampled_from(["a", "b", "1"]), min_size=1, unique=True),
                st.lists(scalars, min_size=1, max_size=3),
            ),
            "description": st.just("x"),
            "format": st.just("date-time"),
            "minimum": st.just(0),
            "$schema": st.sampled_from(DRAFTS),
        },
    )
    if depth == 0:
        return leaf
    inner = schemas(depth - 1)
    return st.one_of(
        leaf,
        st.fixed_dictionaries(
            {},
            optional={
                "type": st.sampled_from(["object", "array"]),
                "properties": st.dictionaries(st.sampled_from("abcd"), inner, max_size=3),
                "required": st.lists(st.sampled_from("abcd"), max_size=3, unique=True),
                "additionalProperties": st.one_of(st.booleans(), inner),
                "items": inner,
            },
        ),
    )


@settings(max_examples=4000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas(), instance=values, draft=st.sampled_from(DRAFTS))
def test_what_the_check_passes_jsonschema_passes_in_every_draft(schema: Any, instance: Any, draft: str) -> None:
    # Found by a review: a `$schema` below the root was an annotation to the plain check, while
    # jsonschema checks that part in the draft it names (draft 3's `required: true`).
    schema = {**schema, "$schema": draft}
    validator = jsonschema.validators.validator_for(schema)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError:
        return
    check = SchemaCheck.of(schema)
    if check is not None and check.mismatch(instance) == "":
        try:
            valid = validator(schema).is_valid(instance)
        except Exception:  # jsonschema's own fault on this schema: the check may not pass it either
            valid = False
        assert valid, (schema, instance)


def test_a_part_that_names_its_draft_is_checked_in_it_within_the_bounds() -> None:
    # Found by a review: the plain check took a `$schema` below the root for an annotation, while
    # jsonschema checks that part in the draft it names (draft 3's `required: true`).
    draft3 = {
        "$schema": DRAFTS[5],
        "type": "object",
        "properties": {"a": {"$schema": DRAFTS[0], "properties": {"b": {"required": ["z"]}}}},  # truthy: b required
    }
    check = SchemaCheck.of(draft3)
    assert check is not None
    assert check.mismatch({"a": {}}) == "argument 'a/b': 'b' is a required property"
    assert check.mismatch({"a": {"b": 1}}) == ""


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"s": {"$schema": DRAFTS[3], "pattern": "^(a+)+$"}}},
        {"$schema": DRAFTS[3], "properties": {"s": {"pattern": "^(a+)+$"}, "child": {"$ref": "#"}}},
        {"$schema": DRAFTS[5], "$id": "https://x.example/t", "properties": {"child": {"$ref": "https://x.example/t"}}}
        | {"properties": {"s": {"pattern": "^(a+)+$"}, "child": {"$ref": "https://x.example/t"}}},
        {
            "$schema": DRAFTS[4],
            "$recursiveAnchor": True,
            "properties": {"s": {"pattern": "^(a+)+$"}, "child": {"$recursiveRef": "#"}},
        },
        {
            "$schema": DRAFTS[5],
            "$dynamicAnchor": "n",
            "properties": {"s": {"pattern": "^(a+)+$"}, "child": {"$dynamicRef": "#n"}},
        },
    ],
)
def test_a_pattern_is_never_run_where_a_part_names_its_draft_or_a_ref_leads_back_to_the_root(schema: Any) -> None:
    # Found by two reviews: jsonschema checked such a part with the draft's registered validator, not
    # the bounded one: the pattern backtracked on the event loop (0.3 s at 22 characters, x4 each two
    # more; at 40 this test would not end).
    check = SchemaCheck.of(schema)
    assert check is not None
    assert check.mismatch({"s": "a" * 40 + "!", "child": {"s": "a" * 40 + "!"}}) == ""


def test_a_ref_to_a_drafts_meta_schema_is_checked_within_the_bounds() -> None:
    # Found by a review: a `$ref` to draft 4's meta-schema checked its `enum` (`uniqueItems`) with the
    # registered validator, every pair of 30,000 objects compared: some 15 minutes on the event loop.
    check = SchemaCheck.of({"$schema": DRAFTS[3], "properties": {"spec": {"$ref": DRAFTS[1]}}})
    assert check is not None
    assert check.mismatch({"spec": {"enum": [{"a": n} for n in range(30_000)]}}) == ""
    assert check.mismatch({"spec": {"type": 5}}).startswith("argument 'spec/type': 5 is not valid")


def test_a_listed_schema_is_checked_against_its_meta_schema_within_the_bounds() -> None:
    # Found by a review: the meta-check (`check_schema`) ran unbounded: a draft-4 `enum` of 4,000
    # objects in a listing took 14 s comparing every pair (`uniqueItems`, which is not run now); and
    # a schema of more than MOST_SCHEMA_NODES values is left to its server (a keyword's value is read
    # whole each time it is checked: an `enum` of 500,000 took 0.23 s a step).
    assert SchemaCheck.of({"$schema": DRAFTS[1], "enum": [1, 1]}) is not None  # jsonschema: not unique
    assert SchemaCheck.of({"$schema": DRAFTS[1], "enum": [{"a": n} for n in range(30_000)]}) is None
    assert SchemaCheck.of({"items": {"enum": list(range(MOST_SCHEMA_NODES))}}) is None
    assert SchemaCheck.of({"$schema": DRAFTS[3], "type": 5}) is None  # not a schema
    # The meta-check asserts no format: the `regex` one compiled each pattern, a hostile one for seconds.
    hostile = "(?i)" + "[\\x00-\\uffff]" * 200
    assert SchemaCheck.of({"patternProperties": {hostile + str(n): {} for n in range(30)}}) is not None


def test_a_step_is_counted_for_each_part_walked_and_for_a_keywords_large_value() -> None:
    # Found by a review: walking into a part without a counted keyword was free (an `items` of
    # `true`, or of `{}`, over 99,999 items in each of thousands of `allOf` branches: half an hour),
    # as were `unevaluatedItems` and `unevaluatedProperties` (each item looked up in a list: 40 s for
    # one check of 99,999), and a keyword's value of thousands of entries was one step.
    for schema in (
        {"allOf": [{"items": True}] * 4_000},
        {"allOf": [{"items": {}}] * 4_000},
        {"items": True, "unevaluatedItems": False},
        {"allOf": [{"items": {"enum": list(range(2_000))}}] * 4},
    ):
        check = SchemaCheck.of(schema)
        assert check is not None
        assert check.mismatch([1_999] * 99_999) == ""  # past the steps: left to the server, at once


def test_a_ref_to_an_anchor_does_not_walk_the_whole_schema_each_time() -> None:
    # Found by a review: referencing crawled the whole schema for an anchor at each `$ref` that named
    # it (0.14 s a `$ref` in a schema of 20,000 small definitions); the schema is crawled once now.
    definitions = {f"d{n}": {"type": "string"} for n in range(4_000)}
    check = SchemaCheck.of(
        {"$defs": {**definitions, "t": {"$anchor": "t", "type": "integer"}}, "items": {"$ref": "#t"}}
    )
    assert check is not None
    assert check.mismatch([1] * 2_000) == ""
    assert check.mismatch([1, "x"]) == "argument '1': 'x' is not of type 'integer'"


def test_a_plain_schema_gets_its_own_check_and_one_with_any_other_keyword_none() -> None:
    assert _plain_check(ECHO) is not None
    assert _plain_check({**ECHO, "minLength": 1}) is None
    assert _plain_check({"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}}) is None
    assert _plain_check({"enum": [1, True]}) is None  # Python's 1 == True is not JSON's


def test_an_integer_that_is_a_float_or_a_bool_is_left_to_jsonschema() -> None:
    check = _plain_check({"type": "integer"})
    assert check is not None
    assert (check(3), check(3.0), check(True)) == (True, False, False)
    assert SchemaCheck.of({"$schema": DRAFTS[3], "type": "integer"}).mismatch(3.0) == ""  # type: ignore[union-attr]
    assert SchemaCheck.of({"$schema": DRAFTS[1], "type": "integer"}).mismatch(3.0) != ""  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"message": 1}, "argument 'message': 1 is not of type 'string'"),
        ({"message": "x", "y": 1}, "Additional properties are not allowed ('y' was unexpected)"),
        ({}, "'message' is a required property"),
    ],
)
def test_a_mismatch_of_a_plain_schema_is_said_as_jsonschema_says_it(arguments: Any, said: str) -> None:
    check = SchemaCheck.of(ECHO)
    assert check is not None
    assert check.mismatch({"message": "hello"}) == ""
    assert check.mismatch(arguments) == said


def test_an_instance_of_more_values_than_a_check_may_see_is_left_unchecked_by_both_checks() -> None:
    check = SchemaCheck.of({"type": "array", "items": {"type": "integer"}})
    assert check is not None
    assert check.mismatch([1] * 10 + ["x"]) != ""
    assert check.mismatch([1] * MOST_NODES + ["x"]) == ""  # too many to tell: the server passes it on


def test_a_failing_check_walks_its_instance_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by a review: a mismatch was checked twice, once for the verdict and again for the errors
    # that say why: a run's arguments whose one wrong item comes last cost twice the steps of a match.
    check = SchemaCheck.of({"type": "array", "items": {"type": "integer", "minimum": 0}})
    assert check is not None
    spent: list[int] = []

    def counted(left: list[int], steps: int = 1) -> None:
        spent.append(steps)
        real(left, steps)

    real = checks._spend
    monkeypatch.setattr(checks, "_spend", counted)
    assert check.mismatch([1] * 400) == ""
    matched = sum(spent)
    spent.clear()
    assert check.mismatch([1] * 399 + [-1]) == "argument '399': -1 is less than the minimum of 0"
    assert matched < sum(spent) <= matched + 2 * checks.ERROR_STEPS  # one walk, and the error


def _at_depth(frames: int, check: Callable[[], str]) -> str:
    return _at_depth(frames - 1, check) if frames else check()


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ({"type": "object", "$ref": "#"}, {"a": 1}),
        (
            {
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/r"}},
                "$defs": {"r": {"type": "object", "not": {"not": {"$ref": "#/$defs/r"}}}},
            },
            {"a": {"a": {}}},
        ),
    ],
    ids=["ref-to-root", "cycle-through-not"],
)
def test_a_schema_that_recurses_for_ever_is_a_mismatch_at_whatever_depth_the_check_begins(
    schema: Any, instance: Any
) -> None:
    # Found by a review: where Python's recursion limit struck inside rpds (a Rust extension under
    # jsonschema), it panicked, and pyo3's PanicException, a BaseException, ended the server.
    check = SchemaCheck.of(schema)
    assert check is not None
    said = {_at_depth(frames, lambda: check.mismatch(instance)) for frames in range(40)}
    assert said <= {"nested too deep to be checked", "they could not be checked against it (PanicException)"}, said
