"""What is said of RUNNER_* names the server has no setting for (found by a new user: a misspelled
variable was ignored without a word)."""

from __future__ import annotations

import pytest

from runner.config import SETTINGS, Config
from runner.config.settings import unknown_variables
from runner.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "guess"),
    [
        ("RUNNER_MAXCPU", "RUNNER_MAX_CPU_SECONDS"),
        ("RUNNER_SANBOX", "RUNNER_SANDBOX"),
        ("RUNNER_MAX_MEMORY", "RUNNER_MAX_MEMORY_MB"),
        ("RUNNER_HTTP_PROT", "RUNNER_HTTP_PORT"),
        ("RUNNER_MAX_TIMEOUTS", "RUNNER_MAX_TIMEOUT"),
        ("RUNNER_max_memory_mb", "RUNNER_MAX_MEMORY_MB"),
    ],
)
def test_a_misspelled_variable_is_named_with_the_setting_it_most_likely_means(name: str, guess: str) -> None:
    assert unknown_variables(SETTINGS, {name: "5"}) == [(name, f"not a setting of this server; did you mean {guess}?")]


def test_a_name_that_could_mean_either_timeout_names_both() -> None:
    [(_, why)] = unknown_variables(SETTINGS, {"RUNNER_TIMEOUT": "30"})
    assert "RUNNER_DEFAULT_TIMEOUT (a call's timeout when it names none)" in why
    assert "RUNNER_MAX_TIMEOUT (the most a call may ask for)" in why


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("RUNNER_TOOLS", "RUNNER_TOOLS_CONFIG"),
        ("RUNNER_NETWORK", "RUNNER_EGRESS_ALLOW"),
        ("RUNNER_ALLOW_NETWORK", "RUNNER_EGRESS_ALLOW"),
    ],
)
def test_a_name_for_code_mode_or_the_network_names_the_setting_a_user_means(name: str, meant: str) -> None:
    # Found by a first hour: RUNNER_TOOLS was told RUNNER_TOOLS_MAX_MB, RUNNER_NETWORK the setting that
    # gives runs the server's whole network, RUNNER_ALLOW_NETWORK nothing.
    [(_, why)] = unknown_variables(SETTINGS, {name: "x"})
    assert why.startswith(f"not a setting of this server; did you mean {meant} ("), why


def test_a_misspelled_variable_stops_the_server_naming_it() -> None:
    # Found by a new user's first hour: RUNNER_MAX_MEMORY=512 started the server with 256 MiB runs and one
    # warning that a Claude Desktop user never sees.
    said = r"^RUNNER_MAX_MEMORY: not a setting of this server; did you mean RUNNER_MAX_MEMORY_MB\?$"
    with pytest.raises(ConfigError, match=said):
        Config.from_env({"RUNNER_MAX_MEMORY": "512"})


def test_known_settings_other_variables_and_the_test_suite_s_own_are_not_mentioned() -> None:
    environ = {"RUNNER_MAX_CPU_SECONDS": "5", "PATH": "/bin", "RUNNER_TEST_PACKAGES": "/x", "RUNNERX": "1"}
    assert unknown_variables(SETTINGS, environ) == []
    assert unknown_variables(SETTINGS, {"RUNNER_QWERTY": "1"}) == [("RUNNER_QWERTY", "not a setting of this server")]


def test_the_variables_github_actions_sets_on_every_job_are_not_the_server_s_and_stop_nothing() -> None:
    # Found by a first hour: RUNNER_OS=Linux stopped the server (exit 2), so a client in a CI job that
    # passed its environment on had none.
    environ = dict.fromkeys(("RUNNER_OS", "RUNNER_ARCH", "RUNNER_NAME", "RUNNER_TEMP", "RUNNER_TOOL_CACHE"), "x")
    environ |= dict.fromkeys(("RUNNER_DEBUG", "RUNNER_ENVIRONMENT", "RUNNER_WORKSPACE", "RUNNER_TRACKING_ID"), "1")
    assert unknown_variables(SETTINGS, environ) == []
    assert Config.from_env(environ | {"RUNNER_MAX_CPU_SECONDS": "7"}).max_cpu_seconds == 7
