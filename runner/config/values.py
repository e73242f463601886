"""The server's configuration: one frozen object built once from the environment at start-up.

Every RUNNER_* variable is declared once, in `runner.config.variables.SETTINGS`: its field, type, unit,
range and meaning (its default is its field's, here). Reading it, the error naming it and the table
of docs/configuration.md (`python -m runner.config` prints it) come from that declaration; the rules
between variables are checked here, after. `Config.from_env` reads text only: the paths it names
are looked at, and what follows from them filled in, where the environment is opened
(`runner.config.disk.open_environment`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.config.locks import Distribution
from runner.config.removed import REMOVED, refuse_removed
from runner.config.settings import KIB as KIB
from runner.config.settings import MIB as MIB
from runner.config.settings import Setting, unknown_variables
from runner.config.variables import DEFAULT_PRELOAD as DEFAULT_PRELOAD
from runner.config.variables import LOOPBACK_HOSTS, LOOPBACK_ORIGINS
from runner.config.variables import OPERATIONS_PATHS as OPERATIONS_PATHS
from runner.config.variables import SETTINGS as SETTINGS
from runner.config.variables import LogFormat as LogFormat
from runner.config.variables import LogLevel as LogLevel
from runner.config.variables import SandboxMode as SandboxMode
from runner.config.variables import SandboxNetwork as SandboxNetwork
from runner.config.variables import Transport as Transport
from runner.errors import ConfigError

# In RUNNER_WHEELHOUSE_CACHE: the installed packages, the one part of it runs see (`provided_packages`).
PROVIDED_DIRECTORY = "packages"


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
    # A request body beyond this is refused with 413 before it is parsed: the largest legal call
    # (`Config.max_message_bytes`), which the input caps set.
    max_body_bytes: int = 0
    max_concurrent_per_token: int = 0  # 0: a fair share, max_concurrent divided among the tokens
    shutdown_grace: int = 10  # seconds runs in flight may finish after SIGTERM
    workers: int = 1  # server processes accepting on the one port, each with its own pool
    replica: str = ""  # named in the handles of this replica's sessions, for a proxy to route on

    @property
    def loopback(self) -> bool:
        """Whether the server listens on a loopback address only."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a host name: whatever it resolves to, it is not known to be loopback


@dataclass(frozen=True, slots=True)
class Config:
    """Every tunable of the server. Build it with `Config.from_env`, open it with
    `runner.config.disk.open_environment`; pass it down, never mutate it."""

    max_cpu_seconds: int = 10
    max_memory_mb: int = 256
    max_processes: int = 32
    max_file_size_mb: int = 16
    max_output_chars: int = 20_000
    max_concurrent: int = 4
    default_timeout: float = 10.0
    max_timeout: float = 600.0
    max_code_bytes: int = 1 * MIB
    max_stdin_bytes: int = 1 * MIB
    max_output_bytes: int = 16 * MIB
    max_kept_output_bytes: int = 16 * MIB
    max_kept_caller_bytes: int = 256 * MIB
    max_kept_total_bytes: int = 1024 * MIB
    kept_output_seconds: int = 3600
    max_queue: int = 64
    max_sessions: int = 16
    max_sessions_per_caller: int = 4
    sessions_memory_mb: int = 0  # 0: sized from what the server can hold (`runner.config.memory`)
    sessions_budget_bytes: int = 0  # filled in when the environment is opened (`runner.config.memory`)
    session_idle_seconds: int = 900
    session_max_seconds: int = 14_400
    max_tasks_per_caller: int = 64
    pool_size: int = 2
    log_level: LogLevel = "info"
    log_format: LogFormat = "text"
    python: str = ""  # empty: the server's own interpreter, filled in when the environment is opened
    work_dir: str = ""  # empty: the temp directory, likewise
    sandbox: SandboxMode = "auto"
    sandbox_network: SandboxNetwork = "isolated"
    sandbox_tmp_mb: int = 64
    sandbox_read_paths: tuple[str, ...] = ()  # resolved when the environment is opened
    sandbox_uids: str = "60000-60999"  # FIRST-LAST: a root server's runs' host uids (`run_uid_range`)
    packages: str = ""
    packages_site: str = ""
    package_distributions: tuple[Distribution, ...] = ()  # what runs may import besides the stdlib
    # numpy, pandas, ...: the top-level modules of what the environment's lock asked for (what a user imports).
    package_modules: tuple[str, ...] = ()
    wheelhouse: str = ""
    wheelhouse_cache: str = ""  # empty: in the work directory, filled in when the environment is opened
    max_wheelhouse_cache_bytes: int = 1024 * MIB
    # The wheelhouse's distributions beyond the package environment's, for runs to import.
    wheelhouse_distributions: tuple[Distribution, ...] = ()
    wheelhouse_modules: tuple[str, ...] = ()  # sklearn, sympy, ...: likewise, of those
    preload: tuple[str, ...] = ()
    # RUNNER_PRELOAD is not set: opening the environment preloads those of DEFAULT_PRELOAD it has.
    default_preload: bool = False
    max_images: int = 4
    max_image_bytes: int = 256 * KIB
    max_returned_bytes: int = 512 * KIB
    max_files_bytes: int = 48 * KIB
    max_input_mb: int = 8
    transport: Transport = "stdio"
    http: HttpConfig = HttpConfig()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """Read every RUNNER_* variable's text; raise `ConfigError` naming the first bad one, a removed one,
        or one that is no setting at all (a misspelling)."""
        env = os.environ if environ is None else environ
        refuse_removed(env)
        for name, why in unknown_variables(SETTINGS, env):
            if name not in REMOVED:
                raise ConfigError(name, why)
        config = cls(**_read(env, http=False), default_preload="RUNNER_PRELOAD" not in env)
        _check(config, env)
        if config.transport != "http":
            return config  # a stdio server must not fail on settings it never uses
        return dataclasses.replace(config, http=_http(env, config.max_message_bytes))

    @property
    def sessions_refused(self) -> str:
        """Why this server keeps no sessions, or "" where it does."""
        if not self.max_sessions:
            return "sessions are off on this server (RUNNER_MAX_SESSIONS=0): run without `session`"
        if self.transport == "http" and self.http.workers > 1:
            return (
                f"no sessions with RUNNER_HTTP_WORKERS={self.http.workers}: each worker holds its own, and the kernel, "
                "not the Mcp-Param-Session header, picks the worker of a connection; run one worker per replica "
                "behind a proxy that routes on that header (docs/http.md#sessions), or run without `session`"
            )
        return ""

    @property
    def tasks_refused(self) -> str:
        """Why this server offers no tasks extension, or "" where it does."""
        if not self.max_tasks_per_caller:
            return "tasks are off on this server (RUNNER_MAX_TASKS_PER_CALLER=0)"
        if self.transport == "http" and self.http.workers > 1:
            return (
                f"no tasks with RUNNER_HTTP_WORKERS={self.http.workers}: each worker holds its own, and the kernel, "
                "not the Mcp-Name header, picks the worker of a connection"
            )
        return ""

    @property
    def provided_packages(self) -> str:
        """Where the wheelhouse's installed packages are (one directory each), which runs see read-only:
        the cache's `packages` directory; its locks and half-done installs beside it, which they do not."""
        return os.path.join(self.wheelhouse_cache, PROVIDED_DIRECTORY) if self.wheelhouse_cache else ""

    @property
    def keeps_output(self) -> bool:
        """Whether a stream shown cut, or a file over the returned budgets, is kept whole for
        resources/read: not with several workers, whose kernel-picked connections would find the link
        on another worker most of the time."""
        per_worker = self.transport == "http" and self.http.workers > 1
        budgets = self.max_kept_output_bytes and self.max_kept_caller_bytes and self.max_kept_total_bytes
        return bool(budgets) and not per_worker

    @property
    def run_uid_range(self) -> range:
        """The host uids RUNNER_SANDBOX_UIDS gives a root server's sandboxed runs."""
        first, last = (int(part) for part in self.sandbox_uids.split("-"))
        return range(first, last + 1)

    @property
    def uid_sources(self) -> int:
        """The sources of interpreters that lend run uids each on their own: one, and a preloading
        zygote beside it where there is preload (bubblewrap has no zygote; `auto` may end as bubblewrap,
        for which this counts one more than it needs)."""
        return 2 if self.preload and self.sandbox != "bwrap" else 1

    @property
    def uids_per_pool(self) -> int:
        """The run uids a root server's sandboxed pool lends at most at once, its block of RUNNER_SANDBOX_UIDS:
        each source's ready interpreters and runs in flight, twice over, since a run's uid is lent again
        only once its processes are gone; and each source's share of the open sessions, whose anchors
        hold theirs for their whole life."""
        return self.uid_sources * (2 * (self.pool_size + self.max_concurrent) + self.max_sessions)

    @property
    def memory_bytes(self) -> int:
        """RLIMIT_AS for one run."""
        return self.max_memory_mb * MIB

    @property
    def max_message_bytes(self) -> int:
        """Largest JSON-RPC line accepted: the largest legal call, with room for JSON escaping (and
        for base64, which files may come in)."""
        return 6 * (self.max_code_bytes + self.max_stdin_bytes + self.max_input_bytes) + 64 * KIB

    @property
    def max_input_bytes(self) -> int:
        """What the files of one call may hold in all, decoded."""
        return self.max_input_mb * MIB

    @property
    def file_size_bytes(self) -> int:
        """RLIMIT_FSIZE for one run."""
        return self.max_file_size_mb * MIB


def _declared(name: str) -> Setting:  # the declaration of the variable `name`
    return next(declared for declared in SETTINGS if declared.name == name)


def _read(env: Mapping[str, str], *, http: bool) -> dict[str, Any]:
    """The fields of the variables set (not blank), HttpConfig's or Config's; the rest keep their defaults."""
    return {
        declared.attribute: declared.parse(raw)
        for declared in SETTINGS
        if declared.http == http and (raw := env.get(declared.name, "")).strip()
    }


MAX_RUN_UID = 4_294_967_294  # (uid_t)-1 means "unchanged" to setresuid(2)


def _check(config: Config, env: Mapping[str, str]) -> None:
    """The rules between Config's own variables."""
    if config.default_timeout > config.max_timeout:
        name = "RUNNER_DEFAULT_TIMEOUT"
        got = repr(env[name]) if env.get(name, "").strip() else f"its default {config.default_timeout:g}"
        raise ConfigError(name, f"expected {_declared(name).expectation(config.max_timeout)}, got {got}")
    uids = config.run_uid_range
    if not uids or uids[-1] > MAX_RUN_UID:
        raise ConfigError(
            "RUNNER_SANDBOX_UIDS", f"expected {_declared('RUNNER_SANDBOX_UIDS').expected}, got {config.sandbox_uids!r}"
        )
    if config.preload and not config.packages:
        raise ConfigError("RUNNER_PRELOAD", "needs RUNNER_PACKAGES: the modules to preload come from there")


def _http(env: Mapping[str, str], max_message_bytes: int) -> HttpConfig:
    """The HTTP variables, read only for RUNNER_TRANSPORT=http, and the rules between them."""
    http = HttpConfig(**_read(env, http=True), max_body_bytes=max_message_bytes)
    if http.path in OPERATIONS_PATHS:
        raise ConfigError(
            "RUNNER_HTTP_PATH",
            f"expected a path such as /mcp, not one of {', '.join(OPERATIONS_PATHS)}; got {http.path!r}",
        )
    if not http.loopback:
        if not http.allowed_hosts:
            raise ConfigError(
                "RUNNER_HTTP_ALLOWED_HOSTS",
                f"required when RUNNER_HTTP_HOST ({http.host}) is not a loopback address: the Host values clients "
                "use (for example runner.example.com,runner:8000); any other Host is refused with 421",
            )
        return http
    return dataclasses.replace(
        http,
        allowed_hosts=http.allowed_hosts or LOOPBACK_HOSTS,
        allowed_origins=http.allowed_origins or LOOPBACK_ORIGINS,
    )
