"""What is said of RUNNER_* names the server has no setting for (found by a new user: a misspelled
variable was ignored without a word)."""

from __future__ import annotations

import pytest

from runner.config import SETTINGS
from runner.settings import unknown_variables


@pytest.mark.parametrize(
    ("name", "guess"),
    [
        ("RUNNER_MAXCPU", "RUNNER_MAX_CPU_SECONDS"),
        ("RUNNER_SANBOX", "RUNNER_SANDBOX"),
        ("RUNNER_MAX_MEMORY", "RUNNER_MAX_MEMORY_MB"),
        ("RUNNER_HTTP_PROT", "RUNNER_HTTP_PORT"),
        ("RUNNER_TIMEOUT", "RUNNER_MAX_TIMEOUT"),
    ],
)
def test_a_misspelled_variable_is_named_with_the_setting_it_most_likely_means(name: str, guess: str) -> None:
    assert unknown_variables(SETTINGS, {name: "5"}) == [
        f"{name} is not a setting of this server, so it is ignored; did you mean {guess}?"
    ]


def test_known_settings_other_variables_and_the_test_suite_s_own_are_not_mentioned() -> None:
    environ = {"RUNNER_MAX_CPU_SECONDS": "5", "PATH": "/bin", "RUNNER_TEST_PACKAGES": "/x", "RUNNERX": "1"}
    assert unknown_variables(SETTINGS, environ) == []
    assert unknown_variables(SETTINGS, {"RUNNER_QWERTY": "1"}) == [
        "RUNNER_QWERTY is not a setting of this server, so it is ignored"
    ]
