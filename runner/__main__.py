"""`python-runner-mcp` (or `python -m runner`): serve MCP on stdio until stdin closes, or on HTTP
(`--transport http`), until SIGTERM/SIGINT arrives; then exit 0."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from runner.config import Config
from runner.errors import ConfigError
from runner.logs import configure_logging, get_logger, log_event
from runner.processes.procctl import die_with_parent, set_dumpable
from runner.processes.sandbox import Sandbox, choose_sandbox
from runner.transports.auth import BearerTokens

if TYPE_CHECKING:
    from runner.transports.http import HttpServer


async def serve(config: Config, sandbox: Sandbox) -> None:
    """Serve one stdio session; every run and pooled interpreter is gone when this returns."""
    # Imported here so a configuration error is reported before the SDK's ~0.7 s import.
    from runner.execution.pool import Pool
    from runner.protocol.handlers import build_server
    from runner.transports.stdio import stdio_transport

    logger = get_logger()
    async with (
        Pool.open(config, logger, reap_strays=True, sandbox=sandbox) as pool,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(_stop_on_signal, tg.cancel_scope)
        server = build_server(config, pool, logger)
        async with stdio_transport(config.max_message_bytes, logger) as (read_stream, write_stream):
            log_event(logger, logging.INFO, "serving on stdio")
            await server.run(read_stream, write_stream, server.create_initialization_options())
        log_event(logger, logging.INFO, "stdin closed; shutting down")
        tg.cancel_scope.cancel()


async def serve_http(
    config: Config, sandbox: Sandbox, tokens: BearerTokens | None, sock: socket.socket, early: list[int]
) -> None:
    """Serve Streamable HTTP until a signal; runs in flight then get RUNNER_SHUTDOWN_GRACE seconds."""
    from runner.execution.pool import Pool
    from runner.protocol.handlers import build_server
    from runner.protocol.metrics import Metrics
    from runner.protocol.shares import CallerShares, fair_share
    from runner.transports.http import HttpServer, caller_of, http_app

    logger = get_logger()
    async with (
        Pool.open(config, logger, reap_strays=True, sandbox=sandbox) as pool,
        anyio.create_task_group() as tg,
    ):
        metrics = Metrics(pool.state, config.max_concurrent, config.pool_size)
        share = fair_share(
            config.max_concurrent, len(tokens.names) if tokens else 0, config.http.max_concurrent_per_token
        )
        shares = CallerShares(share, config.max_queue)
        server = build_server(config, pool, logger, metrics=metrics, caller_of=caller_of, shares=shares)

        def not_ready() -> str | None:
            state = pool.state()
            if state.queue_full:
                return "the queue is full"
            if config.pool_size and not state.ready:
                return "no interpreter is ready"
            return None

        app = http_app(server, config.http, tokens, not_ready, metrics.exposition)
        http_server = HttpServer(app, config.http, sock)
        if metrics.multiprocess:
            tg.start_soon(metrics.refresh_forever)
        # Listening only once a SIGTERM would be heard: a stop that comes at once is not lost.
        await tg.start(_stop_http_on_signal, http_server, early)
        await http_server.serve()
        log_event(logger, logging.INFO, "HTTP server stopped; shutting down")
        tg.cancel_scope.cancel()


async def _stop_http_on_signal(
    server: HttpServer, early: list[int], *, task_status: anyio.abc.TaskStatus[None]
) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        if early:  # a signal that came before this receiver did
            log_event(get_logger(), logging.INFO, "signal received at start; stopping", signal=early[0])
            server.stop()
        async for signum in signals:
            name = signal.Signals(signum).name
            log_event(get_logger(), logging.INFO, "signal received; finishing the calls in flight", signal=name)
            server.stop()


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            log_event(get_logger(), logging.INFO, "signal received; shutting down", signal=name)
            scope.cancel()
            return


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m runner", description="python-runner-mcp: run Python over MCP.")
    parser.add_argument(
        "--transport",
        choices=("stdio", "http"),
        help="how clients reach the server (default: RUNNER_TRANSPORT, else stdio)",
    )
    parser.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve HTTP on a non-loopback address without RUNNER_AUTH_TOKENS_FILE "
        "(anyone who reaches the port runs code)",
    )
    # Internal: how the supervisor (RUNNER_HTTP_WORKERS) hands its listening socket to a worker.
    parser.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--supervisor-pid", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _configured(args: argparse.Namespace) -> tuple[Config, Sandbox, BearerTokens | None]:
    """The configuration, the sandbox and the tokens; `ConfigError` for anything that must stop the start."""
    environ = dict(os.environ)
    if args.transport:
        environ["RUNNER_TRANSPORT"] = args.transport
    config = Config.from_env(environ)
    tokens = None
    if config.transport == "http":
        http = config.http
        tokens = BearerTokens.read(http.tokens_file) if http.tokens_file else None
        if tokens is None and not http.loopback and not args.insecure_no_auth:
            raise ConfigError(
                "RUNNER_AUTH_TOKENS_FILE",
                f"required to serve HTTP on {http.host}, which is not a loopback address: without tokens anyone who "
                "reaches the port runs code here. Give a tokens file, or --insecure-no-auth if something in front "
                "of the server authenticates every request",
            )
    elif args.insecure_no_auth:
        raise ConfigError("--insecure-no-auth", "applies to --transport http only")
    return config, choose_sandbox(config), tokens


def main(argv: list[str] | None = None) -> int:
    """Entry point: configure from the environment and the arguments, serve, and return the exit status."""
    args = _arguments(argv)
    try:
        config, sandbox, tokens = _configured(args)
    except ConfigError as exc:
        sys.stderr.write(f"python-runner-mcp: invalid configuration: {exc}\n")
        return 2
    configure_logging(config.log_level, config.log_format)
    # Code of runs runs as our uid: keep it out of our /proc/<pid>/environ, fds, memory and ptrace.
    if not set_dumpable(False):
        log_event(get_logger(), logging.WARNING, "cannot make the server non-dumpable on this platform")
    if config.transport == "http":
        return _main_http(config, sandbox, tokens, args)
    if sys.stdin.isatty():
        sys.stderr.write(
            "python-runner-mcp: waiting for an MCP client on stdin/stdout (JSON-RPC); connect one with "
            "'make inspect' or a config from mcp-config-examples/. Ctrl-C stops.\n"
        )
    # A second Ctrl-C during shutdown: everything is already being torn down.
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(serve, config, sandbox)
    log_event(get_logger(), logging.INFO, "server stopped")
    return 0


def _main_http(config: Config, sandbox: Sandbox, tokens: BearerTokens | None, args: argparse.Namespace) -> int:
    from runner.transports.http import listening, url_of

    logger = get_logger()
    worker = args.listen_fd is not None
    if worker:
        # A worker: stop (gracefully) when the supervisor is gone, whatever ended it; if it is gone
        # already (before the call below), at once.
        die_with_parent(signal.SIGTERM)
        if args.supervisor_pid is not None and os.getppid() != args.supervisor_pid:
            log_event(logger, logging.ERROR, "the supervisor is gone; not serving")
            return 1
    elif tokens is not None and not sandbox.enabled:
        log_event(
            logger,
            logging.WARNING,
            "runs are not sandboxed and share the server's uid: a run can read RUNNER_AUTH_TOKENS_FILE, every "
            "client's token in it; give runs a sandbox (RUNNER_SANDBOX, docs/security.md) before sharing this server",
        )
    elif tokens is None:
        log_event(logger, logging.WARNING, "HTTP without authentication: whoever reaches the port runs code")
    http = config.http
    try:
        sock = socket.socket(fileno=args.listen_fd) if worker else listening(http.host, http.port)
    except OSError as exc:
        log_event(logger, logging.ERROR, "cannot listen", host=http.host, port=http.port, error=exc.strerror)
        return 1
    with sock:
        if not worker and http.workers > 1:
            from runner.supervisor import supervise

            return supervise(config, sock, ["--insecure-no-auth"] if args.insecure_no_auth else [])
        # Clients may connect from now on; a stop asked for before the server's own handler is
        # installed is kept for it, not lost (the default action would end the process at once).
        early: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: early.append(signum))
        if not worker:
            log_event(logger, logging.INFO, "serving on HTTP", url=url_of(sock, http.path))
        anyio.run(serve_http, config, sandbox, tokens, sock, early)
    log_event(logger, logging.INFO, "server stopped")
    return 0


# The package environment `make sandbox-env` (and `make run`) builds in a checkout, beside `runner/`,
# and the file that says its build finished.
CHECKOUT_PACKAGES = ".sandbox-env"
BUILT_STAMP = ".built"


def console() -> int:
    """The `python-runner-mcp` console script: `main`, and with RUNNER_PACKAGES not set at all, runs
    import from the package environment built in the checkout this was installed from (editable, as
    `make run` installs it), if there is one. RUNNER_PACKAGES="" still means the standard library only."""
    if "RUNNER_PACKAGES" not in os.environ:
        built = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), CHECKOUT_PACKAGES)
        if os.path.isfile(os.path.join(built, BUILT_STAMP)):
            # In the environment, not only in this process's configuration: HTTP workers inherit it.
            os.environ["RUNNER_PACKAGES"] = built
    return main()


if __name__ == "__main__":
    sys.exit(main())
