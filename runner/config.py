"""The server's configuration: one frozen object built once from the environment at start-up."""

from __future__ import annotations

import math
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar, cast, get_args

from runner.errors import ConfigError

LogFormat = Literal["text", "json"]
SandboxMode = Literal["auto", "none", "bwrap", "namespaces"]
SandboxNetwork = Literal["isolated", "shared"]
SpawnMode = Literal["auto", "posix-spawn", "fork-server"]
LogLevel = Literal["debug", "info", "warning", "error"]

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Config:
    """Every tunable of the server. Build it with `Config.from_env`; pass it down, never mutate it."""

    max_cpu_seconds: int = 10
    max_memory_mb: int = 256
    max_processes: int = 32
    max_file_size_mb: int = 16
    max_output_chars: int = 20_000
    max_concurrent: int = 4
    default_timeout: float = 10.0
    max_timeout: float = 60.0
    max_code_bytes: int = 1 * MIB
    max_stdin_bytes: int = 1 * MIB
    max_output_bytes: int = 16 * MIB
    max_queue: int = 64
    pool_size: int = 2
    log_level: LogLevel = "info"
    log_format: LogFormat = "text"
    python: str = ""
    work_dir: str = ""
    sandbox: SandboxMode = "auto"
    sandbox_network: SandboxNetwork = "isolated"
    sandbox_tmp_mb: int = 64
    spawn_mode: SpawnMode = "auto"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """Read every RUNNER_* variable; raise `ConfigError` naming the first bad one."""
        env = os.environ if environ is None else environ
        d = cls()
        max_timeout = _number(env, "RUNNER_MAX_TIMEOUT", d.max_timeout, 0.1, 86_400.0)
        return cls(
            max_cpu_seconds=_integer(env, "RUNNER_MAX_CPU_SECONDS", d.max_cpu_seconds, 1, 86_400),
            max_memory_mb=_integer(env, "RUNNER_MAX_MEMORY_MB", d.max_memory_mb, 32, 1_048_576),
            max_processes=_integer(env, "RUNNER_MAX_PROCESSES", d.max_processes, 1, 4096),
            max_file_size_mb=_integer(env, "RUNNER_MAX_FILE_SIZE_MB", d.max_file_size_mb, 0, 1_048_576),
            max_output_chars=_integer(env, "RUNNER_MAX_OUTPUT_CHARS", d.max_output_chars, 100, 10_000_000),
            max_concurrent=_integer(env, "RUNNER_MAX_CONCURRENT", d.max_concurrent, 1, 256),
            default_timeout=_number(env, "RUNNER_DEFAULT_TIMEOUT", d.default_timeout, 0.1, max_timeout),
            max_timeout=max_timeout,
            max_code_bytes=_integer(env, "RUNNER_MAX_CODE_BYTES", d.max_code_bytes, 1, 64 * MIB),
            max_stdin_bytes=_integer(env, "RUNNER_MAX_STDIN_BYTES", d.max_stdin_bytes, 0, 64 * MIB),
            max_output_bytes=_integer(env, "RUNNER_MAX_OUTPUT_BYTES", d.max_output_bytes, 4096, 1024 * MIB),
            max_queue=_integer(env, "RUNNER_MAX_QUEUE", d.max_queue, 0, 100_000),
            pool_size=_integer(env, "RUNNER_POOL_SIZE", d.pool_size, 0, 64),
            log_level=cast(LogLevel, _choice(env, "RUNNER_LOG_LEVEL", d.log_level, get_args(LogLevel))),
            log_format=cast(LogFormat, _choice(env, "RUNNER_LOG_FORMAT", d.log_format, get_args(LogFormat))),
            python=_python(env),
            work_dir=_work_dir(env),
            sandbox=cast(SandboxMode, _choice(env, "RUNNER_SANDBOX", d.sandbox, get_args(SandboxMode))),
            sandbox_network=cast(
                SandboxNetwork, _choice(env, "RUNNER_SANDBOX_NETWORK", d.sandbox_network, get_args(SandboxNetwork))
            ),
            sandbox_tmp_mb=_integer(env, "RUNNER_SANDBOX_TMP_MB", d.sandbox_tmp_mb, 1, 1_048_576),
            spawn_mode=cast(SpawnMode, _choice(env, "RUNNER_SPAWN_MODE", d.spawn_mode, get_args(SpawnMode))),
        )

    @property
    def memory_bytes(self) -> int:
        """RLIMIT_AS for one run."""
        return self.max_memory_mb * MIB

    @property
    def max_message_bytes(self) -> int:
        """Largest JSON-RPC line accepted: the largest legal call, with room for JSON escaping."""
        return 6 * (self.max_code_bytes + self.max_stdin_bytes) + 64 * 1024

    @property
    def file_size_bytes(self) -> int:
        """RLIMIT_FSIZE for one run."""
        return self.max_file_size_mb * MIB


T = TypeVar("T")


def _parse(env: Mapping[str, str], name: str, default: T, convert: Callable[[str], T], expected: str) -> T:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return convert(raw.strip())
    except ValueError:
        raise ConfigError(name, f"expected {expected}, got {raw!r}") from None


def _integer(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    expected = f"an integer from {low} to {high}"
    value = _parse(env, name, default, int, expected)
    if not low <= value <= high:
        raise ConfigError(name, f"expected {expected}, got {value}")
    return value


def _number(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    expected = f"a number of seconds from {low:g} to {high:g}"
    value = _parse(env, name, default, float, expected)
    if not math.isfinite(value) or not low <= value <= high:
        raise ConfigError(name, f"expected {expected}, got {env.get(name)!r}")
    return value


def _choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    value = _parse(env, name, default, str.lower, "one of " + "|".join(choices))
    if value not in choices:
        raise ConfigError(name, f"expected one of {'|'.join(choices)}, got {env.get(name)!r}")
    return value


def _python(env: Mapping[str, str]) -> str:
    # The real binary, not a venv link or a pyenv shim: a shim costs ~70 ms per spawn, and with
    # -I -S the base interpreter never sees the server's site-packages anyway.
    raw = env.get("RUNNER_PYTHON", "").strip()
    path = raw or os.path.realpath(sys.executable)
    if not os.path.isabs(path):
        raise ConfigError("RUNNER_PYTHON", f"expected an absolute path to a Python 3 interpreter, got {raw!r}")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ConfigError("RUNNER_PYTHON", f"expected an executable file, got {path!r}")
    return path


def _work_dir(env: Mapping[str, str]) -> str:
    raw = env.get("RUNNER_WORK_DIR", "").strip()
    path = raw or tempfile.gettempdir()
    if not os.path.isabs(path):
        raise ConfigError("RUNNER_WORK_DIR", f"expected an absolute path to a writable directory, got {raw!r}")
    if not (os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)):
        raise ConfigError("RUNNER_WORK_DIR", f"expected a writable directory, got {path!r}")
    return path
