"""Argument validation against the hand-written input schema: defaults, and errors naming the field."""

from __future__ import annotations

import dataclasses
import time

import pytest

from runner.config import Config
from runner.errors import ArgumentError
from runner.protocol.arguments import ArgumentParser

CONFIG = dataclasses.replace(Config.from_env({}), max_code_bytes=100, max_stdin_bytes=10, max_timeout=30)


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


def test_an_unknown_field_in_a_file_entry_is_named_with_where_it_is() -> None:
    from runner.config import Config
    from runner.protocol.arguments import ArgumentParser

    with pytest.raises(ArgumentError) as caught:
        ArgumentParser(Config()).parse({"code": "x", "files": [{"path": "a", "content": "", "mode": 1}]})
    assert str(caught.value) == (
        "invalid argument 'files[0]': unknown field 'mode'; a file has 'path', 'content' and 'encoding'"
    )
    with pytest.raises(ArgumentError) as caught:
        ArgumentParser(Config()).parse({"code": "x", "files": [{"path": 3, "content": ""}]})
    assert str(caught.value).startswith("invalid argument 'files[0].path': 3 is not of type 'string'")


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"code": "x", "timeout": 0}, "invalid argument 'timeout': must be more than 0, got 0"),
        ({"code": "x", "timeout": 31}, "invalid argument 'timeout': must be at most 30 (RUNNER_MAX_TIMEOUT), got 31"),
        (
            {"code": "x", "files": [{"name": "a.csv", "content": "1"}]},
            "invalid argument 'files[0]': missing field 'path'; unknown field 'name'; "
            "a file has 'path', 'content' and 'encoding'",
        ),
        (
            {"code": "x" * 101},
            "invalid argument 'code': 101 bytes of UTF-8, more than the limit of 100 (RUNNER_MAX_CODE_MB)",
        ),
        ({"code": "x", "stdin": "y" * 11}, "more than the limit of 10 (RUNNER_MAX_STDIN_MB)"),
    ],
)
def test_a_bad_argument_is_told_in_words_that_name_the_field_the_bound_and_its_setting(
    arguments: dict[str, object], says: str
) -> None:
    # Found by a new user: "0 is less than or equal to the minimum of 0", and a misnamed file field
    # told as "missing argument: 'path' is a required property".
    with pytest.raises(ArgumentError) as caught:
        ArgumentParser(CONFIG).parse(arguments)
    assert says in str(caught.value)


MILLION = 1_000_000


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        ("run_python", {"code": "1", "files": [1] * MILLION}, "invalid argument 'files': 1,000,000 entries"),
        ("run_python", {"code": "1", "packages": [1] * MILLION}, "invalid argument 'packages': 1,000,000 entries"),
        ("run_python", {"code": "1", "files": [[1] * MILLION]}, "invalid argument 'files[0]': [1, 1,"),
        ("run_python", {"code": [1] * MILLION}, "invalid argument 'code': [1, 1, 1"),
        ("run_python", {"code": "1", **{f"k{i}": 1 for i in range(MILLION)}}, "and 999,995 more"),
        ("run_python", {"code": "1", "files": [{"path": "p" * 10 * MILLION, "content": ""}]}, "10,000,000 characters"),
        ("run_python", {"code": "1", "files": [{"path": "a", "content": "", "encoding": "e" * MILLION}]}, "eee..."),
        (
            "run_python",
            {"code": "1", "files": [{"path": "a", "content": "", **{str(i): 1 for i in range(MILLION)}}]},
            "more",
        ),
        ("run_python", {"code": "1", "packages": ["n" * 10 * MILLION]}, "10,000,000 characters"),
        ("close_session", {"session": [1] * MILLION}, "invalid argument 'session': [1, 1,"),
        ("close_session", {str(i): 1 for i in range(MILLION)}, "unknown argument '0', '1', '10'"),
    ],
)
def test_a_million_wrong_items_or_keys_are_refused_in_a_fraction_of_a_cpu_second_with_a_short_message(
    tool: str, arguments: dict[str, object], says: str
) -> None:
    # Found by a review: jsonschema made and ranked an error for each of a million wrong items of `files`
    # (11.6 s of CPU, on the event loop) and repr'd the whole array into a 3 MB message; 1M unknown
    # arguments were listed whole (11 MB).
    parser = ArgumentParser(CONFIG)
    parser.parse({"code": "1"})  # jsonschema imported and the validators made, as after a first call
    parser.parse_close({"session": "s"})
    started = time.thread_time()
    with pytest.raises(ArgumentError) as caught:
        parser.parse(arguments) if tool == "run_python" else parser.parse_close(arguments)
    assert time.thread_time() - started < 1
    assert says in str(caught.value)
    assert len(str(caught.value)) < 500


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_timeout_that_is_not_a_finite_number_is_refused_naming_it(value: float) -> None:
    # Found by a review: JSON's NaN, which the SDK's parser takes, passed every bound of the schema (each
    # comparison false) and reached the run's deadline: internal_error and a traceback in the log.
    with pytest.raises(ArgumentError) as caught:
        ArgumentParser(CONFIG).parse({"code": "1", "timeout": value})
    assert str(caught.value) == f"invalid argument 'timeout': must be a finite number, got {value}"
