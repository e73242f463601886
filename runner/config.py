"""The server's configuration: one frozen object built once from the environment at start-up.

Every RUNNER_* variable is declared once, in `SETTINGS`: its field, type, unit, range and meaning
(its default is its field's). Reading it, the error naming it and the table of docs/configuration.md
(`python -m runner.config` prints it) come from that declaration; the rules between variables are
checked after. `Config.from_env` reads text only: the paths it names are looked at, and what follows
from them filled in, where the environment is opened (`runner.environment.open_environment`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from runner.errors import ConfigError
from runner.removed import refuse_removed
from runner.settings import KIB as KIB
from runner.settings import MIB as MIB
from runner.settings import Setting

LogFormat = Literal["text", "json"]
SandboxMode = Literal["auto", "namespaces", "bwrap", "none", "none-posix-spawn"]
SandboxNetwork = Literal["isolated", "shared"]
Transport = Literal["stdio", "http"]
LogLevel = Literal["debug", "info", "warning", "error"]

# Paths the HTTP transport serves besides the MCP endpoint; RUNNER_HTTP_PATH may not take one.
OPERATIONS_PATHS = ("/healthz", "/readyz", "/metrics")
# What a server on a loopback address accepts unless told otherwise.
LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")
# Without RUNNER_PRELOAD: those of these installed in RUNNER_PACKAGES.
DEFAULT_PRELOAD = ("numpy", "pandas", "matplotlib.pyplot")


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
    `runner.environment.open_environment`; pass it down, never mutate it."""

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
    max_sessions: int = 16
    max_sessions_per_caller: int = 4
    session_idle_seconds: int = 900
    session_max_seconds: int = 14_400
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
    package_versions: tuple[str, ...] = ()  # "numpy 2.4.6", ... what runs may import besides the stdlib
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
        """Read every RUNNER_* variable's text; raise `ConfigError` naming the first bad one, or a removed one."""
        env = os.environ if environ is None else environ
        refuse_removed(env)
        config = cls(**_read(env, http=False), default_preload="RUNNER_PRELOAD" not in env)
        _check(config, env)
        if config.transport != "http":
            return config  # a stdio server must not fail on settings it never uses
        return dataclasses.replace(config, http=_http(env, config.max_message_bytes))

    @property
    def run_uid_range(self) -> range:
        """The host uids RUNNER_SANDBOX_UIDS gives a root server's sandboxed runs."""
        first, last = (int(part) for part in self.sandbox_uids.split("-"))
        return range(first, last + 1)

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


def _choices(name: str, field: str, kind: object, meaning: str) -> Setting:
    return Setting(name, field, "choice", meaning, choices=get_args(kind))


SETTINGS = (
    Setting(
        "RUNNER_MAX_CPU_SECONDS",
        "max_cpu_seconds",
        "int",
        "CPU seconds per run (RLIMIT_CPU soft; hard is one more).",
        low=1,
        high=86_400,
    ),
    Setting(
        "RUNNER_MAX_MEMORY_MB",
        "max_memory_mb",
        "int",
        "Memory per run in MiB. Where the server can make cgroups (sandboxed modes, root or a delegated v2 "
        "subtree), the whole run's: every process of it together, its tmpfs (`/tmp`, `/dev/shm`, `/run`) and "
        "shared memory included, no swap, over it `memory_limit` (see [whole-run limits](security.md#whole-run-"
        "limits-cgroups)). Also each process's address space (RLIMIT_AS); in the preloading zygote, both on top "
        "of what it preloaded (see [the preloading zygote](spawn-modes.md#the-preloading-zygote)).",
        low=32,
        high=1_048_576,
    ),
    Setting(
        "RUNNER_MAX_PROCESSES",
        "max_processes",
        "int",
        "Processes and threads per run. A root server's sandboxed run has a host uid of its own, whose "
        "RLIMIT_NPROC is this; otherwise it sizes the server's uid's RLIMIT_NPROC "
        "(see [RLIMIT_NPROC](security.md#rlimit_nproc-and-running-as-root)). Where the server can make "
        "cgroups, also each run's `pids.max`.",
        low=1,
        high=4096,
    ),
    Setting(
        "RUNNER_MAX_FILE_SIZE_MB",
        "max_file_size_mb",
        "int",
        "Largest file a run may write, MiB (RLIMIT_FSIZE).",
        high=1_048_576,
    ),
    Setting(
        "RUNNER_MAX_OUTPUT_CHARS",
        "max_output_chars",
        "int",
        "Characters shown per stream (head and tail halves).",
        low=100,
        high=10_000_000,
    ),
    Setting(
        "RUNNER_MAX_CONCURRENT",
        "max_concurrent",
        "int",
        "Runs at the same time; the rest wait in FIFO order.",
        low=1,
        high=256,
    ),
    Setting(
        "RUNNER_DEFAULT_TIMEOUT",
        "default_timeout",
        "number",
        "Wall-clock seconds when a call gives no `timeout`.",
        unit="seconds",
        low=0.1,
        high=86_400,
        shown_accepted="number 0.1-`RUNNER_MAX_TIMEOUT`",
    ),
    Setting(
        "RUNNER_MAX_TIMEOUT",
        "max_timeout",
        "number",
        "Largest `timeout` a call may ask for.",
        unit="seconds",
        low=0.1,
        high=86_400,
    ),
    Setting(
        "RUNNER_MAX_CODE_MB",
        "max_code_bytes",
        "number",
        "Largest `code`, MiB of UTF-8.",
        unit="MiB",
        low=KIB,
        high=64 * MIB,
    ),
    Setting(
        "RUNNER_MAX_STDIN_MB",
        "max_stdin_bytes",
        "number",
        "Largest `stdin`, MiB of UTF-8.",
        unit="MiB",
        high=64 * MIB,
    ),
    Setting(
        "RUNNER_MAX_OUTPUT_MB",
        "max_output_bytes",
        "number",
        "stdout + stderr MiB after which a run is killed (`output_limit`).",
        unit="MiB",
        low=4 * KIB,
        high=1024 * MIB,
    ),
    Setting(
        "RUNNER_MAX_QUEUE",
        "max_queue",
        "int",
        "Calls that may wait for a slot; one more gets `busy`. `0`: no bound.",
        high=100_000,
    ),
    Setting(
        "RUNNER_MAX_SESSIONS",
        "max_sessions",
        "int",
        'Sessions (`session: "new"`) open at once, over every caller; one more is refused. `0`: no sessions.',
        high=10_000,
    ),
    Setting(
        "RUNNER_MAX_SESSIONS_PER_CALLER",
        "max_sessions_per_caller",
        "int",
        "Sessions one caller (a token's name; a stdio client) may hold open at once.",
        low=1,
    ),
    Setting(
        "RUNNER_SESSION_IDLE_SECONDS",
        "session_idle_seconds",
        "int",
        "A session no call has used for this long ends, and its handle is unknown from then on.",
        low=1,
    ),
    Setting(
        "RUNNER_SESSION_MAX_SECONDS",
        "session_max_seconds",
        "int",
        "A session ends this long after it started, however busy it is.",
        low=1,
    ),
    Setting(
        "RUNNER_POOL_SIZE",
        "pool_size",
        "int",
        "Interpreters kept started and waiting for code, per zygote (so twice as many with a preloading zygote); "
        "`0`: start one per call.",
        high=64,
    ),
    _choices("RUNNER_LOG_LEVEL", "log_level", LogLevel, "Level of the server's log."),
    _choices(
        "RUNNER_LOG_FORMAT",
        "log_format",
        LogFormat,
        "One text line or one JSON object per event (see [Logging](protocol.md#logging)).",
    ),
    Setting(
        "RUNNER_PYTHON",
        "python",
        "path",
        "Interpreter that runs the code (tested with CPython 3.11).",
        expected="an absolute path to a Python 3 interpreter",
        shown_default="the server's interpreter, symlinks resolved",
        shown_accepted="absolute path of an executable file",
    ),
    Setting(
        "RUNNER_WORK_DIR",
        "work_dir",
        "path",
        "Where the server makes its `python-runner-*` directory with one `run-*` directory per run.",
        expected="an absolute path to a writable directory",
        shown_default="the temp directory (`TMPDIR`, else `/tmp`)",
        shown_accepted="absolute path of a writable directory",
    ),
    _choices(
        "RUNNER_SANDBOX",
        "sandbox",
        SandboxMode,
        "How runs start and what isolates them, decided once at start: forked by a zygote into namespaces of "
        "their own (`namespaces`), spawned one interpreter each inside bubblewrap (`bwrap`), forked with rlimits "
        "only (`none`), or spawned with rlimits only (`none-posix-spawn`). `auto`: the first of `namespaces`, "
        "`bwrap` and `none` whose start-up probe works, the log saying why; `namespaces` or `bwrap`: refuse to "
        "start without it. See [the table](spawn-modes.md).",
    ),
    _choices(
        "RUNNER_SANDBOX_NETWORK",
        "sandbox_network",
        SandboxNetwork,
        "`isolated`: each sandboxed run gets an empty network namespace of its own, made for it and never lent to "
        "another (no network at all, no abstract unix socket shared with another run, and no counter an earlier "
        "run moved); `shared`: keep the server's network.",
    ),
    Setting(
        "RUNNER_SANDBOX_TMP_MB",
        "sandbox_tmp_mb",
        "int",
        "Size of each sandboxed run's private tmpfs at `/tmp` (its working directory) and at `/dev/shm` "
        "(`/run` is 1 MiB).",
        low=1,
        high=1_048_576,
    ),
    Setting(
        "RUNNER_SANDBOX_READ_PATHS",
        "sandbox_read_paths",
        "list",
        "Host paths sandboxed runs may read besides what they need (a dataset directory, say), bound read-only "
        "at the same place; nothing else of the host is in their view. Each must exist, and be neither `/` nor "
        "the server's own (its work directory, its tokens file).",
        pattern=r"/.*",
        expected="comma-separated absolute paths",
        shown_default="empty: none",
        shown_accepted="comma-separated absolute paths of files or directories",
    ),
    Setting(
        "RUNNER_SANDBOX_UIDS",
        "sandbox_uids",
        "text",
        "The host uids a root server's sandboxed runs are given, one per run at a time (none is 0, none a user "
        "of the host's): RLIMIT_NPROC then holds for each run, and no run is root on the host. A non-root server's "
        "runs keep its uid. Each server takes a block of the range of its own (see [security](security.md)).",
        pattern=r"[1-9][0-9]{0,9}-[1-9][0-9]{0,9}",
        expected="FIRST-LAST, host uids from 1 to 4294967294, FIRST <= LAST",
        shown_accepted="`FIRST-LAST`, uids from 1 to 4294967294",
    ),
    Setting(
        "RUNNER_PACKAGES",
        "packages",
        "path",
        "The package environment runs may import from (see [below](#the-package-environment)). `make run` sets "
        "it to `.sandbox-env` unless it is set, even empty.",
        expected="an absolute path to a package environment",
        shown_default="empty: the standard library only",
        shown_accepted="absolute path of a directory holding `site-packages/`, or a virtual environment holding "
        "exactly one `lib/python3*/site-packages`",
    ),
    Setting(
        "RUNNER_PRELOAD",
        "preload",
        "list",
        "Modules a second zygote imports before its first fork. Only where runs are forked (`RUNNER_SANDBOX` "
        "`none` or `namespaces`); ignored where they are spawned (`none-posix-spawn`, `bwrap`). "
        "See [the preloading zygote](spawn-modes.md#the-preloading-zygote).",
        pattern=r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*",
        expected="comma-separated module names",
        shown_default=f"those of {', '.join(f'`{name}`' for name in DEFAULT_PRELOAD)} installed in "
        "`RUNNER_PACKAGES`; none without it",
        shown_accepted="comma-separated module names; empty: none",
    ),
    Setting(
        "RUNNER_MAX_IMAGES",
        "max_images",
        "int",
        "Images one call returns: figures and image files together; `0`: none.",
        high=64,
    ),
    Setting(
        "RUNNER_MAX_IMAGE_MB",
        "max_image_bytes",
        "number",
        "Largest image returned, MiB; a figure over it is drawn again at a lower dpi, an image file over it is "
        "not returned.",
        unit="MiB",
        low=KIB,
        high=64 * MIB,
    ),
    Setting(
        "RUNNER_MAX_RETURNED_MB",
        "max_returned_bytes",
        "number",
        "Images and files one call returns, MiB together; `0`: no images and no files (the result still comes back).",
        unit="MiB",
        high=1024 * MIB,
    ),
    Setting(
        "RUNNER_MAX_FILES_MB",
        "max_files_bytes",
        "number",
        "Files that are not images one call returns, MiB together (within `RUNNER_MAX_RETURNED_MB`).",
        unit="MiB",
        high=1024 * MIB,
    ),
    Setting(
        "RUNNER_MAX_INPUT_MB",
        "max_input_mb",
        "int",
        "The `files` of one call, MiB together after decoding; each file also at most `RUNNER_MAX_FILE_SIZE_MB`.",
        high=1024,
    ),
    _choices(
        "RUNNER_TRANSPORT",
        "transport",
        Transport,
        "How clients reach the server; `--transport` on the command line wins. The `RUNNER_HTTP_*` variables, "
        "`RUNNER_AUTH_TOKENS_FILE` and `RUNNER_SHUTDOWN_GRACE` are read only for `http` (see [HTTP](http.md)).",
    ),
    Setting(
        "RUNNER_HTTP_HOST",
        "http.host",
        "text",
        "Where the HTTP server listens. Not a loopback address: needs `RUNNER_HTTP_ALLOWED_HOSTS` and tokens "
        "(or `--insecure-no-auth`).",
        shown_accepted="an address to bind (IPv4, IPv6, a name)",
    ),
    Setting(
        "RUNNER_HTTP_PORT",
        "http.port",
        "int",
        "Its port; `0`: any free port (the log line `serving on HTTP url=...` says which).",
        high=65_535,
    ),
    Setting(
        "RUNNER_HTTP_PATH",
        "http.path",
        "text",
        "The MCP endpoint.",
        pattern=r"(/[A-Za-z0-9._~-]+)+",
        expected="a path such as /mcp",
        shown_accepted="a path of one or more `/segments`, not "
        + ", ".join(f"`{path}`" for path in OPERATIONS_PATHS[:-1])
        + f" or `{OPERATIONS_PATHS[-1]}`",
    ),
    Setting(
        "RUNNER_HTTP_ALLOWED_HOSTS",
        "http.allowed_hosts",
        "list",
        "Host headers the MCP endpoint accepts; any other gets 421 (DNS-rebinding protection).",
        pattern=r"[^/\s?#@]+",
        expected="comma-separated host[:port] values",
        shown_default=f"`{','.join(LOOPBACK_HOSTS)}` on a loopback address; required otherwise",
        shown_accepted="comma-separated `host` or `host:port` (`host:*`: any port)",
    ),
    Setting(
        "RUNNER_HTTP_ALLOWED_ORIGINS",
        "http.allowed_origins",
        "list",
        "Origin headers accepted; any other gets 403. A request without Origin (not from a browser) is not "
        "refused for it.",
        pattern=r"https?://[^/\s?#@]+",
        expected="comma-separated scheme://host[:port] origins",
        shown_default=f"`{','.join(LOOPBACK_ORIGINS)}` on a loopback address; none otherwise",
        shown_accepted="comma-separated `scheme://host[:port]` (`:*`: any port)",
    ),
    Setting(
        "RUNNER_AUTH_TOKENS_FILE",
        "http.tokens_file",
        "path",
        "Bearer tokens, one per line, `name:token` or `token` (named `token-N` by its line); `#` comments and "
        "blank lines skipped; each at least 16 visible ASCII characters. Read once at start; a bad line stops "
        "the server naming the line, never the token.",
        expected="an absolute path to a file",
        shown_default="none: no authentication",
        shown_accepted="absolute path of a readable file",
    ),
    Setting(
        "RUNNER_HTTP_MAX_CONCURRENT_PER_TOKEN",
        "http.max_concurrent_per_token",
        "int",
        "Calls one token may have running or queued in the pool at once; its further calls wait in a line of "
        "their own (at most `RUNNER_MAX_QUEUE`, then `busy`).",
        high=256,
        shown_default="`0`: a fair share, `RUNNER_MAX_CONCURRENT` divided among the tokens (rounded up; no limit "
        "with one token or none)",
    ),
    Setting(
        "RUNNER_HTTP_WORKERS",
        "http.workers",
        "int",
        "Server processes accepting on the one port, each with its own pool and zygotes (`RUNNER_MAX_CONCURRENT` "
        "and `RUNNER_POOL_SIZE` are per worker). See [HTTP](http.md#workers).",
        low=1,
        high=64,
    ),
    Setting(
        "RUNNER_SHUTDOWN_GRACE",
        "http.shutdown_grace",
        "int",
        "Seconds calls in flight may finish after SIGTERM or SIGINT; then they are cancelled and their runs killed.",
        high=3600,
    ),
)


def markdown_table() -> str:
    """docs/configuration.md's table of every variable, from `SETTINGS` and the fields' defaults."""
    defaults = Config()
    rows = (each.row(getattr(defaults.http if each.http else defaults, each.attribute)) for each in SETTINGS)
    return "\n".join(("| Variable | Default | Accepted | Meaning |", "| --- | --- | --- | --- |", *rows)) + "\n"


def _declared(name: str) -> Setting:
    """The declaration of the variable `name`."""
    return next(declared for declared in SETTINGS if declared.name == name)


def _read(env: Mapping[str, str], *, http: bool) -> dict[str, Any]:
    """The fields of the variables that are set (not blank), of HttpConfig's or of Config's own; the
    other fields keep their defaults."""
    return {
        declared.attribute: declared.parse(raw)
        for declared in SETTINGS
        if declared.http == http and (raw := env.get(declared.name, "")).strip()
    }


# (uid_t)-1 means "unchanged" to setresuid(2).
MAX_RUN_UID = 4_294_967_294


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


if __name__ == "__main__":
    sys.stdout.write(markdown_table())
