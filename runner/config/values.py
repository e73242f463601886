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

from runner.config.egress import PROXY_PORT, EgressAllow
from runner.config.http_variables import LOOPBACK_HOSTS, LOOPBACK_ORIGINS
from runner.config.http_variables import OPERATIONS_PATHS as OPERATIONS_PATHS
from runner.config.http_variables import Transport as Transport
from runner.config.locks import Distribution
from runner.config.removed import REMOVED, refuse_removed
from runner.config.sections import PROVIDED_DIRECTORY as PROVIDED_DIRECTORY
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
from runner.config.settings import KIB as KIB
from runner.config.settings import MIB as MIB
from runner.config.settings import Setting, unknown_variables
from runner.config.variables import DEFAULT_PRELOAD as DEFAULT_PRELOAD
from runner.config.variables import SETTINGS as SETTINGS
from runner.config.variables import AppView as AppView
from runner.config.variables import SandboxMode as SandboxMode
from runner.config.variables import SandboxNetwork as SandboxNetwork
from runner.config.wheelhouse import Wheelhouse
from runner.errors import ConfigError
from runner.logs import LogFormat, LogLevel


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
    # How long the server waits on a client: for a request's headers, each part of its body, an answer
    # it does not take (runner.transports.connections).
    client_seconds: int = 30
    max_connections: int = 512  # held open by one server process; at the bound the longest idle is closed
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
    """Every tunable of the server, one field per setting. Build it with `Config.from_env`, open it with
    `runner.config.disk.open_environment`; pass it down, never mutate it. A consumer takes its section
    (`config.limits`, `config.kept`, ...: `runner.config.sections`), not the whole."""

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
    # A read's answer of it is 9 MiB at most: a TypeScript SDK client over stdio takes 10 (`serve_stdio`).
    max_kept_output_bytes: int = 6 * MIB
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
    wheelhouse_cache: str = ""  # empty: in /var/tmp, filled in when the environment is opened (disk.py)
    max_wheelhouse_cache_bytes: int = 1024 * MIB
    # The wheelhouse's distributions beyond the package environment's, for runs to import.
    # The wheelhouse as read when the environment is opened (`runner.config.wheelhouse`), for the
    # execution side to map imports to what it installs; None without one.
    wheelhouse_contents: Wheelhouse | None = None
    wheelhouse_distributions: tuple[Distribution, ...] = ()
    wheelhouse_modules: tuple[str, ...] = ()  # sklearn, sympy, ...: likewise, of those
    preload: tuple[str, ...] = ()
    # RUNNER_PRELOAD is not set: opening the environment preloads those of DEFAULT_PRELOAD it has.
    default_preload: bool = False
    max_images: int = 4
    max_image_bytes: int = 256 * KIB
    max_returned_bytes: int = 512 * KIB
    max_files_bytes: int = 48 * KIB
    app_view: AppView = "on"
    max_table_rows: int = 1000
    max_input_mb: int = 8
    tools_config: str = ""  # the downstream servers' file (`runner.config.tools`); empty: none
    tools_max_calls: int = 100
    tools_max_mb: int = 16
    tools_max_concurrent: int = 4
    tools_spin_us: int = 150
    egress_allow: tuple[str, ...] = ()  # RUNNER_EGRESS_ALLOW's entries, parsed by `egress` (`runner.config.egress`)
    max_egress_mb: int = 100
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

    # The sections (`runner.config.sections`): each consumer takes the one it reads. Each is made when
    # asked for, from the fields above: they stay the one record of every setting.

    @property
    def limits(self) -> LimitsConfig:
        return LimitsConfig(**self._owned(LimitsConfig))

    @property
    def returns(self) -> ReturnsConfig:
        return ReturnsConfig(**self._owned(ReturnsConfig))

    @property
    def kept(self) -> KeptConfig:
        return KeptConfig(**self._owned(KeptConfig), workers=self.workers, replica=self.http.replica)

    @property
    def sessions(self) -> SessionsConfig:
        return SessionsConfig(
            **self._owned(SessionsConfig),
            workers=self.workers,
            replica=self.http.replica,
            anonymous_shared=self.transport == "http",
        )

    @property
    def tasks(self) -> TasksConfig:
        return TasksConfig(
            **self._owned(TasksConfig),
            kept_output_seconds=self.kept_output_seconds,
            workers=self.workers,
            replica=self.http.replica,
        )

    @property
    def pool(self) -> PoolConfig:
        return PoolConfig(**self._owned(PoolConfig))

    @property
    def packages_section(self) -> PackagesConfig:
        """The packages section (`packages` is RUNNER_PACKAGES, the package environment's path)."""
        return PackagesConfig(**self._owned(PackagesConfig), python=self.python)

    @property
    def isolation(self) -> IsolationConfig:
        return IsolationConfig(
            **self._owned(IsolationConfig),
            python=self.python,
            packages=self.packages,
            provided_packages=self.provided_packages,
            preload=self.preload,
            pid_namespaces=self.pool_size + self.max_concurrent + self.max_sessions,
            hidden_files=tuple(
                filter(None, (self.http.tokens_file if self.transport == "http" else "", self.tools_config))
            ),
            egress_port=PROXY_PORT if self.egress_allow else 0,
        )

    @property
    def tools(self) -> ToolsConfig:
        return ToolsConfig(**self._owned(ToolsConfig))

    @property
    def egress(self) -> EgressConfig:
        return EgressConfig(**self._owned(EgressConfig))

    @property
    def logging(self) -> LoggingConfig:
        return LoggingConfig(**self._owned(LoggingConfig))

    @property
    def serving(self) -> ServingConfig:
        return ServingConfig(**self._owned(ServingConfig), workers=self.workers)

    def _owned(self, section: type[Any]) -> dict[str, Any]:
        """The values of the fields `section` owns, by name."""
        return {name: getattr(self, name) for name in owned_fields(section)}

    @property
    def workers(self) -> int:
        """The server's processes, each with its own pool, sessions, tasks and kept outputs."""
        return self.http.workers if self.transport == "http" else 1

    # Derived values read where the whole configuration is still taken; each is its section's.

    @property
    def provided_packages(self) -> str:
        """Where the wheelhouse's installed packages are (`PackagesConfig.provided_packages`)."""
        return self.packages_section.provided_packages

    @property
    def run_uid_range(self) -> range:
        """The host uids RUNNER_SANDBOX_UIDS gives a root server's sandboxed runs (`IsolationConfig`)."""
        return self.isolation.run_uid_range

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
        """RLIMIT_AS for one run (`LimitsConfig.memory_bytes`)."""
        return self.limits.memory_bytes

    @property
    def max_message_bytes(self) -> int:
        """Largest JSON-RPC line accepted (`LimitsConfig.max_message_bytes`)."""
        return self.limits.max_message_bytes

    @property
    def file_size_bytes(self) -> int:
        """RLIMIT_FSIZE for one run (`LimitsConfig.file_size_bytes`)."""
        return self.limits.file_size_bytes


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
        given = bool(env.get(name, "").strip())
        got = repr(env[name]) if given else f"its default {config.default_timeout:g}"
        # A first hour set RUNNER_MAX_TIMEOUT alone and was told of a variable it had not set: what to do.
        more = "" if given else " (RUNNER_MAX_TIMEOUT is lower: set RUNNER_DEFAULT_TIMEOUT too)"
        raise ConfigError(name, f"expected {_declared(name).expectation(config.max_timeout)}, got {got}{more}")
    uids = config.run_uid_range
    if not uids or uids[-1] > MAX_RUN_UID:
        raise ConfigError(
            "RUNNER_SANDBOX_UIDS", f"expected {_declared('RUNNER_SANDBOX_UIDS').expected}, got {config.sandbox_uids!r}"
        )
    if config.egress_allow:
        EgressAllow.parse(config.egress_allow)  # each entry, the first bad one named
        if config.sandbox in ("none", "none-posix-spawn"):
            raise ConfigError(
                "RUNNER_EGRESS_ALLOW",
                f"cannot be enforced with RUNNER_SANDBOX={config.sandbox}: its runs have the server's own network, "
                "all of it. Use a sandbox (namespaces or bwrap), or leave RUNNER_EGRESS_ALLOW empty",
            )
        if config.sandbox_network == "shared":
            raise ConfigError(
                "RUNNER_EGRESS_ALLOW",
                "cannot be enforced with RUNNER_SANDBOX_NETWORK=shared: runs have the server's own network, all of "
                "it. Use RUNNER_SANDBOX_NETWORK=isolated, or leave RUNNER_EGRESS_ALLOW empty",
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
