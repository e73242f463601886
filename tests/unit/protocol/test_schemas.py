"""The hand-written schemas: valid 2020-12 schemas, carrying the configured limits."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from jsonschema import Draft202012Validator

from runner.config import Config
from runner.outcome import RunResult, Status, StreamText
from runner.protocol.results import structured_result
from runner.protocol.schemas import close_input_schema, close_output_schema, input_schema, output_schema

CONFIG = dataclasses.replace(Config.from_env({}), max_code_bytes=100, max_stdin_bytes=10, max_timeout=30)


def test_both_schemas_are_valid_2020_12_schemas_without_nullable_type_lists() -> None:
    for schema in (input_schema(CONFIG), output_schema(), close_input_schema(), close_output_schema()):
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
    assert set(schema["properties"]) == {"code", "timeout", "stdin", "files", "packages", "session"}
    assert f"at most {CONFIG.max_input_mb} MiB together" in schema["properties"]["files"]["description"]


# RFC 9110 token characters: what SEP-2243 allows an x-mcp-header value to be.
TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def header_annotations(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every subschema with an x-mcp-header, and where it is (the rules allow only properties)."""
    found = [(path, schema)] if "x-mcp-header" in schema else []
    for key, value in schema.items():
        if isinstance(value, dict):
            found += header_annotations(value, f"{path}/{key}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    found += header_annotations(item, f"{path}/{key}/{i}")
    return found


def test_session_carries_x_mcp_header_session_by_the_sep_2243_rules_in_both_tools() -> None:
    for schema in (input_schema(CONFIG), close_input_schema()):
        [(where, prop)] = header_annotations(schema)
        assert where == "/properties/session", "reachable through properties only"
        assert prop["x-mcp-header"] == "Session"
        assert TOKEN.match(prop["x-mcp-header"])
        assert prop["type"] == "string", "only string, integer or boolean may carry a header"
    assert close_input_schema()["required"] == ["session"]


def test_the_output_schema_names_the_session_fields_without_requiring_them_of_a_one_shot_call() -> None:
    schema = output_schema()
    for name in ("session", "rolled_back", "session_note"):
        assert name in schema["properties"]
        assert name not in schema["required"]


def test_the_session_description_states_the_lifetimes_of_this_configuration() -> None:
    config = dataclasses.replace(CONFIG, session_idle_seconds=120, session_max_seconds=7200)
    described = input_schema(config)["properties"]["session"]["description"]
    assert "120 s unused" in described
    assert "7,200 s after it began" in described


def test_a_result_with_a_note_matches_the_output_schema_and_one_without_has_no_note() -> None:
    stderr = StreamText("ModuleNotFoundError: No module named 'requests'\n", 48, 0)
    noted = structured_result(RunResult("0a1b2c3d", Status.ERROR, "exited with status 1", 1, stderr=stderr, note="x"))
    Draft202012Validator(output_schema()).validate(noted)
    assert noted["note"] == "x"
    plain = structured_result(RunResult("0a1b2c3d", Status.OK, exit_code=0))
    Draft202012Validator(output_schema()).validate(plain)
    assert "note" not in plain
