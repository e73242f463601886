"""The MCP handlers: tools/list and tools/call (run_python, close_session), and resources/list and
resources/read (the app view, and the whole of a stream a result showed cut), on the low-level SDK
server. Knows nothing of processes.

Every call ends in a result: bad arguments, a busy server and the server's own faults become
`isError` results carrying the request_id, because an exception escaping a handler would become a
bare JSON-RPC error in this SDK.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import mcp_types as types
from mcp.server.apps import EXTENSION_ID
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from runner import __version__
from runner.config import Config
from runner.errors import ArgumentError
from runner.logs import SHOWN_CHARS, cut, cut_error, get_logger, log_event
from runner.outcome import NEW_SESSION, KeptOutput, Progress, RunRequest, RunResult, Status
from runner.protocol.arguments import ArgumentParser
from runner.protocol.metrics import Metrics
from runner.protocol.reads import AfterAnswer, Reads, answer_cost
from runner.protocol.results import closed_result, kept_contents, to_call_result
from runner.protocol.schemas import CLOSE_TOOL, RUN_TOOL
from runner.protocol.task_methods import CallerOf, NameHeaderOf, TaskMethods, negotiated
from runner.protocol.tasks import TASK_AFTER_SECONDS, Tasks, created_result
from runner.protocol.tool import ToolChanges, ToolList
from runner.protocol.view import VIEW_URI, AppView, client_shows_views

SERVER_NAME = "python-runner-mcp"
# A progressToken at most (a UUID is 36): each progress notification, one a second, sends it back whole.
MAX_PROGRESS_TOKEN_CHARS = 256


class Runner(Protocol):
    """What the protocol layer needs from the pool."""

    async def run(
        self, request: RunRequest, on_progress: Callable[[Progress], Awaitable[None]] | None = None
    ) -> RunResult:
        """Run one request to its end, reporting progress if asked."""
        ...

    async def close_session(self, handle: str, caller: str | None) -> str | None:
        """End the caller's session `handle`: None once it has ended, else why there is no such session."""
        ...

    async def end_unclaimed_session(self, handle: str, caller: str | None, why: str) -> bool:
        """End the caller's session `handle` for `why` if no call came to it since its first (its handle
        went in a result nobody read); whether it did."""
        ...

    async def read_output(self, uri: str, caller: str | None) -> tuple[KeptOutput, bytes] | None:
        """The caller's kept stream `uri` and its bytes; None if the caller has none by that URI."""
        ...

    def kept_outputs(self, caller: str | None) -> list[KeptOutput]:
        """The caller's kept streams that can still be read."""
        ...

    @property
    def sandboxed(self) -> bool:
        """Whether runs are sandboxed: the tool's description says so where they are not."""
        ...

    @property
    def run_directory_shows(self) -> tuple[str, ...]:
        """What of the server's a sandboxed run's directory shows: the description names it."""
        ...


def new_request_id() -> str:
    """8 random hex characters, as in the logs and the result."""
    return secrets.token_hex(4)


class Handlers:
    """The request handlers, bound to one configuration and one runner."""

    def __init__(
        self,
        config: Config,
        runner: Runner,
        logger: logging.Logger | None = None,
        *,
        metrics: Metrics | None = None,
        caller_of: CallerOf | None = None,
        tasks: Tasks | None = None,
        code_mode: Callable[[], str] | None = None,
        after_answer: AfterAnswer | None = None,
        tool_changes: ToolChanges | None = None,
    ) -> None:
        self._runner = runner
        self._log = logger or get_logger()
        shows = runner.run_directory_shows
        self._tools = ToolList(
            config, sandboxed=runner.sandboxed, shows=shows, code_mode=code_mode, changes=tool_changes
        )
        self._sessions = not config.sessions.refused  # and so close_session is offered
        self._parser = ArgumentParser(config)
        self._metrics = metrics
        self._caller_of = caller_of
        self._tasks = tasks
        self._view = AppView.load() if config.returns.app_view == "on" else None
        self._table_rows = config.returns.table_rows
        self._reads = Reads.for_largest(config.kept.max_kept_output_bytes)
        self._after_answer = after_answer

    @property
    def reads(self) -> Reads:
        """The reads of kept output and of task results in flight (`runner.protocol.reads`)."""
        return self._reads

    @property
    def view(self) -> AppView | None:
        """The app view run_python names; None where RUNNER_APP_VIEW is off."""
        return self._view

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """tools/list: run_python, and close_session where sessions may be had."""
        return types.ListToolsResult(tools=list(self._tools.listed(ctx)))

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        """resources/list: the app view, and the caller's kept streams that can still be read (the links
        results gave)."""
        kept = self._runner.kept_outputs(self._caller(ctx))
        listed = [types.Resource(uri=k.uri, name=k.stream, mime_type=k.mime_type, size=k.size) for k in kept]
        return types.ListResourcesResult(resources=([self._view.resource()] if self._view else []) + listed)

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        """resources/templates/list: none (every URI a caller may read is listed or linked whole), answered
        because the `resources` capability promises the method: a client that asked (the Inspector's
        `--method resources/templates/list`) got "Method not found"."""
        return types.ListResourceTemplatesResult(resource_templates=[])

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        """resources/read: the app view, to any caller; a kept stream, whole, to the caller whose run
        wrote it; any other URI (never made, expired, evicted, another caller's) is "resource not
        found" (-32602), alike."""
        uri, caller = str(params.uri), self._caller(ctx)
        if self._view is not None and uri == VIEW_URI:
            return types.ReadResourceResult(contents=[self._view.contents()])
        size = next((kept.size for kept in self._runner.kept_outputs(caller) if kept.uri == uri), None)
        if size is None:
            raise self._not_found(uri)
        try:
            held = self._reads.admit(caller, size)
        except MCPError as busy:
            log_event(self._log, logging.INFO, "read refused", reason="busy", error=busy.message)
            raise
        # Released once the answer has left (not when it is built: a client that does not read it holds it).
        with self._reads.answering(held, ctx.request, self._after_answer):
            found = await self._runner.read_output(uri, caller)
            if found is None:  # expired or evicted since it was listed
                raise self._not_found(uri)
            kept, data = found
            del found
            contents = kept_contents(kept, data)
            self._reads.charge(held, answer_cost(data, contents))
            return types.ReadResourceResult(contents=[contents])

    def _not_found(self, uri: str) -> MCPError:
        log_event(self._log, logging.INFO, "resource not found", uri=uri[:100])
        shown = cut(uri, SHOWN_CHARS)
        return MCPError(types.INVALID_PARAMS, f"resource not found: {shown}", {"uri": shown})

    def _caller(self, ctx: ServerRequestContext[Any]) -> str | None:
        return self._caller_of(ctx.request) if self._caller_of is not None and ctx.request is not None else None

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | dict[str, Any]:
        """tools/call: validate, run, and turn every outcome (or fault) into a result; for a client that
        negotiated tasks, a run that outlasts TASK_AFTER_SECONDS is answered with a task instead."""
        request_id = new_request_id()
        caller = self._caller(ctx)
        try:
            if params.name == CLOSE_TOOL and self._sessions:
                return await self._close(request_id, params, caller)
            shows = self._view is not None and client_shows_views(ctx.session.client_capabilities)
            table_rows = self._table_rows if shows else 0
            refused = _long_progress_token(request_id, ctx, self._log)
            prepared = refused or self._prepare(request_id, params, caller, table_rows)
            if isinstance(prepared, RunResult):
                result = prepared
            elif self._tasks is not None and negotiated(ctx):
                answer = await self._as_task(prepared, ctx)
                if not isinstance(answer, RunResult):
                    return answer  # the task, or the result of a call that ended before it became one
                result = answer  # its run ended with no result of its own (stopped, or a fault)
            else:
                # report_progress is a no-op for a caller that did not ask for progress (no progressToken).
                result = await self._runner.run(prepared, _progress_reporter(ctx))
        except anyio.get_cancelled_exc_class():
            log_event(self._log, logging.INFO, "call cancelled", request_id)
            raise
        except Exception as exc:
            result = RunResult(request_id, Status.INTERNAL_ERROR, self._fault(request_id, exc))
        return self._answer(result, caller)

    def _answer(self, result: RunResult, caller: str | None) -> types.CallToolResult:
        if self._metrics is not None:
            self._metrics.observe(result, caller)
        return to_call_result(result)

    def _fault(self, request_id: str, exc: Exception) -> str:
        """Log a fault of the server's own, traceback and all, under the call's request_id; what the
        result says of it."""
        fields = {"request_id": request_id, "fields": {"error": type(exc).__name__}}
        self._log.error("internal error", exc_info=True, extra=fields)
        return f"the runner failed ({type(exc).__name__}); the server log has details under this request_id"

    def _prepare(
        self, request_id: str, params: types.CallToolRequestParams, caller: str | None, table_rows: int
    ) -> RunRequest | RunResult:
        """The run a call asks for, or the result that refuses it; `table_rows`: of a last value's table,
        for a client that shows the app view."""
        code = (params.arguments or {}).get("code", "")
        # Its length only if it is text: str() of a wrong value (a long array) would cost what it holds.
        fields: dict[str, Any] = {"tool": params.name, "code_chars": len(code) if isinstance(code, str) else -1}
        if caller is not None:
            fields["caller"] = caller
        log_event(self._log, logging.INFO, "call received", request_id, **fields)
        if params.name != RUN_TOOL:
            offered = " and ".join(repr(tool.name) for tool in self._tools.now())
            message = f"unknown tool {cut(params.name, SHOWN_CHARS)!r}: this server offers {offered}"
            log_event(self._log, logging.INFO, "call rejected", request_id, reason="unknown tool")
            return RunResult(request_id, Status.INVALID_ARGUMENTS, message)
        try:
            args = self._parser.parse(params.arguments)
        except ArgumentError as exc:
            log_event(self._log, logging.INFO, "call rejected", request_id, reason="invalid arguments")
            return RunResult(request_id, Status.INVALID_ARGUMENTS, str(exc))
        return RunRequest(
            request_id,
            args.code,
            args.timeout,
            args.stdin,
            args.files,
            caller,
            args.session,
            args.packages,
            table_rows,
        )

    async def _as_task(
        self, request: RunRequest, ctx: ServerRequestContext[Any]
    ) -> dict[str, Any] | types.CallToolResult | RunResult:
        """Run `request` in the server's task group: its result if it ends within TASK_AFTER_SECONDS,
        else the task it has become. It stays a plain call, waiting for its run, when the caller's
        tasks are all working or the server is stopping. A cancel before it became a task (the
        client's, or its connection dropping) kills the run, which is reaped before this returns."""
        tasks = self._tasks
        assert tasks is not None
        task = tasks.store.new(request.request_id, request.caller, request.timeout)
        report = _progress_reporter(ctx)

        async def work() -> tuple[types.CallToolResult, str]:
            async def progress(progress: Progress) -> None:
                task.progress(progress.describe())
                if not task.published:  # still the request's: its progressToken applies
                    await report(progress)

            try:
                result = await self._runner.run(request, progress)
            except Exception as exc:
                result = RunResult(request.request_id, Status.INTERNAL_ERROR, self._fault(request.request_id, exc))
            if request.session == NEW_SESSION and result.session is not None:
                # Its handle is in this result alone, but for the list of handles a caller at its cap is
                # told: a task that goes unread ends the session unless a call came to it meanwhile.
                why = "its first call became a task whose result was never read"
                task.leftover = functools.partial(
                    self._runner.end_unclaimed_session, result.session.handle, request.caller, why
                )
            summary = f"{result.status.value} after {result.duration:.3f} s" + (
                f": {result.message}" if result.message else ""
            )
            return self._answer(result, request.caller), summary

        tasks.start(task, work)
        try:
            with anyio.move_on_after(TASK_AFTER_SECONDS):
                await task.ended.wait()
            if not task.ended.is_set() and not tasks.stopping and tasks.store.publish(task):
                log_event(self._log, logging.INFO, "task created", request.request_id)
                return created_result(task)
            await task.ended.wait()
        except BaseException:
            task.cancel("the call was cancelled before it became a task")
            with anyio.CancelScope(shield=True):
                await task.ended.wait()
            raise
        if task.result is not None:
            return task.result
        return RunResult(request.request_id, Status.INTERNAL_ERROR, task.status_message or "the run was stopped")

    async def _close(
        self, request_id: str, params: types.CallToolRequestParams, caller: str | None
    ) -> types.CallToolResult:
        log_event(self._log, logging.INFO, "call received", request_id, tool=params.name)
        try:
            handle = self._parser.parse_close(params.arguments)
        except ArgumentError as exc:
            log_event(self._log, logging.INFO, "call rejected", request_id, reason="invalid arguments")
            named = (params.arguments or {}).get("session", "")
            # Said back only if it is text, and cut: any value may come here.
            return closed_result(request_id, cut(named, SHOWN_CHARS) if isinstance(named, str) else "", str(exc))
        try:
            unknown = await self._runner.close_session(handle, caller)
        except Exception as exc:  # an answer in close_session's own shape, as every fault of run_python's
            return closed_result(request_id, cut(handle, SHOWN_CHARS), self._fault(request_id, exc))
        log_event(self._log, logging.INFO, "session closed" if unknown is None else "call rejected", request_id)
        # Said back cut: a handle is any string (one never made is refused only once looked up).
        return closed_result(request_id, cut(handle, SHOWN_CHARS), unknown)


async def cut_errors(ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: an error answer (the SDK's too: "Method not found" says the method back in its
    data) says back at most MAX_VALUE_CHARS of its message and of each text in its data, whatever a client
    sent; the handlers cut what they say back to SHOWN_CHARS themselves (found by a review: a 5 MiB tool
    name was said back whole). What the SDK refuses before this chain runs (2026-07-28's unsupported
    protocol version) is cut as it leaves, by the transports, with the same `cut_error`."""
    try:
        return await call_next(ctx)
    except MCPError as error:
        message, data = cut_error(error.message, error.data)
        if message == error.message and data == error.data:
            raise  # as it was, its own type kept
        raise MCPError(error.code, message, data) from error


# What the SDK's gate says of a request before `initialize` (its pinned compat: the shape its validation
# of the union gave): a pydantic failure of params is a ValidationError here, never an MCPError, so this
# shape in the chain is the gate's alone.
_UNINITIALIZED = (types.INVALID_PARAMS, "Invalid request parameters", "")
BEFORE_INITIALIZE = (
    "Invalid request parameters: this connection is not initialized yet; send initialize, then "
    "notifications/initialized, first"
)


async def said_before_initialize(ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: a request before `initialize` is told so, not only "Invalid request
    parameters" (found by a first hour: a valid tools/call sent by hand on stdio got that, and nothing
    in the log; over HTTP, stateless, the same call runs)."""
    try:
        return await call_next(ctx)
    except MCPError as error:
        if (error.code, error.message, error.data) != _UNINITIALIZED:
            raise
        get_logger().warning("request before initialize", extra={"fields": {"method": cut(ctx.method, 100)}})
        raise MCPError(types.INVALID_PARAMS, BEFORE_INITIALIZE, "") from error


def _long_progress_token(request_id: str, ctx: ServerRequestContext[Any], logger: logging.Logger) -> RunResult | None:
    """The result that refuses a call whose progressToken is longer than MAX_PROGRESS_TOKEN_CHARS, which
    every progress notification sends back whole, one a second (found by a review: 40 MiB sent once,
    440 MiB sent back in 12.8 s, 4.7 s of the server's CPU); None for any other."""
    token = ctx.meta.get("progress_token") if ctx.meta is not None else None
    # An integer too (JSON parsers take 4,300 digits: found by a second look), by its digits.
    said = token if isinstance(token, str) else str(token) if isinstance(token, int) else ""
    if len(said) <= MAX_PROGRESS_TOKEN_CHARS:
        return None
    log_event(logger, logging.INFO, "call rejected", request_id, reason="progressToken too long")
    message = (
        f"_meta.progressToken is {len(said):,} characters long, more than {MAX_PROGRESS_TOKEN_CHARS}: "
        "each progress notification sends it back"
    )
    return RunResult(request_id, Status.INVALID_ARGUMENTS, message)


def _progress_reporter(ctx: ServerRequestContext[Any]) -> Callable[[Progress], Awaitable[None]]:
    async def report(progress: Progress) -> None:
        # No known total: the elapsed seconds count up, and the message says the rest.
        await ctx.session.report_progress(round(progress.elapsed, 3), None, progress.describe())

    return report


class _Server(Server[Any]):
    """The SDK's low-level server, but for what its capabilities say of resources: they are never
    subscribed to nor said changed (found by a review: serving subscriptions/listen for the tools' changes,
    the SDK said both of them at 2026-07-28). No resource of ours changes once made, and the kept streams
    a caller may read are its own: a result links each new one."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        said = super().get_capabilities(*args, **kwargs)
        if said.resources is not None:
            said.resources = said.resources.model_copy(update={"subscribe": False, "list_changed": False})
        return said


def build_server(
    config: Config,
    runner: Runner,
    logger: logging.Logger | None = None,
    *,
    metrics: Metrics | None = None,
    caller_of: CallerOf | None = None,
    tasks: Tasks | None = None,
    name_header_of: NameHeaderOf | None = None,
    code_mode: Callable[[], str] | None = None,
    after_answer: AfterAnswer | None = None,
    tool_changes: ToolChanges | None = None,
) -> Server[Any]:
    """The low-level MCP server with explicit handlers; with `tasks`, the tasks extension too;
    `code_mode`: what run_python's description says of the tools runs may call, as of now;
    `tool_changes`: who is told when that changes (`subscriptions/listen` is served with it)."""
    logger = logger or get_logger()
    handlers = Handlers(
        config,
        runner,
        logger,
        metrics=metrics,
        caller_of=caller_of,
        tasks=tasks,
        code_mode=code_mode,
        after_answer=after_answer,
        tool_changes=tool_changes,
    )
    server: Server[Any] = _Server(
        SERVER_NAME,
        version=__version__,
        title="Python Runner",
        instructions=(
            "Use run_python to execute Python code in an isolated, resource-limited one-shot process; "
            "print results to see them. "
            + (
                "Nothing persists between calls."
                if config.sessions.refused
                else 'Nothing persists between calls unless you pass session "new" and then the handle it returns.'
            )
        ),
        on_list_tools=handlers.list_tools,
        on_list_resources=handlers.list_resources,
        on_list_resource_templates=handlers.list_resource_templates,
        on_read_resource=handlers.read_resource,
        on_subscriptions_listen=tool_changes.listen if tool_changes is not None else None,
    )
    # No OpenTelemetry exporter is ever installed here; skip the per-message span work.
    server.middleware = [cut_errors, said_before_initialize]
    if handlers.view is not None:
        server.extensions[EXTENSION_ID] = {}
    # Registered as a plain request handler, not `on_call_tool`: a task's answer (CreateTaskResult,
    # `resultType: "task"`) is an extension's shape that on_call_tool's typing does not admit; the SDK
    # passes such a result through unsieved on a 2026-07-28 wire, the only one tasks are offered on.
    server.add_request_handler("tools/call", types.CallToolRequestParams, handlers.call_tool)
    if tasks is not None:
        TaskMethods(tasks, logger, caller_of, name_header_of, handlers.reads, after_answer).register(server)
    return server
