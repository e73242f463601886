"""`python -m runner`: serve MCP on stdio until stdin closes or SIGTERM/SIGINT arrives, then exit 0."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys

import anyio

from runner.config import Config
from runner.errors import ConfigError
from runner.logs import configure_logging, get_logger, log_event
from runner.processes.procctl import set_dumpable
from runner.processes.sandbox import Sandbox, choose_sandbox


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


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            log_event(get_logger(), logging.INFO, "signal received; shutting down", signal=name)
            scope.cancel()
            return


def main() -> int:
    """Entry point: configure from the environment, serve, and return the exit status."""
    try:
        config = Config.from_env()
        sandbox = choose_sandbox(config)
    except ConfigError as exc:
        sys.stderr.write(f"python-runner-mcp: invalid configuration: {exc}\n")
        return 2
    configure_logging(config.log_level, config.log_format)
    # Code of runs runs as our uid: keep it out of our /proc/<pid>/environ, fds, memory and ptrace.
    if not set_dumpable(False):
        log_event(get_logger(), logging.WARNING, "cannot make the server non-dumpable on this platform")
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


if __name__ == "__main__":
    sys.exit(main())
