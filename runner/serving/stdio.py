"""MCP on stdio, the serving side (the process around it); runner/transports/stdio.py is the wire side.

One session with the client that started the server, until stdin closes."""

from __future__ import annotations

import contextlib
import functools
import logging
import sys

import anyio

from runner.config import Config, ToolServers
from runner.config.disk import TOOLS_PREFIX
from runner.eventloop import backend_options
from runner.logs import get_logger, log_event
from runner.processes.isolation import IsolationPlan
from runner.serving.signals import stops_heard


async def serve_stdio(config: Config, plan: IsolationPlan, early: list[int], tools: ToolServers | None = None) -> None:
    """Serve one stdio session; every run and pooled interpreter is gone when this returns. `tools`:
    the downstream servers runs may call (code mode)."""
    # Imported here so a configuration error is reported before the SDK's ~0.7 s import.
    from mcp.server.lowlevel import NotificationOptions

    from runner.egress.proxy import EgressProxy
    from runner.execution.leftovers import held_directory
    from runner.execution.pool import Pool
    from runner.execution.sweep import strays_reaped
    from runner.protocol.handlers import build_server
    from runner.protocol.tasks import Tasks
    from runner.protocol.tool import ToolChanges
    from runner.tools.broker import Broker
    from runner.transports.stdio import after_written, stdio_transport

    logger = get_logger()
    _warn_of_long_reads(config, logger)
    egress = EgressProxy(config.egress, logger) if config.egress_allow else None
    async with (
        stops_heard(early, "signal received; shutting down") as stopping,
        strays_reaped(logger),
        Broker.maybe_opened(
            tools, config.tools, logger, functools.partial(held_directory, TOOLS_PREFIX, config.work_dir), callers=False
        ) as broker,
        Pool.open(config, logger, reap_strays=True, plan=plan, tools=broker, egress=egress) as pool,
        Tasks.opened(config.tasks, logger) as tasks,
        anyio.create_task_group() as tg,
    ):
        stopping.serving(tg.cancel_scope.cancel)
        code_mode = broker.description if broker is not None else None
        changes = None
        if broker is not None:
            changes = ToolChanges(broker.description, logger, handshake=True)
            broker.on_listed = changes.poke
            tg.start_soon(changes.tell_forever)
        server = build_server(
            config, pool, logger, tasks=tasks, code_mode=code_mode, after_answer=after_written, tool_changes=changes
        )
        # listChanged: told where runs may call tools (`ToolChanges`); a 2026-07-28 client learns it by
        # `subscriptions/listen` being served.
        told = NotificationOptions(tools_changed=changes is not None)
        async with stdio_transport(config.limits.max_message_bytes, logger) as (read_stream, write_stream):
            log_event(logger, logging.INFO, "serving on stdio")
            await server.run(read_stream, write_stream, server.create_initialization_options(told))
        log_event(logger, logging.INFO, "stdin closed; shutting down")
        tg.cancel_scope.cancel()


# What a TypeScript SDK client's stdio transport takes in one message (its STDIO_DEFAULT_MAX_BUFFER_SIZE,
# 1.x and 2.x): over it, the client closes the connection (found by a review: a read of 16 MiB of kept
# output, the default then, and the host lost the server).
TS_CLIENT_MOST_BYTES = 10 << 20


def _warn_of_long_reads(config: Config, logger: logging.Logger) -> None:
    """A warning at start where a resources/read or a call's answer may be longer than TS_CLIENT_MOST_BYTES."""
    from runner.protocol.results import MAX_TEXT_GROWTH

    kept = config.kept.max_kept_output_bytes
    if kept * MAX_TEXT_GROWTH + (64 << 10) > TS_CLIENT_MOST_BYTES:
        said = (
            f"RUNNER_MAX_KEPT_OUTPUT_MB={kept / (1 << 20):g}: reading a kept stream may answer more than "
            "10 MiB, which a TypeScript SDK client over stdio (Claude Desktop, the Inspector) does not take: "
            "it closes the connection; 6 at most is safe"
        )
        log_event(logger, logging.WARNING, said)
    # A call's answer: each stream twice (its text block, structuredContent), each character as much as
    # 6 bytes of JSON (a control character's escape), and its images, files and table, base64 or JSON
    # (found by a second look: RUNNER_MAX_RETURNED_MB=12 gave an answer the client closed over).
    returns = config.returns
    if 24 * returns.max_output_chars + 2 * returns.max_returned_bytes + (64 << 10) > TS_CLIENT_MOST_BYTES:
        said = (
            f"RUNNER_MAX_RETURNED_MB={returns.max_returned_bytes / (1 << 20):g} and RUNNER_MAX_OUTPUT_CHARS="
            f"{returns.max_output_chars}: a call's answer may be more than 10 MiB, which a TypeScript SDK client "
            "over stdio (Claude Desktop, the Inspector) does not take: it closes the connection"
        )
        log_event(logger, logging.WARNING, said)


def main_stdio(config: Config, plan: IsolationPlan, early: list[int], tools: ToolServers | None = None) -> int:
    """Serve on stdin and stdout until stdin closes or a signal; the exit status."""
    if sys.stdin.isatty():
        sys.stderr.write(
            "python-runner-mcp: waiting for an MCP client on stdin/stdout (JSON-RPC); connect one with "
            "'make inspect' or a config from mcp-config-examples/. Ctrl-C stops.\n"
        )
    # A second Ctrl-C during shutdown: everything is already being torn down.
    with contextlib.suppress(KeyboardInterrupt):
        # Code mode's tool calls: a loop that polls before it sleeps while they are in flight (`eventloop`).
        polling = backend_options(config.tools.tools_spin_us if tools is not None else 0)
        anyio.run(serve_stdio, config, plan, early, tools, backend_options=polling)
    log_event(get_logger(), logging.INFO, "server stopped")
    return 0
