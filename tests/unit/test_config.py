"""Configuration parsing: defaults, accepted values, the HTTP settings, and one clear error naming a bad
variable."""

from __future__ import annotations

import os
import re
import sys

import pytest

from runner.config import Config
from runner.errors import ConfigError

HTTP = {"RUNNER_TRANSPORT": "http"}


def test_an_empty_environment_gives_the_documented_defaults() -> None:
    config = Config.from_env({})
    assert config.max_cpu_seconds == 10
    assert config.max_memory_mb == 256
    assert config.max_processes == 32
    assert config.max_file_size_mb == 16
    assert config.max_output_chars == 20_000
    assert config.max_concurrent == 4
    assert config.default_timeout == 10.0
    assert config.max_timeout == 60.0
    assert config.pool_size == 2
    assert config.log_format == "text"
    assert os.path.isabs(config.python)


def test_every_variable_is_read() -> None:
    config = Config.from_env(
        {
            "RUNNER_MAX_CPU_SECONDS": "3",
            "RUNNER_MAX_MEMORY_MB": "128",
            "RUNNER_MAX_PROCESSES": "8",
            "RUNNER_MAX_FILE_SIZE_MB": "0",
            "RUNNER_MAX_OUTPUT_CHARS": "500",
            "RUNNER_MAX_CONCURRENT": "2",
            "RUNNER_DEFAULT_TIMEOUT": "2.5",
            "RUNNER_MAX_TIMEOUT": "30",
            "RUNNER_MAX_CODE_BYTES": "1000",
            "RUNNER_MAX_STDIN_BYTES": "0",
            "RUNNER_MAX_OUTPUT_BYTES": "65536",
            "RUNNER_MAX_QUEUE": "0",
            "RUNNER_POOL_SIZE": "0",
            "RUNNER_LOG_LEVEL": "DEBUG",
            "RUNNER_LOG_FORMAT": "json",
            "RUNNER_PYTHON": sys.executable,
            "RUNNER_WORK_DIR": "/tmp",
            "RUNNER_SANDBOX": "none-posix-spawn",
            "RUNNER_SANDBOX_NETWORK": "shared",
            "RUNNER_SANDBOX_TMP_MB": "8",
        }
    )
    assert (config.max_cpu_seconds, config.max_memory_mb, config.max_processes) == (3, 128, 8)
    assert (config.max_file_size_mb, config.max_output_chars, config.max_concurrent) == (0, 500, 2)
    assert (config.default_timeout, config.max_timeout) == (2.5, 30.0)
    assert (config.max_code_bytes, config.max_stdin_bytes, config.max_output_bytes) == (1000, 0, 65536)
    assert (config.max_queue, config.pool_size, config.log_level, config.log_format) == (0, 0, "debug", "json")
    assert config.python == sys.executable
    assert config.work_dir == "/tmp"
    assert (config.sandbox, config.sandbox_network, config.sandbox_tmp_mb) == (
        "none-posix-spawn",
        "shared",
        8,
    )


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("RUNNER_MAX_CPU_SECONDS", "0", "from 1 to 86400"),
        ("RUNNER_MAX_CPU_SECONDS", "ten", "an integer"),
        ("RUNNER_MAX_MEMORY_MB", "-5", "from 32 to"),
        ("RUNNER_MAX_PROCESSES", "1.5", "an integer"),
        ("RUNNER_MAX_OUTPUT_CHARS", "99", "from 100 to"),
        ("RUNNER_MAX_CONCURRENT", "0", "from 1 to 256"),
        ("RUNNER_MAX_TIMEOUT", "nan", "a number of seconds"),
        ("RUNNER_DEFAULT_TIMEOUT", "inf", "a number of seconds"),
        ("RUNNER_DEFAULT_TIMEOUT", "0", "a number of seconds"),
        ("RUNNER_LOG_FORMAT", "xml", "text|json"),
        ("RUNNER_LOG_LEVEL", "loud", "debug|info|warning|error"),
        ("RUNNER_PYTHON", "python3", "absolute path"),
        ("RUNNER_PYTHON", "/nonexistent/python", "executable file"),
        ("RUNNER_WORK_DIR", "/nonexistent", "writable directory"),
        ("RUNNER_SANDBOX", "docker", "auto|namespaces|bwrap|none|none-posix-spawn"),
        ("RUNNER_SANDBOX_NETWORK", "open", "isolated|shared"),
        ("RUNNER_SANDBOX_TMP_MB", "0", "from 1 to"),
    ],
)
def test_a_bad_value_is_rejected_with_a_message_naming_the_variable(variable: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Config.from_env({variable: value})
    assert caught.value.variable == variable
    assert str(caught.value).startswith(f"{variable}: ")
    assert says in str(caught.value)


def test_the_default_timeout_may_not_exceed_the_maximum() -> None:
    with pytest.raises(ConfigError) as caught:
        Config.from_env({"RUNNER_MAX_TIMEOUT": "5", "RUNNER_DEFAULT_TIMEOUT": "6"})
    assert caught.value.variable == "RUNNER_DEFAULT_TIMEOUT"
    assert "from 0.1 to 5" in str(caught.value)


def test_blank_values_mean_the_default() -> None:
    assert Config.from_env({"RUNNER_MAX_CONCURRENT": "  "}).max_concurrent == 4


@pytest.mark.parametrize("value", ["fork-server", "posix-spawn", "auto"])
def test_the_removed_spawn_mode_stops_the_server_naming_what_replaced_it(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Config.from_env({"RUNNER_SPAWN_MODE": value, "RUNNER_SANDBOX": "none"})
    assert caught.value.variable == "RUNNER_SPAWN_MODE"
    assert "removed: RUNNER_SANDBOX says how runs start now" in str(caught.value)
    assert "RUNNER_SANDBOX=none-posix-spawn" in str(caught.value)


def test_http_defaults_are_loopback_with_localhost_hosts_and_origins() -> None:
    http = Config.from_env(HTTP).http
    assert (http.host, http.port, http.path) == ("127.0.0.1", 8000, "/mcp")
    assert http.allowed_hosts == ("127.0.0.1:*", "localhost:*", "[::1]:*")
    assert http.allowed_origins == ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")
    assert http.loopback
    assert http.max_body_bytes == Config.from_env({}).max_message_bytes, "the stdio line bound by default"
    assert http.shutdown_grace == 10


def test_a_stdio_server_ignores_the_http_settings() -> None:
    config = Config.from_env({"RUNNER_HTTP_PORT": "not a port", "RUNNER_HTTP_HOST": "0.0.0.0"})
    assert config.transport == "stdio"


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("RUNNER_TRANSPORT", "websocket", "expected one of stdio|http"),
        ("RUNNER_HTTP_PORT", "70000", "expected an integer from 0 to 65535"),
        ("RUNNER_HTTP_PATH", "mcp", "expected a path such as /mcp"),
        ("RUNNER_HTTP_PATH", "/metrics", "not one of /healthz, /readyz, /metrics"),
        ("RUNNER_HTTP_ALLOWED_HOSTS", "good:80,bad/path", "expected comma-separated host[:port] values"),
        ("RUNNER_HTTP_ALLOWED_ORIGINS", "localhost:3000", "scheme://host[:port] origins"),
        ("RUNNER_AUTH_TOKENS_FILE", "relative/tokens", "expected an absolute path to a file"),
        ("RUNNER_SHUTDOWN_GRACE", "-1", "expected an integer from 0 to 3600"),
        ("RUNNER_HTTP_MAX_CONCURRENT_PER_TOKEN", "x", "expected an integer"),
    ],
)
def test_a_bad_http_setting_is_refused_naming_the_variable(variable: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)) as raised:
        Config.from_env({**HTTP, variable: value})
    assert raised.value.variable == variable


def test_a_public_address_needs_the_host_names_clients_use() -> None:
    with pytest.raises(ConfigError, match="required when RUNNER_HTTP_HOST") as raised:
        Config.from_env({**HTTP, "RUNNER_HTTP_HOST": "0.0.0.0"})
    assert raised.value.variable == "RUNNER_HTTP_ALLOWED_HOSTS"
    http = Config.from_env({**HTTP, "RUNNER_HTTP_HOST": "0.0.0.0", "RUNNER_HTTP_ALLOWED_HOSTS": "runner:8000"}).http
    assert http.allowed_hosts == ("runner:8000",)
    assert http.allowed_origins == (), "no browser origin unless configured"
    assert not http.loopback


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("127.example.com", False),
        ("10.0.0.1", False),
    ],
)
def test_only_loopback_addresses_count_as_loopback(host: str, loopback: bool) -> None:
    """A name that merely starts like one (127.example.com) could resolve anywhere."""
    env = {**HTTP, "RUNNER_HTTP_HOST": host, "RUNNER_HTTP_ALLOWED_HOSTS": "runner:*"}
    assert Config.from_env(env).http.loopback is loopback


@pytest.mark.parametrize("value", ["relative/path", "/nonexistent/env"])
def test_a_runner_packages_that_is_no_environment_stops_the_server_naming_it(value: str) -> None:
    with pytest.raises(ConfigError, match="RUNNER_PACKAGES"):
        Config.from_env({"RUNNER_PACKAGES": value})
