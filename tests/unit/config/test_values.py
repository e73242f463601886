"""Configuration parsing: defaults, accepted values, the HTTP settings, and one clear error naming a bad
variable."""

from __future__ import annotations

import dataclasses
import re
import sys

import pytest

from runner.config import KIB, MIB, SETTINGS, Config, HttpConfig, markdown_table
from runner.config.disk import open_environment
from runner.config.removed import DROPPED, RENAMED
from runner.config.settings import Setting
from runner.errors import ConfigError
from tests.conftest import REPO

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
    assert config.max_timeout == 600.0
    assert (config.max_code_bytes, config.max_stdin_bytes, config.max_output_bytes) == (MIB, MIB, 16 * MIB)
    assert (config.max_image_bytes, config.max_returned_bytes, config.max_files_bytes) == (
        256 * KIB,
        512 * KIB,
        48 * KIB,
    )
    assert config.pool_size == 2
    assert config.log_format == "text"
    assert config == Config(default_preload=True), "the defaults are the fields' own"


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
            "RUNNER_MAX_CODE_MB": "0.5",
            "RUNNER_MAX_STDIN_MB": "0",
            "RUNNER_MAX_OUTPUT_MB": "0.0625",
            "RUNNER_MAX_QUEUE": "0",
            "RUNNER_POOL_SIZE": "0",
            "RUNNER_LOG_LEVEL": "DEBUG",
            "RUNNER_LOG_FORMAT": "json",
            "RUNNER_PYTHON": sys.executable,
            "RUNNER_WORK_DIR": "/tmp",
            "RUNNER_SANDBOX": "none-posix-spawn",
            "RUNNER_SANDBOX_NETWORK": "shared",
            "RUNNER_SANDBOX_TMP_MB": "8",
            "RUNNER_SANDBOX_UIDS": "100000-100099",
            "RUNNER_PACKAGES": "/opt/env",
            "RUNNER_PRELOAD": "json, email.mime",
            "RUNNER_MAX_IMAGES": "2",
            "RUNNER_MAX_IMAGE_MB": "0.125",
            "RUNNER_MAX_RETURNED_MB": "2",
            "RUNNER_MAX_FILES_MB": "0.25",
            "RUNNER_MAX_INPUT_MB": "3",
            "RUNNER_MAX_SESSIONS": "5",
            "RUNNER_MAX_SESSIONS_PER_CALLER": "2",
            "RUNNER_SESSION_IDLE_SECONDS": "60",
            "RUNNER_SESSION_MAX_SECONDS": "600",
        }
    )
    assert (config.max_sessions, config.max_sessions_per_caller) == (5, 2)
    assert (config.session_idle_seconds, config.session_max_seconds) == (60, 600)
    assert (config.max_cpu_seconds, config.max_memory_mb, config.max_processes) == (3, 128, 8)
    assert (config.max_file_size_mb, config.max_output_chars, config.max_concurrent) == (0, 500, 2)
    assert (config.default_timeout, config.max_timeout) == (2.5, 30.0)
    assert (config.max_code_bytes, config.max_stdin_bytes, config.max_output_bytes) == (MIB // 2, 0, 64 * KIB)
    assert (config.max_queue, config.pool_size, config.log_level, config.log_format) == (0, 0, "debug", "json")
    assert config.python == sys.executable
    assert config.work_dir == "/tmp"
    assert (config.sandbox, config.sandbox_network, config.sandbox_tmp_mb) == (
        "none-posix-spawn",
        "shared",
        8,
    )
    assert (config.packages, config.preload, config.default_preload) == ("/opt/env", ("json", "email.mime"), False)
    assert (config.max_images, config.max_image_bytes, config.max_returned_bytes, config.max_files_bytes) == (
        2,
        128 * KIB,
        2 * MIB,
        256 * KIB,
    )
    assert config.max_input_mb == 3
    assert config.run_uid_range == range(100000, 100100)


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("RUNNER_MAX_CPU_SECONDS", "0", "from 1 to 86400"),
        ("RUNNER_MAX_CPU_SECONDS", "ten", "an integer"),
        ("RUNNER_MAX_MEMORY_MB", "-5", "from 32 to"),
        ("RUNNER_MAX_MEMORY_MB", "0.5", "an integer from 32 to 1048576, got '0.5'"),
        ("RUNNER_MAX_PROCESSES", "1.5", "an integer"),
        ("RUNNER_MAX_FILE_SIZE_MB", "1048577", "an integer from 0 to 1048576, got 1048577"),
        ("RUNNER_MAX_OUTPUT_CHARS", "99", "from 100 to"),
        ("RUNNER_MAX_CONCURRENT", "0", "from 1 to 256"),
        ("RUNNER_MAX_TIMEOUT", "nan", "a number of seconds"),
        ("RUNNER_DEFAULT_TIMEOUT", "inf", "a number of seconds"),
        ("RUNNER_DEFAULT_TIMEOUT", "0", "a number of seconds"),
        ("RUNNER_MAX_CODE_MB", "0.0005", "a number of MiB from 0.0009765625 to 64, got '0.0005'"),
        ("RUNNER_MAX_CODE_MB", "65", "a number of MiB from 0.0009765625 to 64"),
        ("RUNNER_MAX_STDIN_MB", "-1", "a number of MiB from 0 to 64"),
        ("RUNNER_MAX_OUTPUT_MB", "0.001", "a number of MiB from 0.00390625 to 1024"),
        ("RUNNER_MAX_OUTPUT_MB", "lots", "a number of MiB"),
        ("RUNNER_MAX_QUEUE", "-1", "from 0 to 100000"),
        ("RUNNER_POOL_SIZE", "65", "from 0 to 64"),
        ("RUNNER_LOG_FORMAT", "xml", "text|json"),
        ("RUNNER_LOG_LEVEL", "loud", "debug|info|warning|error"),
        ("RUNNER_PYTHON", "python3", "absolute path"),
        ("RUNNER_WORK_DIR", "tmp", "an absolute path to a writable directory"),
        ("RUNNER_SANDBOX", "docker", "auto|namespaces|bwrap|none|none-posix-spawn"),
        ("RUNNER_SANDBOX_NETWORK", "open", "isolated|shared"),
        ("RUNNER_SANDBOX_TMP_MB", "0", "from 1 to"),
        ("RUNNER_SANDBOX_UIDS", "0-99", "FIRST-LAST, host uids from 1 to 4294967294"),
        ("RUNNER_SANDBOX_UIDS", "60000", "FIRST-LAST"),
        ("RUNNER_SANDBOX_UIDS", "60010-60000", "FIRST <= LAST, got '60010-60000'"),
        ("RUNNER_SANDBOX_UIDS", "60000-4294967295", "from 1 to 4294967294"),
        ("RUNNER_PACKAGES", "env", "an absolute path to a package environment"),
        ("RUNNER_PRELOAD", "numpy,no-such", "comma-separated module names, got 'no-such'"),
        ("RUNNER_MAX_IMAGES", "65", "from 0 to 64"),
        ("RUNNER_MAX_IMAGE_MB", "0", "a number of MiB from 0.0009765625 to 64"),
        ("RUNNER_MAX_RETURNED_MB", "1025", "a number of MiB from 0 to 1024"),
        ("RUNNER_MAX_FILES_MB", "1e400", "a number of MiB from 0 to 1024"),
        ("RUNNER_MAX_INPUT_MB", "1025", "from 0 to 1024"),
        ("RUNNER_TRANSPORT", "websocket", "stdio|http"),
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
    with pytest.raises(ConfigError) as caught:
        Config.from_env({"RUNNER_MAX_TIMEOUT": "5"})
    assert str(caught.value) == (
        "RUNNER_DEFAULT_TIMEOUT: expected a number of seconds from 0.1 to 5, got its default 10 "
        "(RUNNER_MAX_TIMEOUT is lower: set RUNNER_DEFAULT_TIMEOUT too)"
    )


def test_blank_values_mean_the_default() -> None:
    assert Config.from_env({"RUNNER_MAX_CONCURRENT": "  "}).max_concurrent == 4
    assert Config.from_env({"RUNNER_MAX_CODE_MB": ""}).max_code_bytes == MIB
    assert Config.from_env({"RUNNER_MAX_CODE_BYTES": ""}).max_code_bytes == MIB, "a removed name left empty"


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
        open_environment(Config.from_env({"RUNNER_PACKAGES": value}))


CONFIGURATION_PAGE = REPO / "docs" / "configuration.md"


def test_every_declaration_names_a_field_of_the_configuration_and_each_variable_once() -> None:
    fields = {field.name for field in dataclasses.fields(Config)}
    http_fields = {field.name for field in dataclasses.fields(HttpConfig)}
    for setting in SETTINGS:
        assert setting.attribute in (http_fields if setting.http else fields), setting.name
        assert setting.meaning.endswith("."), setting.name
    names = [setting.name for setting in SETTINGS]
    assert len(names) == len(set(names))
    assert not {old for old, _, _ in RENAMED} & set(names)
    assert not {old for old, _ in DROPPED} & set(names)


def test_every_number_variable_accepts_its_own_default_written_out() -> None:
    defaults, http = Config(), HttpConfig()
    for setting in SETTINGS:
        if setting.kind in ("int", "number") and setting.unit != "MiB":
            default = getattr(http if setting.http else defaults, setting.attribute)
            assert setting.parse(str(default)) == default, setting.name


def test_a_declared_range_that_holds_no_value_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="RUNNER_X: declared range 1-0 holds no value"):
        Setting("RUNNER_X", "x", "int", "X.", low=1)


@pytest.mark.parametrize(
    ("value", "count"),
    [
        ("1", MIB),
        ("0.25", 256 * KIB),
        ("0.046875", 48 * KIB),
        ("  2.5  ", 5 * MIB // 2),
        ("0.1", 104_857),  # 104857.6 bytes: rounded down to whole bytes
        ("1e-3", 1048),
    ],
)
def test_a_size_is_a_decimal_number_of_mib_rounded_down_to_whole_bytes(value: str, count: int) -> None:
    assert Config.from_env({"RUNNER_MAX_IMAGE_MB": value}).max_image_bytes == count


def test_preloading_named_modules_needs_a_package_environment() -> None:
    with pytest.raises(ConfigError, match="needs RUNNER_PACKAGES") as caught:
        Config.from_env({"RUNNER_PRELOAD": "json"})
    assert caught.value.variable == "RUNNER_PRELOAD"
    assert Config.from_env({"RUNNER_PRELOAD": ""}).preload == (), "empty: no preloading, and no package environment"


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("RUNNER_MAX_CODE_BYTES", "2000", "use RUNNER_MAX_CODE_MB, a number of MiB (RUNNER_MAX_CODE_BYTES=2000 is "),
        ("RUNNER_MAX_STDIN_BYTES", "1048576", "(RUNNER_MAX_STDIN_BYTES=1048576 is RUNNER_MAX_STDIN_MB=1)"),
        ("RUNNER_MAX_OUTPUT_BYTES", "lots", "removed: use RUNNER_MAX_OUTPUT_MB, a number of MiB"),
        ("RUNNER_MAX_IMAGE_KB", "256", "(RUNNER_MAX_IMAGE_KB=256 is RUNNER_MAX_IMAGE_MB=0.25)"),
        ("RUNNER_MAX_RETURNED_KB", "512", "(RUNNER_MAX_RETURNED_KB=512 is RUNNER_MAX_RETURNED_MB=0.5)"),
        ("RUNNER_MAX_FILES_KB", "48", "(RUNNER_MAX_FILES_KB=48 is RUNNER_MAX_FILES_MB=0.046875)"),
        ("RUNNER_HTTP_MAX_BODY_KB", "1024", "removed: the largest request body is the largest legal call"),
    ],
)
def test_a_removed_name_stops_the_server_naming_its_replacement(variable: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Config.from_env({variable: value})
    assert caught.value.variable == variable
    assert str(caught.value).startswith(f"{variable}: removed: ")
    assert says in str(caught.value)


def test_every_removed_name_is_documented_with_its_replacement() -> None:
    page = CONFIGURATION_PAGE.read_text(encoding="utf-8")
    for old, new, _ in RENAMED:
        assert f"| `{old}` | `{new}` |" in page
    for old, _ in DROPPED:
        assert f"| `{old}` |" in page


def test_the_documented_table_of_every_variable_is_the_one_printed_from_the_declarations() -> None:
    page = CONFIGURATION_PAGE.read_text(encoding="utf-8")
    table = markdown_table(SETTINGS, Config(), HttpConfig())
    assert table.startswith("| Variable | Default | Accepted | Meaning |\n")
    assert len(table.splitlines()) == 2 + len(SETTINGS)
    assert table in page, (
        "docs/configuration.md's table of every variable differs from the declarations in runner/config/variables.py: "
        "paste the output of `python -m runner.config` over it"
    )


def test_the_largest_request_body_follows_the_input_caps() -> None:
    env = {**HTTP, "RUNNER_MAX_CODE_MB": "0.15625", "RUNNER_MAX_STDIN_MB": "0", "RUNNER_MAX_INPUT_MB": "0"}
    assert Config.from_env(env).http.max_body_bytes == 6 * 160 * 1024 + 64 * 1024 == 1024 * 1024
