"""The server's configuration: one frozen object built once from the environment at start-up."""

from __future__ import annotations

import glob
import importlib.machinery
import ipaddress
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar, cast, get_args

from runner.errors import ConfigError

LogFormat = Literal["text", "json"]
SandboxMode = Literal["auto", "namespaces", "bwrap", "none", "none-posix-spawn"]
SandboxNetwork = Literal["isolated", "shared"]
Transport = Literal["stdio", "http"]
LogLevel = Literal["debug", "info", "warning", "error"]

MIB = 1024 * 1024
# Paths the HTTP transport serves besides the MCP endpoint; RUNNER_HTTP_PATH may not take one.
OPERATIONS_PATHS = ("/healthz", "/readyz", "/metrics")
# Variables that are gone, and what says the same now: a server still given one stops and says so.
REMOVED = {
    "RUNNER_SPAWN_MODE": (
        "RUNNER_SANDBOX says how runs start now: namespaces and none fork them from a zygote, bwrap and "
        "none-posix-spawn spawn one interpreter per run (fork-server is RUNNER_SANDBOX=none, posix-spawn is "
        "RUNNER_SANDBOX=none-posix-spawn)"
    ),
}


@dataclass(frozen=True, slots=True)
class HttpConfig:
    """How the server listens when RUNNER_TRANSPORT=http (docs/http.md). Unused on stdio."""

    host: str = "127.0.0.1"
    port: int = 8000
    path: str = "/mcp"
    # DNS-rebinding protection: Host and Origin values the MCP endpoint accepts ("name:*": any port).
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    tokens_file: str = ""  # one bearer token per line, "name:token" or "token"; empty: no authentication
    max_body_bytes: int = 0  # a request body beyond this is refused with 413 before it is parsed
    max_concurrent_per_token: int = 0  # 0: a fair share, max_concurrent divided among the tokens
    shutdown_grace: int = 10  # seconds runs in flight may finish after SIGTERM
    workers: int = 1  # server processes accepting on the one port, each with its own pool

    @property
    def loopback(self) -> bool:
        """Whether the server listens on a loopback address only."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a host name: whatever it resolves to, it is not known to be loopback

    @classmethod
    def from_env(cls, env: Mapping[str, str], max_message_bytes: int) -> HttpConfig:
        """Read the RUNNER_HTTP_* variables, RUNNER_AUTH_TOKENS_FILE and RUNNER_SHUTDOWN_GRACE."""
        d = cls()
        host = env.get("RUNNER_HTTP_HOST", "").strip() or d.host
        path = env.get("RUNNER_HTTP_PATH", "").strip() or d.path
        if not re.fullmatch(r"(/[A-Za-z0-9._~-]+)+", path) or path in OPERATIONS_PATHS:
            raise ConfigError(
                "RUNNER_HTTP_PATH",
                f"expected a path such as /mcp, not one of {', '.join(OPERATIONS_PATHS)}; got {path!r}",
            )
        loopback = cls(host=host).loopback
        hosts = _names(env, "RUNNER_HTTP_ALLOWED_HOSTS")
        if not hosts and not loopback:
            raise ConfigError(
                "RUNNER_HTTP_ALLOWED_HOSTS",
                f"required when RUNNER_HTTP_HOST ({host}) is not a loopback address: the Host values clients use "
                "(for example runner.example.com,runner:8000); any other Host is refused with 421",
            )
        origins = _names(env, "RUNNER_HTTP_ALLOWED_ORIGINS", origins=True)
        tokens_file = env.get("RUNNER_AUTH_TOKENS_FILE", "").strip()
        if tokens_file and not (os.path.isabs(tokens_file) and os.path.isfile(tokens_file)):
            raise ConfigError("RUNNER_AUTH_TOKENS_FILE", f"expected an absolute path to a file, got {tokens_file!r}")
        body_kb = _integer(env, "RUNNER_HTTP_MAX_BODY_KB", 0, 0, 1024 * 1024)
        return cls(
            host=host,
            port=_integer(env, "RUNNER_HTTP_PORT", d.port, 0, 65_535),
            path=path,
            allowed_hosts=hosts or ("127.0.0.1:*", "localhost:*", "[::1]:*"),
            allowed_origins=origins
            or (("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*") if loopback else ()),
            tokens_file=os.path.realpath(tokens_file) if tokens_file else "",
            max_body_bytes=body_kb * 1024 or max_message_bytes,
            max_concurrent_per_token=_integer(env, "RUNNER_HTTP_MAX_CONCURRENT_PER_TOKEN", 0, 0, 256),
            shutdown_grace=_integer(env, "RUNNER_SHUTDOWN_GRACE", d.shutdown_grace, 0, 3600),
            workers=_integer(env, "RUNNER_HTTP_WORKERS", d.workers, 1, 64),
        )


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
    packages: str = ""
    packages_site: str = ""
    package_versions: tuple[str, ...] = ()  # "numpy 2.4.6", ... what runs may import besides the stdlib
    preload: tuple[str, ...] = ()
    max_images: int = 4
    max_image_kb: int = 256
    max_returned_kb: int = 512
    max_files_kb: int = 48
    max_input_mb: int = 8
    transport: Transport = "stdio"
    http: HttpConfig = HttpConfig()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """Read every RUNNER_* variable; raise `ConfigError` naming the first bad one."""
        env = os.environ if environ is None else environ
        for name, replacement in REMOVED.items():
            if env.get(name, "").strip():
                raise ConfigError(name, f"removed: {replacement}")
        d = cls()
        max_timeout = _number(env, "RUNNER_MAX_TIMEOUT", d.max_timeout, 0.1, 86_400.0)
        packages, packages_site = _packages(env)
        max_code_bytes = _integer(env, "RUNNER_MAX_CODE_BYTES", d.max_code_bytes, 1, 64 * MIB)
        max_stdin_bytes = _integer(env, "RUNNER_MAX_STDIN_BYTES", d.max_stdin_bytes, 0, 64 * MIB)
        max_input_mb = _integer(env, "RUNNER_MAX_INPUT_MB", d.max_input_mb, 0, 1024)
        transport = cast(Transport, _choice(env, "RUNNER_TRANSPORT", d.transport, get_args(Transport)))
        sized = cls(max_code_bytes=max_code_bytes, max_stdin_bytes=max_stdin_bytes, max_input_mb=max_input_mb)
        return cls(
            max_cpu_seconds=_integer(env, "RUNNER_MAX_CPU_SECONDS", d.max_cpu_seconds, 1, 86_400),
            max_memory_mb=_integer(env, "RUNNER_MAX_MEMORY_MB", d.max_memory_mb, 32, 1_048_576),
            max_processes=_integer(env, "RUNNER_MAX_PROCESSES", d.max_processes, 1, 4096),
            max_file_size_mb=_integer(env, "RUNNER_MAX_FILE_SIZE_MB", d.max_file_size_mb, 0, 1_048_576),
            max_output_chars=_integer(env, "RUNNER_MAX_OUTPUT_CHARS", d.max_output_chars, 100, 10_000_000),
            max_concurrent=_integer(env, "RUNNER_MAX_CONCURRENT", d.max_concurrent, 1, 256),
            default_timeout=_number(env, "RUNNER_DEFAULT_TIMEOUT", d.default_timeout, 0.1, max_timeout),
            max_timeout=max_timeout,
            max_code_bytes=max_code_bytes,
            max_stdin_bytes=max_stdin_bytes,
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
            packages=packages,
            packages_site=packages_site,
            package_versions=_installed(packages_site),
            preload=_preload(env, packages_site),
            max_images=_integer(env, "RUNNER_MAX_IMAGES", d.max_images, 0, 64),
            max_image_kb=_integer(env, "RUNNER_MAX_IMAGE_KB", d.max_image_kb, 1, 64 * 1024),
            max_returned_kb=_integer(env, "RUNNER_MAX_RETURNED_KB", d.max_returned_kb, 0, 1024 * 1024),
            max_files_kb=_integer(env, "RUNNER_MAX_FILES_KB", d.max_files_kb, 0, 1024 * 1024),
            max_input_mb=max_input_mb,
            transport=transport,
            # Read only for HTTP: a stdio server must not fail on settings it never uses.
            http=HttpConfig.from_env(env, sized.max_message_bytes) if transport == "http" else d.http,
        )

    @property
    def memory_bytes(self) -> int:
        """RLIMIT_AS for one run."""
        return self.max_memory_mb * MIB

    @property
    def max_message_bytes(self) -> int:
        """Largest JSON-RPC line accepted: the largest legal call, with room for JSON escaping (and
        for base64, which files may come in)."""
        return 6 * (self.max_code_bytes + self.max_stdin_bytes + self.max_input_bytes) + 64 * 1024

    @property
    def max_input_bytes(self) -> int:
        """What the files of one call may hold in all, decoded."""
        return self.max_input_mb * MIB

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


def _names(env: Mapping[str, str], name: str, *, origins: bool = False) -> tuple[str, ...]:
    """A comma-separated list of Host values (host[:port], port may be *) or of origins (scheme://host[:port])."""
    names = tuple(part.strip() for part in env.get(name, "").split(",") if part.strip())
    pattern = r"https?://[^/\s?#@]+" if origins else r"[^/\s?#@]+"
    expected = "scheme://host[:port] origins" if origins else "host[:port] values"
    for part in names:
        if not re.fullmatch(pattern, part):
            raise ConfigError(name, f"expected comma-separated {expected}, got {part!r}")
    return names


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


def _packages(env: Mapping[str, str]) -> tuple[str, str]:
    """RUNNER_PACKAGES: the environment runs import from, and the directory of it that goes on sys.path
    (its ``site-packages``, or a virtual environment's ``lib/pythonX.Y/site-packages``)."""
    raw = env.get("RUNNER_PACKAGES", "").strip()
    if not raw:
        return "", ""
    if not os.path.isabs(raw) or not os.path.isdir(raw):
        raise ConfigError("RUNNER_PACKAGES", f"expected an absolute path to a package environment, got {raw!r}")
    found = [os.path.join(raw, "site-packages")] if os.path.isdir(os.path.join(raw, "site-packages")) else []
    found = found or sorted(glob.glob(os.path.join(raw, "lib", "python3*", "site-packages")))
    if len(found) != 1:
        raise ConfigError(
            "RUNNER_PACKAGES",
            f"expected {raw!r} to hold one site-packages directory (make sandbox-env builds one), found {len(found)}",
        )
    return os.path.realpath(raw), os.path.realpath(found[0])


DEFAULT_PRELOAD = ("numpy", "pandas", "matplotlib.pyplot")
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _preload(env: Mapping[str, str], packages_site: str) -> tuple[str, ...]:
    """RUNNER_PRELOAD: the modules a second zygote imports before its first fork (comma-separated;
    empty: no such zygote). By default those of numpy, pandas and matplotlib.pyplot installed in
    RUNNER_PACKAGES; nothing without it."""
    raw = env.get("RUNNER_PRELOAD")
    if raw is None:
        present = (name for name in DEFAULT_PRELOAD if os.path.isdir(os.path.join(packages_site, name.split(".")[0])))
        return tuple(present) if packages_site else ()
    names = tuple(name.strip() for name in raw.split(",") if name.strip())
    for name in names:
        if not _MODULE_NAME.match(name):
            raise ConfigError("RUNNER_PRELOAD", f"expected comma-separated module names, got {name!r}")
    if names and not packages_site:
        raise ConfigError("RUNNER_PRELOAD", "needs RUNNER_PACKAGES: the modules to preload come from there")
    for name in names:
        if not _findable(name, packages_site):
            raise ConfigError("RUNNER_PRELOAD", f"no module {name!r} in RUNNER_PACKAGES or the standard library")
    return names


def _findable(name: str, site: str) -> bool:
    """Whether `name` is a module of the standard library or of `site`, found without importing it
    (a module that is there but fails to import stops its zygote, which says why in the log)."""
    top, _, rest = name.partition(".")
    if top in sys.stdlib_module_names:
        return True
    spec = importlib.machinery.PathFinder.find_spec(top, [site])
    for part in rest.split(".") if rest else []:
        if spec is None or not spec.submodule_search_locations:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    return spec is not None


def _installed(site: str) -> tuple[str, ...]:
    """ "name version" of every distribution in `site`, from its .dist-info directory's name."""
    if not site:
        return ()
    names = sorted(entry[: -len(".dist-info")] for entry in os.listdir(site) if entry.endswith(".dist-info"))
    return tuple(" ".join(name.rsplit("-", 1)) for name in names)
