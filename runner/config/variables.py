"""Every RUNNER_* variable, declared once: its field, type, unit, range and meaning.

`runner.config` reads the environment through these declarations into its frozen `Config` (the
default of each variable is its field's there), names a bad variable from them in its error, and
prints docs/configuration.md's table from them (`python -m runner.config`).
"""

from __future__ import annotations

from typing import Literal, get_args

from runner.config.http_variables import HTTP_SETTINGS
from runner.config.settings import KIB, MIB, Setting
from runner.logs import LogFormat, LogLevel

# Without RUNNER_PRELOAD: those of these installed in RUNNER_PACKAGES.
DEFAULT_PRELOAD = ("numpy", "pandas", "matplotlib.pyplot")

SandboxMode = Literal["auto", "namespaces", "bwrap", "none", "none-posix-spawn"]
SandboxNetwork = Literal["isolated", "shared"]
AppView = Literal["on", "off"]


def _choices(name: str, field: str, kind: object, meaning: str) -> Setting:
    return Setting(name, field, "choice", meaning, choices=get_args(kind))


SETTINGS = (
    Setting(
        "RUNNER_MAX_CPU_SECONDS",
        "max_cpu_seconds",
        "int",
        "CPU seconds of each process of a run (RLIMIT_CPU soft; hard is one more).",
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
        "RUNNER_MAX_STDIN_MB", "max_stdin_bytes", "number", "Largest `stdin`, MiB of UTF-8.", unit="MiB", high=64 * MIB
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
        "RUNNER_MAX_KEPT_OUTPUT_MB",
        "max_kept_output_bytes",
        "number",
        "MiB of a stream kept whole on disk when the answer shows only its head and tail: the result "
        "links it (`resource_link`), `resources/read` returns it. `0`: nothing kept; nor is anything with "
        "`RUNNER_HTTP_WORKERS` above 1 (the link would be on one worker, its read on any). Over stdio, more than "
        "6 lets a read's answer pass 10 MiB, which a TypeScript SDK client (Claude Desktop, the Inspector) does "
        "not take: it closes the connection (the server warns at start).",
        unit="MiB",
        high=1024 * MIB,
    ),
    Setting(
        "RUNNER_MAX_KEPT_CALLER_MB",
        "max_kept_caller_bytes",
        "number",
        "MiB of kept output one caller may hold; the caller's oldest goes first to make room.",
        unit="MiB",
        high=64 * 1024 * MIB,
    ),
    Setting(
        "RUNNER_MAX_KEPT_TOTAL_MB",
        "max_kept_total_bytes",
        "number",
        "MiB of kept output over every caller, in `RUNNER_WORK_DIR`; the oldest goes first to make room.",
        unit="MiB",
        high=1024 * 1024 * MIB,
    ),
    Setting(
        "RUNNER_KEPT_OUTPUT_SECONDS",
        "kept_output_seconds",
        "int",
        "How long kept output can be read after its run; then its link is not found. A task's result lasts "
        "as long after its run.",
        low=1,
        high=604_800,
    ),
    Setting(
        "RUNNER_MAX_QUEUE",
        "max_queue",
        "int",
        "Calls that may wait for a slot (or for their session's previous call to end); one more gets `busy`. "
        "`0`: no bound.",
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
        high=10_000,
    ),
    Setting(
        "RUNNER_SESSIONS_MEMORY_MB",
        "sessions_memory_mb",
        "int",
        "Memory in MiB that every open session's kept state may hold together: what a kept call's state holds "
        "beyond what its session began with (the data it loaded, not the preloaded modules it shares). A call "
        "whose state would pass it is rolled back, and its result says why. More than the server can hold (the "
        "machine's memory, or its cgroup's limit where lower) stops it "
        "(see [sessions](sessions.md#limits)).",
        high=16_777_216,
        shown_default="`0`: half of what the server can hold, at most RUNNER_MAX_SESSIONS times RUNNER_MAX_MEMORY_MB",
    ),
    Setting(
        "RUNNER_SESSION_IDLE_SECONDS",
        "session_idle_seconds",
        "int",
        "A session no call has used for this long ends, and its handle is unknown from then on.",
        low=1,
        high=604_800,
    ),
    Setting(
        "RUNNER_SESSION_MAX_SECONDS",
        "session_max_seconds",
        "int",
        "A session ends this long after it started, however busy it is.",
        low=1,
        high=2_592_000,
    ),
    Setting(
        "RUNNER_MAX_TASKS_PER_CALLER",
        "max_tasks_per_caller",
        "int",
        "Tasks (the tasks extension: a call that outlasts a second, for a client that negotiated it) one "
        "caller may hold, working or ended; one more makes its oldest ended one go, and while all are "
        "working a call is answered without a task. Each lasts while it works, then `RUNNER_KEPT_OUTPUT_SECONDS`. "
        "`0`: no tasks. See [tasks](tool.md#tasks).",
        high=10_000,
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
        "Interpreter that runs the code: CPython 3.11 or newer (asked its version at start), the version "
        "`RUNNER_PACKAGES`' compiled wheels were made for (tested with CPython 3.11).",
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
        "`isolated`: each sandboxed run gets an empty network namespace that no other run is in at the same time "
        "(no network at all, no abstract unix socket shared with another run): bubblewrap makes one per run, and "
        "the namespaced fork server lends one again only while nothing an earlier run could leave there (a socket, "
        "a bound name, a counter, a route) is in it (see [security](security.md#a-lent-network-namespace)); "
        "`shared`: keep the server's network.",
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
        "RUNNER_WHEELHOUSE",
        "wheelhouse",
        "path",
        "The vetted wheelhouse: the wheels `make wheelhouse` downloads and the lock it kept beside them. A run "
        "whose code imports one of its packages, or names it in `packages`, gets it installed once, offline, "
        "hash-checked, and read-only (see [the vetted wheelhouse](#the-vetted-wheelhouse)). `make run` sets it "
        "to `.wheelhouse` unless it is set, even empty.",
        expected="an absolute path to a wheelhouse",
        shown_default="empty: nothing beyond `RUNNER_PACKAGES`",
        shown_accepted="absolute path of a directory holding the wheels and `requirements.lock`",
    ),
    Setting(
        "RUNNER_WHEELHOUSE_CACHE",
        "wheelhouse_cache",
        "path",
        "Where the wheelhouse's packages are installed, one directory per distribution, reused by later runs "
        "and later servers; made if missing (mode 0755, the server's own: runs read it). One that the server "
        "cannot write (the image's, installed at build) is used as it is. Not in the temp directory by default: "
        "its packages are bound into each sandboxed run's view at their own path, and under `/tmp` they would "
        "show in the run's directory, which is its `/tmp`.",
        expected="an absolute path to a directory",
        shown_default="`/var/tmp/python-runner-environments-UID` (in `RUNNER_WORK_DIR` where `/var/tmp` will not do)",
        shown_accepted="absolute path of a directory",
    ),
    Setting(
        "RUNNER_WHEELHOUSE_CACHE_MB",
        "max_wheelhouse_cache_bytes",
        "number",
        "MiB of installed packages the cache keeps; past it the least recently used go first, never one a run "
        "or a session holds. One install is bounded by it too, and by 120 s.",
        unit="MiB",
        low=MIB,
        high=1024 * 1024 * MIB,
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
    _choices(
        "RUNNER_APP_VIEW",
        "app_view",
        AppView,
        "`on`: `run_python` names its MCP App view (`ui://python-runner/run.html`, the `io.modelcontextprotocol/ui` "
        "extension), and a client that negotiated the extension gets a last value that is a pandas DataFrame or "
        "Series as a table besides its text (`structuredContent.table`); other clients see the same results either "
        "way. `off`: no view, no table, and the extension is not offered (see [the app view](apps.md)).",
    ),
    Setting(
        "RUNNER_MAX_TABLE_ROWS",
        "max_table_rows",
        "int",
        "Rows of a DataFrame or Series that `structuredContent.table` carries for the app view: the first ones, "
        "within half of `RUNNER_MAX_RETURNED_MB` (fewer where they would not fit); `0`: no table.",
        high=100_000,
    ),
    Setting(
        "RUNNER_MAX_INPUT_MB",
        "max_input_mb",
        "int",
        "The `files` of one call, MiB together after decoding; each file also at most `RUNNER_MAX_FILE_SIZE_MB`.",
        high=1024,
    ),
    Setting(
        "RUNNER_TOOLS_CONFIG",
        "tools_config",
        "path",
        "Code mode: a JSON file in the `mcpServers` shape, one entry per downstream MCP server (stdio or "
        "Streamable HTTP) whose tools runs may call as Python functions (`import mcp_tools`), brokered by this "
        "server; each entry's `tools` (required) says which, its `callers` who. Read once at start; the servers "
        "are started with it. A bad file, entry or tool name stops the server naming it; runs never see the "
        "file (see [code mode](code-mode.md)).",
        expected="an absolute path to a file",
        shown_default="none: runs call no tool",
        shown_accepted="absolute path of a readable file",
    ),
    Setting(
        "RUNNER_TOOLS_MAX_CALLS",
        "tools_max_calls",
        "int",
        "Tool calls one run (or one call of a session) may make through `mcp_tools`, a call refused for "
        "its arguments counted too; one more raises `mcp_tools.ToolError`.",
        low=1,
        high=100_000,
    ),
    Setting(
        "RUNNER_TOOLS_MAX_MB",
        "tools_max_mb",
        "int",
        "MiB of tool arguments and results, together, one run may pass through `mcp_tools` (JSON as sent); "
        "a call past it raises `mcp_tools.ToolError`.",
        low=1,
        high=4096,
    ),
    Setting(
        "RUNNER_TOOLS_MAX_CONCURRENT",
        "tools_max_concurrent",
        "int",
        "Tool calls one run may have in flight at once (from its threads or processes); one more raises "
        "`mcp_tools.ToolError`.",
        low=1,
        high=64,
    ),
    Setting(
        "RUNNER_TOOLS_SPIN_US",
        "tools_spin_us",
        "int",
        "Microseconds a sleep of the server's loop polls first, out of what runs' tool calls grant it (two spins a "
        "call sent on, one an answer to a run calling tool after tool): a brokered call then pays no wake of an idle "
        "CPU. Never with fewer than two CPUs. `0`: it sleeps at once ([code mode](code-mode.md#latency)).",
        high=10_000,
    ),
    Setting(
        "RUNNER_EGRESS_ALLOW",
        "egress_allow",
        "list",
        "Hosts sandboxed runs may reach, through the server's HTTP proxy (`HTTP_PROXY` and `HTTPS_PROXY` in a "
        "run name it, on the run's own loopback); nothing else leaves a run. Each entry `HOST[:PORT]`: a name "
        "(`pypi.org`), a subdomain wildcard (`*.example.com`, not `example.com` itself), an IP address or a "
        "CIDR; `:PORT` or `:*`, without one 80 and 443. A name is reached only at its public addresses unless "
        "the address is listed too. Needs a sandbox with an isolated network (see [network](network.md)).",
        pattern=r"[^\s,]+",
        expected="comma-separated HOST[:PORT] entries",
        shown_default="empty: runs have no network at all",
        shown_accepted="comma-separated `name`, `*.domain`, `address` or `cidr`, each with `:port` or `:*` or none",
    ),
    Setting(
        "RUNNER_MAX_EGRESS_MB",
        "max_egress_mb",
        "int",
        "MiB one run (or one call of a session) may send and receive through the egress proxy, together; past "
        "it, the run's connections are closed.",
        low=1,
        high=1_048_576,
    ),
    *HTTP_SETTINGS,
)
