"""The hand-written schemas and argument validation against them."""

from __future__ import annotations

import dataclasses

import pytest
from jsonschema import Draft202012Validator

from runner.config import Config
from runner.errors import ArgumentError
from runner.protocol.arguments import ArgumentParser
from runner.protocol.schemas import input_schema, output_schema

CONFIG = dataclasses.replace(Config.from_env({}), max_code_bytes=100, max_stdin_bytes=10, max_timeout=30)


def test_both_schemas_are_valid_2020_12_schemas_without_nullable_type_lists() -> None:
    for schema in (input_schema(CONFIG), output_schema()):
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        for prop in schema["properties"].values():
            assert not isinstance(prop.get("type"), list), "clients in strict mode reject type lists; use anyOf"


def test_the_input_schema_carries_the_configured_limits() -> None:
    schema = input_schema(CONFIG)
    assert schema["required"] == ["code"]
    assert schema["properties"]["timeout"]["maximum"] == 30
    assert schema["properties"]["timeout"]["exclusiveMinimum"] == 0
    assert set(schema["properties"]) == {"code", "timeout", "stdin", "files"}
    assert f"at most {CONFIG.max_input_mb} MiB together" in schema["properties"]["files"]["description"]


def test_valid_arguments_parse_with_defaults() -> None:
    args = ArgumentParser(CONFIG).parse({"code": "print(1)"})
    assert (args.code, args.timeout, args.stdin) == ("print(1)", CONFIG.default_timeout, "")
    args = ArgumentParser(CONFIG).parse({"code": "x", "timeout": 2, "stdin": "hi"})
    assert (args.timeout, args.stdin) == (2.0, "hi")


@pytest.mark.parametrize(
    ("arguments", "names"),
    [
        ({}, "'code' is a required property"),
        (None, "'code' is a required property"),
        ([], "arguments must be a JSON object"),
        ({"code": 5}, "invalid argument 'code'"),
        ({"code": "x", "timeout": 0}, "invalid argument 'timeout'"),
        ({"code": "x", "timeout": -1}, "invalid argument 'timeout'"),
        ({"code": "x", "timeout": 31}, "invalid argument 'timeout'"),
        ({"code": "x", "timeout": "5"}, "invalid argument 'timeout'"),
        ({"code": "x", "timeout": True}, "invalid argument 'timeout'"),
        ({"code": "x", "stdin": 3}, "invalid argument 'stdin'"),
        ({"code": "x", "cwd": "/"}, "unknown argument 'cwd'"),
        ({"code": "x" * 101}, "invalid argument 'code': 101 bytes"),
        ({"code": "ğ" * 51}, "invalid argument 'code': 102 bytes"),
        ({"code": "x", "stdin": "y" * 11}, "invalid argument 'stdin': 11 bytes"),
        ({"code": "print('\ud800')"}, "invalid argument 'code': contains a lone surrogate"),
    ],
)
def test_bad_arguments_are_rejected_with_a_message_naming_the_field(arguments: object, names: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        ArgumentParser(CONFIG).parse(arguments)
    assert names in str(caught.value)
