"""The MCP layer: tools/list and tools/call on the low-level SDK server. Knows nothing of processes.

Every call ends in a result: bad arguments, a busy server and the server's own faults become
`isError` results carrying the request_id, because an exception escaping a handler would become a
bare JSON-RPC error in this SDK.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from runner import __version__
from runner.config import Config
from runner.errors import ArgumentError
from runner.logs import get_logger, log_event
from runner.outcome import Progress, RunRequest, RunResult, Status
from runner.schemas import TOOL_NAME, ArgumentParser, input_schema, output_schema, structured_result

SERVER_NAME = "python-runner-mcp"

DESCRIPTION = (
    "Run a Python 3 program in its own fresh, isolated interpreter process and return its stdout, "
    "stderr and exit code. Each call is a one-shot process (no state is kept between calls) with no "
    "site-packages (standard library only), an empty private working directory that is deleted "
    "afterwards, and hard limits: {cpu}s CPU, {mem} MiB memory, {procs} processes, {fsize} MiB per "
    "written file, wall-clock timeout {timeout:g}s by default (at most {max_timeout:g}s), output "
    "capped at {chars:,} characters per stream. The status field says why a run ended (ok, error, "
    "timeout, cpu_limit, memory_limit, file_size_limit, output_limit, signal, ...)."
)


class Runner(Protocol):
    """What the protocol layer needs from the pool."""

    async def run(
        self, request: RunRequest, on_progress: Callable[[Progress], Awaitable[None]] | None = None
    ) -> RunResult:
        """Run one request to its end, reporting progress if asked."""
        ...


def new_request_id() -> str:
    """8 random hex characters, as in the logs and the result."""
    return secrets.token_hex(4)


def tool_definition(config: Config) -> types.Tool:
    """The one tool this server offers, with its hand-written schemas."""
    return types.Tool(
        name=TOOL_NAME,
        title="Run Python",
        description=DESCRIPTION.format(
            cpu=config.max_cpu_seconds,
            mem=config.max_memory_mb,
            procs=config.max_processes,
            fsize=config.max_file_size_mb,
            timeout=config.default_timeout,
            max_timeout=config.max_timeout,
            chars=config.max_output_chars,
        ),
        input_schema=input_schema(config),
        output_schema=output_schema(),
        annotations=types.ToolAnnotations(
            title="Run Python",
            # Each run starts in a throwaway directory, but code can do whatever the server's user
            # may do within its limits: write and delete files, and reach the network unless the
            # deployment (Docker --network=none --read-only) takes that away.
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=False,
            open_world_hint=True,
        ),
    )


def to_call_result(result: RunResult) -> types.CallToolResult:
    """Text block in the documented format plus structured content; isError unless status is ok."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=result.to_text())],
        structured_content=structured_result(result),
        is_error=result.is_error,
    )


class Handlers:
    """The request handlers, bound to one configuration and one runner."""

    def __init__(self, config: Config, runner: Runner, logger: logging.Logger | None = None) -> None:
        self._config = config
        self._runner = runner
        self._log = logger or get_logger()
        self._tool = tool_definition(config)
        self._parser = ArgumentParser(config)

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """tools/list: the single run_python tool."""
        return types.ListToolsResult(tools=[self._tool])

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """tools/call: validate, run, and turn every outcome (or fault) into a result."""
        request_id = new_request_id()
        try:
            return await self._call(request_id, params, ctx)
        except anyio.get_cancelled_exc_class():
            log_event(self._log, logging.INFO, "call cancelled", request_id)
            raise
        except Exception as exc:
            self._log.error(
                "internal error",
                exc_info=True,
                extra={"request_id": request_id, "fields": {"error": type(exc).__name__}},
            )
            return to_call_result(
                RunResult(
                    request_id,
                    Status.INTERNAL_ERROR,
                    f"the runner failed ({type(exc).__name__}); the server log has details under this request_id",
                )
            )

    async def _call(
        self, request_id: str, params: types.CallToolRequestParams, ctx: ServerRequestContext[Any]
    ) -> types.CallToolResult:
        code_size = len(str((params.arguments or {}).get("code", "")))
        log_event(self._log, logging.INFO, "call received", request_id, tool=params.name, code_chars=code_size)
        if params.name != TOOL_NAME:
            message = f"unknown tool {params.name!r}: this server offers only {TOOL_NAME!r}"
            log_event(self._log, logging.INFO, "call rejected", request_id, reason="unknown tool")
            return to_call_result(RunResult(request_id, Status.INVALID_ARGUMENTS, message))
        try:
            args = self._parser.parse(params.arguments)
        except ArgumentError as exc:
            log_event(self._log, logging.INFO, "call rejected", request_id, reason="invalid arguments")
            return to_call_result(RunResult(request_id, Status.INVALID_ARGUMENTS, str(exc)))
        request = RunRequest(request_id=request_id, code=args.code, timeout=args.timeout, stdin=args.stdin)
        # report_progress is a no-op for a caller that did not ask for progress (no progressToken).
        return to_call_result(await self._runner.run(request, _progress_reporter(ctx)))


def _progress_reporter(ctx: ServerRequestContext[Any]) -> Callable[[Progress], Awaitable[None]]:
    async def report(progress: Progress) -> None:
        # No known total: the elapsed seconds count up, and the message says the rest.
        await ctx.session.report_progress(round(progress.elapsed, 3), None, progress.describe())

    return report


def build_server(config: Config, runner: Runner, logger: logging.Logger | None = None) -> Server[Any]:
    """The low-level MCP server with explicit handlers."""
    handlers = Handlers(config, runner, logger)
    server: Server[Any] = Server(
        SERVER_NAME,
        version=__version__,
        title="Python Runner",
        instructions=(
            "Use run_python to execute Python code in an isolated, resource-limited one-shot process. "
            "Nothing persists between calls; print results to see them."
        ),
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
    )
    # No OpenTelemetry exporter is ever installed here; skip the per-message span work.
    server.middleware = []
    return server
