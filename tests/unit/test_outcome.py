"""The text block: exactly the product description's format, plus explicit lines for every variant."""

from __future__ import annotations

import re

from runner.outcome import RunResult, Status, StreamText
from tests.helpers import SEED_PLAIN


def test_the_plain_case_is_exactly_the_seed_format() -> None:
    result = RunResult("a1b2c3d4", Status.OK, exit_code=0, stdout=StreamText("45\n", 3, 0), duration=0.041)
    assert result.to_text() == "[request_id=a1b2c3d4]\n--- stdout ---\n45\n\n--- exit_code: 0 | duration: 0.041s ---"
    assert re.fullmatch(SEED_PLAIN, result.to_text())


def test_stderr_gets_its_own_section_and_a_missing_final_newline_is_added() -> None:
    result = RunResult(
        "a1b2c3d4",
        Status.ERROR,
        "exited with status 1",
        exit_code=1,
        stdout=StreamText("partial", 7, 0),
        stderr=StreamText("Traceback...\nValueError: x\n", 27, 0),
        duration=0.01,
    )
    assert result.to_text() == (
        "[request_id=a1b2c3d4]\n--- stdout ---\npartial\n\n--- stderr ---\nTraceback...\nValueError: x\n\n"
        "--- exit_code: 1 | duration: 0.010s ---"
    )


def test_truncation_timeout_and_signal_have_explicit_lines() -> None:
    result = RunResult(
        "a1b2c3d4",
        Status.TIMEOUT,
        "wall-clock limit of 2s reached; process group killed",
        exit_code=-9,
        stdout=StreamText("head\n... [1,000 bytes dropped] ...\ntail\n", 1010, 1000),
        duration=2.004,
    )
    text = result.to_text()
    assert "--- stdout truncated: 1,000 of 1,010 bytes dropped ---\n" in text
    assert "--- timeout: wall-clock limit of 2s reached; process group killed ---\n" in text
    assert text.endswith("--- exit_code: -9 (SIGKILL) | duration: 2.004s ---")


def test_a_call_that_never_ran_says_why_and_has_no_exit_code() -> None:
    result = RunResult("a1b2c3d4", Status.INVALID_ARGUMENTS, "missing argument: 'code' is a required property")
    assert result.to_text() == (
        "[request_id=a1b2c3d4]\n--- invalid_arguments: missing argument: 'code' is a required property ---\n"
        "--- exit_code: none | duration: 0.000s ---"
    )


def test_a_note_has_its_line_before_the_closing_one() -> None:
    result = RunResult(
        "a1b2c3d4",
        Status.ERROR,
        "exited with status 1",
        exit_code=1,
        stderr=StreamText("ModuleNotFoundError: No module named 'requests'\n", 48, 0),
        duration=0.01,
        note="no module 'requests' here",
    )
    assert result.to_text().endswith("--- note: no module 'requests' here ---\n--- exit_code: 1 | duration: 0.010s ---")
