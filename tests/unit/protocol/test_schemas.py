"""The hand-written schemas: valid 2020-12 schemas, carrying the configured limits."""

from __future__ import annotations

import dataclasses

from jsonschema import Draft202012Validator

from runner.config import Config
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
