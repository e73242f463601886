"""The configuration in sections: `Config` hands out each part of the deployment as a frozen object
of its own (`config.limits`, `config.returns`, ...), and each consumer takes the section it reads,
not the whole. What a consumer depends on is then visible in its signature: a store of kept outputs
that takes `KeptConfig` cannot have come to read the sandbox's settings, and a test of it builds
that section alone.

`Config` stays the one record of every RUNNER_* setting (what `Config.from_env` reads and the tests
build); a section is a view of it, made when asked for. Each setting belongs to exactly one section
(its owner); a section may also carry, under `CARRIED`, what its consumer needs from another (the
sessions' `workers`, say), so that the consumer still takes one object. `owned_fields` says which
are which, and tests/unit/config/test_sections.py holds that every setting has one owner.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, ClassVar

from runner.config.egress import EgressAllow
from runner.config.http_variables import Transport
from runner.config.locks import Distribution
from runner.config.settings import KIB, MIB
from runner.config.variables import AppView, SandboxMode, SandboxNetwork
from runner.config.wheelhouse import Wheelhouse
from runner.logs import LogFormat, LogLevel

# In RUNNER_WHEELHOUSE_CACHE: the installed packages, the one part of it runs see (`provided_packages`).
PROVIDED_DIRECTORY = "packages"


def owned_fields(section: type[Any]) -> tuple[str, ...]:
    """The `Config` fields `section` owns: its own fields but those it carries from another section."""
    carried: tuple[str, ...] = getattr(section, "CARRIED", ())
    return tuple(field.name for field in dataclasses.fields(section) if field.name not in carried)


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """What one call may be and do: its inputs' sizes, its time, and the limits its run is held to."""

    max_cpu_seconds: int
    max_memory_mb: int
    max_processes: int
    max_file_size_mb: int
    max_output_bytes: int  # what a run may write before it is stopped (output_limit)
    default_timeout: float
    max_timeout: float
    max_code_bytes: int
    max_stdin_bytes: int
    max_input_mb: int

    @property
    def memory_bytes(self) -> int:
        """RLIMIT_AS for one run."""
        return self.max_memory_mb * MIB

    @property
    def file_size_bytes(self) -> int:
        """RLIMIT_FSIZE for one run."""
        return self.max_file_size_mb * MIB

    @property
    def max_input_bytes(self) -> int:
        """What the files of one call may hold in all, decoded."""
        return self.max_input_mb * MIB

    @property
    def max_message_bytes(self) -> int:
        """Largest JSON-RPC line accepted: the largest legal call, with room for JSON escaping (and
        for base64, which files may come in)."""
        return 6 * (self.max_code_bytes + self.max_stdin_bytes + self.max_input_bytes) + 64 * KIB


@dataclass(frozen=True, slots=True)
class ReturnsConfig:
    """What comes back in the answer: the streams as shown, images, files, the last value, and the app
    view that shows them (with the last value's table)."""

    max_output_chars: int
    max_images: int
    max_image_bytes: int
    max_returned_bytes: int
    max_files_bytes: int
    app_view: AppView
    max_table_rows: int

    @property
    def table_rows(self) -> int:
        """Rows of a table for a client that shows the app view: none where the view is off, or where
        a call returns no bytes besides its output."""
        return self.max_table_rows if self.app_view == "on" and self.max_returned_bytes else 0


@dataclass(frozen=True, slots=True)
class KeptConfig:
    """What is kept whole for resources/read when the answer could not carry it, and for how long."""

    CARRIED: ClassVar[tuple[str, ...]] = ("workers", "replica")

    max_kept_output_bytes: int
    max_kept_caller_bytes: int
    max_kept_total_bytes: int
    kept_output_seconds: int
    workers: int  # the server's worker processes (`ServingConfig.workers`)
    replica: str  # leads the kept outputs' URIs, as it does session handles (HttpConfig.replica)

    @property
    def keeps_output(self) -> bool:
        """Whether a stream shown cut, or a file over the returned budgets, is kept whole for
        resources/read: not with several workers, whose kernel-picked connections would find the link
        on another worker most of the time."""
        budgets = self.max_kept_output_bytes and self.max_kept_caller_bytes and self.max_kept_total_bytes
        return bool(budgets) and self.workers == 1

    @property
    def per_call_bytes(self) -> int:
        """What one stream or file may be kept up to; 0 where nothing is kept."""
        return self.max_kept_output_bytes if self.keeps_output else 0


@dataclass(frozen=True, slots=True)
class SessionsConfig:
    """How many sessions may be open, for how long, and in how much memory."""

    CARRIED: ClassVar[tuple[str, ...]] = ("workers", "replica", "anonymous_shared")

    max_sessions: int
    max_sessions_per_caller: int
    sessions_memory_mb: int  # 0: sized from what the server can hold (`runner.config.memory`)
    sessions_budget_bytes: int  # filled in when the environment is opened (`runner.config.memory`)
    session_idle_seconds: int
    session_max_seconds: int
    workers: int  # the server's worker processes (`ServingConfig.workers`)
    replica: str  # named in the handles of this replica's sessions (HttpConfig.replica)
    # Whether the caller with no name may be many clients (HTTP: each without a token), whose handles
    # a refusal must not tell one another; over stdio it is the one client of the process.
    anonymous_shared: bool = False

    @property
    def refused(self) -> str:
        """Why this server keeps no sessions, or "" where it does."""
        if not self.max_sessions:
            return "sessions are off on this server (RUNNER_MAX_SESSIONS=0): run without `session`"
        if self.workers > 1:
            return (
                f"no sessions with RUNNER_HTTP_WORKERS={self.workers}: each worker holds its own, and the kernel, "
                "not the Mcp-Param-Session header, picks the worker of a connection; run one worker per replica "
                "behind a proxy that routes on that header (docs/http.md#sessions), or run without `session`"
            )
        return ""


@dataclass(frozen=True, slots=True)
class TasksConfig:
    """The tasks extension: how many tasks a caller may hold, and how long their results stay."""

    CARRIED: ClassVar[tuple[str, ...]] = ("kept_output_seconds", "workers", "replica")

    max_tasks_per_caller: int
    kept_output_seconds: int  # a finished task's result stays as long as a kept output (KeptConfig)
    workers: int  # the server's worker processes (`ServingConfig.workers`)
    replica: str  # named in the tasks' ids, as in session handles (HttpConfig.replica)

    @property
    def refused(self) -> str:
        """Why this server offers no tasks extension, or "" where it does."""
        if not self.max_tasks_per_caller:
            return "tasks are off on this server (RUNNER_MAX_TASKS_PER_CALLER=0)"
        if self.workers > 1:
            return (
                f"no tasks with RUNNER_HTTP_WORKERS={self.workers}: each worker holds its own, and the kernel, "
                "not the Mcp-Name header, picks the worker of a connection"
            )
        return ""


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """The pool of interpreters: how many wait ready, how many calls run and wait at once, which
    interpreter they are, and where the server keeps its working files."""

    pool_size: int
    max_concurrent: int
    max_queue: int
    python: str  # empty: the server's own interpreter, filled in when the environment is opened
    work_dir: str  # empty: the temp directory, likewise


@dataclass(frozen=True, slots=True)
class PackagesConfig:
    """What runs may import besides the standard library: the package environment (and what a
    zygote preloads of it) and the wheelhouse, with the cache its packages are installed into."""

    CARRIED: ClassVar[tuple[str, ...]] = ("python",)

    packages: str
    packages_site: str
    package_distributions: tuple[Distribution, ...]
    package_modules: tuple[str, ...]
    wheelhouse: str
    wheelhouse_cache: str
    max_wheelhouse_cache_bytes: int
    wheelhouse_contents: Wheelhouse | None
    wheelhouse_distributions: tuple[Distribution, ...]
    wheelhouse_modules: tuple[str, ...]
    preload: tuple[str, ...]
    default_preload: bool
    python: str  # what installs the wheelhouse's packages compiles with (`PoolConfig.python`)

    @property
    def provided_packages(self) -> str:
        """Where the wheelhouse's installed packages are (one directory each), which runs see read-only:
        the cache's `packages` directory; its locks and half-done installs beside it, which they do not."""
        return os.path.join(self.wheelhouse_cache, PROVIDED_DIRECTORY) if self.wheelhouse_cache else ""


@dataclass(frozen=True, slots=True)
class IsolationConfig:
    """What the isolation plan is decided from: the sandbox's own settings, and what of the host each
    run's view must hold or hide (the interpreter, the package environment, the wheelhouse's
    packages, the tokens file), carried from the sections that own them."""

    CARRIED: ClassVar[tuple[str, ...]] = (
        "python",
        "packages",
        "provided_packages",
        "preload",
        "pid_namespaces",
        "hidden_files",
        "egress_port",
    )

    sandbox: SandboxMode
    sandbox_network: SandboxNetwork
    sandbox_tmp_mb: int
    sandbox_read_paths: tuple[str, ...]  # resolved when the environment is opened
    sandbox_uids: str  # FIRST-LAST: a root server's runs' host uids (`run_uid_range`)
    python: str  # the runs' interpreter, whose prefix their view holds (`PoolConfig.python`)
    packages: str  # the package environment, in the view (`PackagesConfig.packages`)
    provided_packages: str  # the wheelhouse's installed packages, in the view (`PackagesConfig`)
    preload: tuple[str, ...]  # what a second zygote preloads (`PackagesConfig.preload`)
    # How many kept PID namespaces a zygote may have at once (`isolation.kept_pid_namespaces`): the
    # pool's ready interpreters, the runs in flight and the sessions' anchors.
    pid_namespaces: int
    # The server's files that runs must not see: the HTTP transport's tokens file, the tools file.
    hidden_files: tuple[str, ...]
    # Where each run's proxy listens on its own loopback (`runner.config.egress.PROXY_PORT`) when
    # RUNNER_EGRESS_ALLOW lists anything; 0: runs have no network at all.
    egress_port: int = 0

    @property
    def run_uid_range(self) -> range:
        """The host uids RUNNER_SANDBOX_UIDS gives a root server's sandboxed runs."""
        first, last = (int(part) for part in self.sandbox_uids.split("-"))
        return range(first, last + 1)


@dataclass(frozen=True, slots=True)
class ToolsConfig:
    """Code mode: the file of downstream servers runs may call through the broker, and what one run may
    pass through it."""

    tools_config: str  # resolved when the environment is opened; empty: none
    tools_max_calls: int
    tools_max_mb: int
    tools_max_concurrent: int
    tools_spin_us: int  # the event loop's poll before it sleeps while tool calls are in flight

    @property
    def max_bytes(self) -> int:
        """What one run's tool arguments and results may add up to."""
        return self.tools_max_mb * MIB


@dataclass(frozen=True, slots=True)
class EgressConfig:
    """Egress by allowlist: the hosts runs may reach through the server's proxy, and how much."""

    egress_allow: tuple[str, ...]  # RUNNER_EGRESS_ALLOW's entries as written (checked by `Config.from_env`)
    max_egress_mb: int

    @property
    def allow(self) -> EgressAllow:
        """The entries parsed: the proxy takes this once, at start."""
        return EgressAllow.parse(self.egress_allow)

    @property
    def max_bytes(self) -> int:
        """What one run may send and receive through the proxy, together."""
        return self.max_egress_mb * MIB


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    """How the server logs (`runner.logs.configure_logging`)."""

    log_level: LogLevel
    log_format: LogFormat


@dataclass(frozen=True, slots=True)
class ServingConfig:
    """How the server is reached: the transport (HTTP's own settings are `HttpConfig`), and the worker
    processes that share the work, which the sections holding per-process state (sessions, tasks,
    kept outputs) carry as `workers`."""

    CARRIED: ClassVar[tuple[str, ...]] = ("workers",)

    transport: Transport
    workers: int  # RUNNER_HTTP_WORKERS when serving HTTP; one process on stdio
