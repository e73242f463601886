"""The RUNNER_* variables of how clients reach the server: the transport, and for HTTP how it listens,
whom it lets in and how long it waits on them (`HttpConfig`). Part of `runner.config.variables.SETTINGS`,
declared as the others are."""

from __future__ import annotations

from typing import Literal, get_args

from runner.config.settings import Setting

# Paths the HTTP transport serves besides the MCP endpoint; RUNNER_HTTP_PATH may not take one.
OPERATIONS_PATHS = ("/healthz", "/readyz", "/metrics")
# What a server on a loopback address accepts unless told otherwise.
LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")

Transport = Literal["stdio", "http"]

HTTP_SETTINGS = (
    Setting(
        "RUNNER_TRANSPORT",
        "transport",
        "choice",
        "How clients reach the server; `--transport` on the command line wins. The `RUNNER_HTTP_*` variables, "
        "`RUNNER_AUTH_TOKENS_FILE` and `RUNNER_SHUTDOWN_GRACE` are read only for `http` (see [HTTP](http.md)).",
        choices=get_args(Transport),
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
        "RUNNER_HTTP_REPLICA",
        "http.replica",
        "text",
        "This replica's name (its pod's, say), put in every session handle (`s-NAME.…`), task id (`t-NAME.…`) and "
        "kept output URI (`runner://output/NAME.…`) it makes, so that a proxy in front of several replicas sends "
        "each session's calls, and each task's and link's requests, back to it. See [sessions](http.md#sessions).",
        pattern=r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?",
        expected="a DNS label: lower-case letters, digits and '-', at most 63",
        shown_default="none: handles name no replica",
        shown_accepted="a DNS label (`a-z`, `0-9`, `-`)",
    ),
    Setting(
        "RUNNER_HTTP_CLIENT_SECONDS",
        "http.client_seconds",
        "int",
        "Seconds the server waits on a client: a request's headers must all come within this of the "
        "connection (on a kept-alive one, of the request's first byte), its body may pause at most this long "
        "between two reads, and an answer the client does not take may stall at most this long; past any, "
        "the connection is closed. A connection idle between requests is kept 120 s. See "
        "[HTTP](http.md#slow-clients).",
        low=1,
        high=3600,
    ),
    Setting(
        "RUNNER_HTTP_MAX_CONNECTIONS",
        "http.max_connections",
        "int",
        "Connections one server process holds open at once (per worker). At the bound a new one closes the "
        "connection idle the longest, else the one waiting longest for its request's headers, else is closed "
        "itself. Keep it well under `ulimit -n`. See [HTTP](http.md#slow-clients).",
        low=1,
        high=65_536,
    ),
    Setting(
        "RUNNER_SHUTDOWN_GRACE",
        "http.shutdown_grace",
        "int",
        "Seconds calls in flight may finish after SIGTERM or SIGINT; then they are cancelled and their runs killed.",
        high=3600,
    ),
)
