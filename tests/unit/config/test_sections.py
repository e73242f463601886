"""The configuration's sections: each carries its settings' values from the `Config` it is made from,
and every setting has one section that owns it, so that a setting added without a place fails here."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from runner.config import MIB, SETTINGS, Config, HttpConfig, sections
from runner.config.sections import (
    EgressConfig,
    IsolationConfig,
    KeptConfig,
    LimitsConfig,
    LoggingConfig,
    PackagesConfig,
    PoolConfig,
    ReturnsConfig,
    ServingConfig,
    SessionsConfig,
    TasksConfig,
    ToolsConfig,
    owned_fields,
)

# Each section, by the Config property that hands it out.
SECTIONS: dict[str, type] = {
    "limits": LimitsConfig,
    "returns": ReturnsConfig,
    "kept": KeptConfig,
    "sessions": SessionsConfig,
    "tasks": TasksConfig,
    "pool": PoolConfig,
    "packages_section": PackagesConfig,
    "isolation": IsolationConfig,
    "logging": LoggingConfig,
    "serving": ServingConfig,
    "tools": ToolsConfig,
    "egress": EgressConfig,
}
# Set, each of them, to a value other than its default.
ENVIRONMENT = {
    "RUNNER_MAX_CPU_SECONDS": "7",
    "RUNNER_MAX_MEMORY_MB": "300",
    "RUNNER_MAX_OUTPUT_MB": "3",
    "RUNNER_DEFAULT_TIMEOUT": "5",
    "RUNNER_MAX_INPUT_MB": "2",
    "RUNNER_MAX_OUTPUT_CHARS": "999",
    "RUNNER_MAX_IMAGES": "2",
    "RUNNER_MAX_KEPT_OUTPUT_MB": "2",
    "RUNNER_KEPT_OUTPUT_SECONDS": "60",
    "RUNNER_MAX_SESSIONS": "3",
    "RUNNER_SESSION_IDLE_SECONDS": "30",
    "RUNNER_MAX_TASKS_PER_CALLER": "5",
    "RUNNER_POOL_SIZE": "1",
    "RUNNER_MAX_CONCURRENT": "2",
    "RUNNER_MAX_QUEUE": "9",
    "RUNNER_PYTHON": "/opt/python/bin/python3",
    "RUNNER_WORK_DIR": "/var/tmp/runner",
    "RUNNER_WHEELHOUSE_CACHE": "/var/cache/runner",
    "RUNNER_SANDBOX": "none",
    "RUNNER_SANDBOX_TMP_MB": "32",
    "RUNNER_SANDBOX_UIDS": "70000-70999",
    "RUNNER_LOG_LEVEL": "debug",
    "RUNNER_TRANSPORT": "http",
    "RUNNER_HTTP_REPLICA": "east",
    "RUNNER_AUTH_TOKENS_FILE": "/etc/runner/tokens",
    "RUNNER_TOOLS_CONFIG": "/etc/runner/tools.json",
    "RUNNER_TOOLS_MAX_CALLS": "7",
    "RUNNER_TOOLS_MAX_MB": "3",
    "RUNNER_TOOLS_MAX_CONCURRENT": "2",
    "RUNNER_TOOLS_SPIN_US": "40",
}


@pytest.fixture
def config() -> Config:
    return Config.from_env(ENVIRONMENT)


def test_every_section_is_handed_out_by_the_configuration() -> None:
    defined = {cls for _, cls in inspect.getmembers(sections, inspect.isclass) if cls.__module__ == sections.__name__}
    assert defined == set(SECTIONS.values())
    for name, section in SECTIONS.items():
        made = getattr(Config(), name)
        assert isinstance(made, section), name
        assert not hasattr(made, "__dict__"), f"{name}: slotted"
        first = dataclasses.fields(made)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(made, first, getattr(made, first))


def test_every_setting_belongs_to_exactly_one_section() -> None:
    # A field added to Config without a place here fails: give it to the section whose consumers read it.
    owners: dict[str, list[str]] = {field.name: [] for field in dataclasses.fields(Config)}
    owners["http"].append("http")  # HttpConfig, the section itself
    for name, section in SECTIONS.items():
        for field in owned_fields(section):
            assert field in owners, f"{section.__name__}.{field} is no field of Config: list it in CARRIED"
            owners[field].append(name)
    assert {field: found for field, found in owners.items() if len(found) != 1} == {}
    # And so every variable too, HTTP's in HttpConfig.
    for declared in SETTINGS:
        assert declared.attribute in {f.name for f in dataclasses.fields(HttpConfig if declared.http else Config)}


def test_what_a_section_carries_from_another_is_among_its_fields() -> None:
    for section in SECTIONS.values():
        names = {field.name for field in dataclasses.fields(section)}
        assert set(getattr(section, "CARRIED", ())) <= names, section.__name__


def test_each_section_carries_the_values_of_the_configuration_it_is_made_from(config: Config) -> None:
    for name, section in SECTIONS.items():
        made = getattr(config, name)
        for field in owned_fields(section):
            assert getattr(made, field) == getattr(config, field), f"{name}.{field}"
    assert config.limits.max_cpu_seconds == 7
    assert (config.limits.memory_bytes, config.limits.max_output_bytes) == (300 * MIB, 3 * MIB)
    assert (config.limits.default_timeout, config.limits.max_input_bytes) == (5.0, 2 * MIB)
    assert (config.returns.max_output_chars, config.returns.max_images) == (999, 2)
    assert (config.kept.max_kept_output_bytes, config.kept.kept_output_seconds, config.kept.replica) == (
        2 * MIB,
        60,
        "east",
    )
    assert (config.sessions.max_sessions, config.sessions.session_idle_seconds, config.sessions.replica) == (
        3,
        30,
        "east",
    )
    assert (config.tasks.max_tasks_per_caller, config.tasks.kept_output_seconds, config.tasks.replica) == (
        5,
        60,
        "east",
    )
    assert config.pool == PoolConfig(1, 2, 9, "/opt/python/bin/python3", "/var/tmp/runner")
    assert config.packages_section.provided_packages == "/var/cache/runner/packages"
    assert config.packages_section.python == "/opt/python/bin/python3"
    assert config.logging == LoggingConfig("debug", "text")
    assert config.serving == ServingConfig("http", 1)
    assert config.tools == ToolsConfig("/etc/runner/tools.json", 7, 3, 2, 40)
    assert config.tools.max_bytes == 3 * MIB


def test_the_isolation_inputs_are_what_the_plan_reads(config: Config) -> None:
    isolation = config.isolation
    assert (isolation.sandbox, isolation.sandbox_tmp_mb, isolation.run_uid_range) == ("none", 32, range(70000, 71000))
    assert (isolation.python, isolation.provided_packages) == ("/opt/python/bin/python3", "/var/cache/runner/packages")
    assert isolation.pid_namespaces == 1 + 2 + 3  # the pool's ready interpreters, the runs, the sessions' anchors
    assert isolation.hidden_files == ("/etc/runner/tokens", "/etc/runner/tools.json")
    stdio = dataclasses.replace(config, transport="stdio")
    assert stdio.isolation.hidden_files == ("/etc/runner/tools.json",), "no tokens file is read on stdio"


def test_several_workers_keep_no_sessions_tasks_or_outputs_and_the_whole_says_what_its_sections_say() -> None:
    one = Config.from_env({"RUNNER_TRANSPORT": "http"})
    several = Config.from_env({"RUNNER_TRANSPORT": "http", "RUNNER_HTTP_WORKERS": "3"})
    assert (one.sessions.refused, one.tasks.refused, one.kept.keeps_output) == ("", "", True)
    assert "RUNNER_HTTP_WORKERS=3" in several.sessions.refused
    assert "RUNNER_HTTP_WORKERS=3" in several.tasks.refused
    assert (several.kept.keeps_output, several.kept.per_call_bytes, several.serving.workers) == (False, 0, 3)
    # A stdio server is one process whatever its (unread) HTTP settings say.
    assert dataclasses.replace(several, transport="stdio").sessions.refused == ""
    off = Config(max_sessions=0, max_tasks_per_caller=0, max_kept_total_bytes=0)
    assert "RUNNER_MAX_SESSIONS=0" in off.sessions.refused
    assert "RUNNER_MAX_TASKS_PER_CALLER=0" in off.tasks.refused
    assert not off.kept.keeps_output
    for config in (one, several, off):
        assert config.max_message_bytes == config.limits.max_message_bytes
        assert config.run_uid_range == config.isolation.run_uid_range
