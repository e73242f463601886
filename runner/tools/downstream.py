"""One downstream MCP server, held connected: started (stdio: as a child of ours, its stderr in our log
under its name) or reached (Streamable HTTP, with its headers) with the official client, its tools
listed at start and again when it says they changed, reconnected with backoff when it goes, and
stopped with the server.

Everything it sends is hostile input to us: a listing is taken through the SDK's models and kept
bounded (`runner.tools.messages`: `MAX_TOOLS`, `MAX_LISTING_BYTES`, `kept_tool`), a result is checked against its
output schema within bounds (`SchemaCheck`) and bounded by the run's budget where the broker reads it,
its own requests to us are rationed (`Rationed`), its stderr lines too, an HTTP server's bodies and
GETs are bounded (`runner.tools.streamable_http`), and why it is down is cut short.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
from mcp import Client, MCPError, types
from mcp.client.stdio import StdioServerParameters
from mcp.shared.message import SessionMessage
from mcp.types import CONNECTION_CLOSED, INTERNAL_ERROR, METHOD_NOT_FOUND, REQUEST_TIMEOUT

from runner.config import Downstream, python_name
from runner.config.disk import HELD_VARIABLE
from runner.config.settings import MARK_VARIABLE
from runner.logs import log_event
from runner.rates import Rate
from runner.tools.credentials import Credentials
from runner.tools.messages import MAX_LISTING_BYTES, MAX_TOOLS, kept_tool, listed_bytes
from runner.tools.schemas import SchemaCheck
from runner.tools.stderr import stderr_to_log
from runner.tools.stdio import stdio_transport
from runner.tools.streamable_http import http_client, streamable_http_client

MAX_PAGES = 100
MAX_RELIST_PAGES = 10  # pages a call's re-listing of its tool reads at most (`_relist_tool`)
MAX_DOWN_CHARS = 300  # why a server is down, as runs and the log see it
# A start (or a reconnect) and its first listing that take longer have failed; each that failed so gives
# the next twice as long, to 16 times (found by a first hour: a server 40 s to start, `npx -y` fetching its
# package say, was killed at 30 s at every try and never came up).
CONNECT_SECONDS = 30.0
PING_SECONDS = 10.0  # how often a quiet connection is checked
BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # waits between reconnections, the last repeated
RELIST_SECONDS = 2.0  # between a server's listings, at least
HEALTHY_SECONDS = 30.0  # a connection up this long starts the backoff over when it goes
# What the SDK says where it knows no more: of a stdio server gone (its stderr's last line may say
# why), of an HTTP server's error status (`Hooks` saw it).
SAID_NO_MORE = frozenset(
    {(CONNECTION_CLOSED, "Connection closed"), (INTERNAL_ERROR, "Server returned an error response")}
)
# Its requests to us (ping; the others are refused) taken as a rate (a second's worth at once, then so
# many a second); the rest dropped, the dropped counted.
REQUESTS = (20, 10.0)
MOST_ANSWERING = 8  # its requests taken and not answered yet, at most: the rest dropped
MAX_ID_CHARS = 256  # a request's id, at most: one longer is dropped
# Its notifications, and its answers to requests we did not make, are taken at a rate, not dropped (a
# list_changed may be among them): past it, its stream waits unread (and the server with it, once its
# pipe or socket is full). Each costs us a parse and a dispatch on the event loop: a flood of them kept
# it 85% busy and made every brokered call 2-5x slower.
NOTIFICATIONS = (1000, 200.0)
TOLD = (1, 0.1)  # how often what was dropped is logged
# The event loop's clock, `anyio.current_time()`'s on asyncio, read without anyio's lookup of the running
# backend: a brokered call reads it four times on its way.
loop_time = time.monotonic


class Down(Exception):
    """The server cannot be reached now; the message says why."""


class TooSlow(Down):
    """The server did not answer within the run's time left (the call is cancelled there)."""


class PythonNames:
    """The Python names of a listing's allowed tools (`Connection.python_names`), made once per listing (a
    run may ask with each refused call: found by a review, 1,000 tools made again for each of a run's
    2,000 frames took 2.7 s of the event loop). One whose Python name another tool (first by name) has,
    or that would be the server object's own (``__class__``, ``_mcp...``), is left out."""

    __slots__ = ("_of", "by_python", "named")

    def __init__(self) -> None:
        self._of: dict[str, types.Tool] | None = None
        self.named: dict[str, str] = {}  # by the tool's own name
        self.by_python: dict[str, str] = {}  # the other way round

    def of(self, listed: dict[str, types.Tool], allowed: Callable[[], dict[str, types.Tool]]) -> PythonNames:
        """These names for the listing `listed`, whose allowed tools are `allowed()`."""
        if listed is not self._of:
            named: dict[str, str] = {}
            by_python: dict[str, str] = {}
            for name in sorted(allowed()):
                made = python_name(name)
                if made in by_python or made.startswith(("__", "_mcp")):
                    continue
                named[name], by_python[made] = made, name
            self._of, self.named, self.by_python = listed, named, by_python
        return self


class Connection:
    """One downstream server's connection (`hold` keeps it), its allowed tools as last listed."""

    def __init__(self, server: Downstream, logger: logging.Logger, most_bytes: int = 16 << 20, held: str = "") -> None:
        """`most_bytes`: the largest answer an HTTP server's body, or a stdio server's line, may hold (a
        run passes no more). `held`: ours (`runner.execution.leftovers`), for a stdio server's environment."""
        self.server = server
        self._held = {HELD_VARIABLE: held} if held else {}
        self._log, self._most_bytes = logger, most_bytes
        self.credentials = Credentials(server)  # what the file gives it to hold
        self.tools: dict[str, types.Tool] = {}  # every tool it listed, by name
        self._names = PythonNames()
        self.down = "not started yet"  # why it cannot be called now; "" while it can
        self.listed = anyio.Event()  # set once a first attempt to connect and list has ended
        self._client: Client | None = None
        # A stdio server's process is told by this mark in its environment, for the stray sweep to leave
        # it and its session alone; `starting` while it is being started (before its exec, no mark yet).
        self.mark, self.starting = "", False
        self._lost = anyio.Event()
        self._last_said: list[str] = []  # a stdio server's last stderr line, an HTTP one's error status
        self._fault = ""  # what the connection's transport said was wrong, when it was lost so
        self._relist = anyio.Event()
        self._output_checks: dict[str, tuple[Any, SchemaCheck | None]] = {}  # by tool, per listed schema
        self.on_listed: Callable[[], None] = lambda: None  # after each listing (the broker's)

    def python_names(self) -> dict[str, str]:
        """Each allowed tool's name in `mcp_tools`, by its own (`PythonNames`)."""
        return self._names.of(self.tools, self.allowed).named

    def named_in_python(self, name: str) -> str:
        """The allowed tool whose Python name is `name`, or ''."""
        return self._names.of(self.tools, self.allowed).by_python.get(name, "")

    def allowed(self) -> dict[str, types.Tool]:
        """The tools runs may call, of those it listed."""
        if self.server.every_tool:
            return dict(self.tools)
        return {name: tool for name, tool in self.tools.items() if name in self.server.tools}

    async def hold(self) -> None:
        """Connect, list, and stay connected until cancelled: reconnect with backoff whenever the server
        goes. Never raises but for cancellation."""
        failures = slow = 0
        while True:
            up_since, given = math.inf, CONNECT_SECONDS * 2 ** min(slow, 4)
            try:
                # The start and the first listing within what it is given; then no deadline.
                with anyio.CancelScope(deadline=anyio.current_time() + given) as starting:
                    async with self._connected() as client:
                        up_since = anyio.current_time()
                        await self._list(client, math.inf)  # within the start's `given`
                        starting.deadline, slow = math.inf, 0
                        self._client, self.down = client, ""
                        self.listed.set()
                        await self._watch(client)
                if starting.cancelled_caught:
                    self.down = self._fault or f"not started and listed within {given:g} s"
                    slow += 1
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:  # whatever the server or the SDK raised: it is down
                # What its transport said was wrong first, if it did (the SDK's error followed from it).
                self.down = self._fault or self._reason(exc, gone=True)
            finally:
                self._client = None
            if not self.down:
                self.down = self._fault or "its connection ended"
            self.listed.set()
            log_event(self._log, logging.WARNING, "tool server down", server=self.server.name, error=self.down)
            # A server that dies right after it starts is not up: its backoff grows.
            if anyio.current_time() - up_since >= HEALTHY_SECONDS:
                failures = 0
            await anyio.sleep(BACKOFF[min(failures, len(BACKOFF) - 1)])
            failures += 1

    def _reason(self, exc: BaseException, gone: bool = False) -> str:
        """Why `exc` happened, in a line, credentials masked before it is cut; once the connection has
        `gone`, where the SDK knows no more, with what the server said last: a stdio server's last stderr
        line (why it could not start, say), an HTTP server's error status."""
        why = _why(exc)
        inner = _inner(exc)
        if gone and self._last_said and isinstance(inner, MCPError) and (inner.code, str(inner)) in SAID_NO_MORE:
            said = self._last_said[0]
            why = f"{why}; {said}" if self.server.url else f"{why}; its stderr's last line: {said}"
        return self.credentials.scrubbed(why)[:MAX_DOWN_CHARS]

    def _answered(self, said: str) -> None:
        """An HTTP server's error status (`Hooks`): what `_reason` adds to the SDK's stand-in for it,
        masked, then cut to its status and 60 characters of its reason."""
        self._last_said[:] = [self.credentials.scrubbed(said)[: len("it answered HTTP 000 ") + 60]]

    async def call(self, tool: str, arguments: dict[str, Any], seconds: float) -> types.CallToolResult:
        """Call `tool`; `Down` if the server is down or does not answer within `seconds` (the run's
        time left; then the call is cancelled there: the SDK sends notifications/cancelled)."""
        client, lost = self._client, self._lost
        if client is None:
            raise Down(f"the server is down: {self.down}")
        deadline = loop_time() + seconds
        try:
            # The SDK's own clock, not a scope of ours around it: one cancel scope fewer per call.
            return await client.call_tool(tool, arguments, read_timeout_seconds=seconds)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            # The SDK's timeout (it has sent notifications/cancelled), not the same code from the server.
            if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT and loop_time() >= deadline:
                raise TooSlow(f"no answer within {seconds:.1f} s (the run's time left)") from None
            # The SDK's stdio session ends its calls so when its process is gone; over HTTP, a call's
            # own stream that failed is said the same way, and the connection may serve on. One that
            # failed once the connection was lost (an HTTP 404, say) failed for that.
            closed = isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED and not self.server.url
            if _connection_failed(exc) or closed or lost.is_set():
                lost.set()
                raise Down(f"the connection failed: {self._fault or self._reason(exc)}") from None
            raise

    @contextlib.asynccontextmanager
    async def _connected(self) -> AsyncIterator[Client]:
        server = self.server
        self._lost, self._relist, self._fault = anyio.Event(), anyio.Event(), ""
        async with contextlib.AsyncExitStack() as stack:
            self._last_said = []  # this connection's
            if server.url:
                # What the server sends bounded, and a 404 seen (`http_client`): the connection lost.
                http = http_client(dict(server.headers), self._most_bytes, self._gone, self._answered)
                await stack.enter_async_context(http)
                transport: Any = streamable_http_client(server.url, http, self._most_bytes)
            else:
                errlog = await stderr_to_log(stack, self._log, server.name, self.credentials.secrets, self._last_said)
                # The SDK starts it in a session of its own and keeps its pid: it is found by this mark.
                mark = secrets.token_hex(16)
                parameters = StdioServerParameters(
                    command=server.command,
                    args=list(server.args),
                    env={**dict(server.env), MARK_VARIABLE: mark, **self._held},
                    cwd=server.cwd or None,
                    # A byte that is not UTF-8 makes its line a parse error (and a reconnect), not a
                    # reader that ends while the session waits on.
                    encoding_error_handler="replace",
                )
                self.mark, self.starting = mark, True
                stack.callback(self._forget_mark)
                try:
                    streams = await stack.enter_async_context(stdio_transport(parameters, errlog, self._most_bytes))
                finally:
                    # Started (its exec done: the mark is in its environment) or failed: the stray sweep
                    # need not wait for it any more.
                    self.starting = False
                transport = _already_open(streams)
            client = Client(_rationed(transport, self._log, server.name), cache=None, message_handler=self._on_message)
            await stack.enter_async_context(client)
            # The SDK's own check of a result against the tool's output schema runs every keyword (a
            # `pattern` that backtracks, `$ref`s that expand exponentially) on the event loop.
            client.session.validate_tool_result = self._check_result  # type: ignore[method-assign]
            # And its re-listing of a tool a 2026-07-28 server says a call's headers do not match (the
            # spec's recovery, then one resend): up to 100 pages, outside our listing's bounds (found by a
            # review: a server answering every call so, each page of new names, grew us 1 GiB a call).
            client._relist_tool = functools.partial(_relist_tool, client, self)  # type: ignore[method-assign]
            yield client

    def _forget_mark(self) -> None:
        self.mark, self.starting = "", False

    async def _list(self, client: Client, seconds: float = CONNECT_SECONDS) -> None:
        listed: dict[str, types.Tool] = {}
        cursor: str | None = None
        size = 0
        for _ in range(MAX_PAGES):  # a server whose cursor never ends is listed this far
            pages: list[types.ListToolsResult] = []
            # Given up once the connection is lost: its answer may have been the line that broke it,
            # and the SDK would wait for another.
            with anyio.fail_after(seconds):
                await _first(functools.partial(_fetch_page, client, cursor, pages), self._lost.wait)
            if not pages:
                raise Down(self._fault or "its connection was lost while its tools were listed")
            page = pages[0]
            _forget_listing(client.session, listed, page)
            for tool in page.tools:
                size += listed_bytes(tool)
                if len(listed) < MAX_TOOLS and size <= MAX_LISTING_BYTES:
                    listed[tool.name] = kept_tool(tool, self.credentials)
            cursor = page.next_cursor
            size += len(cursor or "")  # a cursor of megabytes is no less to hold
            if not cursor or len(listed) >= MAX_TOOLS or size > MAX_LISTING_BYTES:
                break
        self.tools = listed
        self._output_checks.clear()
        said: dict[str, Any] = {"server": self.server.name, "tools": len(listed), "allowed": len(self.allowed())}
        log_event(self._log, logging.INFO, "tool server listed", **said)
        self.on_listed()

    async def _watch(self, client: Client) -> None:
        """Until the connection is lost: re-list when the server says its tools changed, ping when quiet."""
        relist_at = anyio.current_time() + RELIST_SECONDS
        while not self._lost.is_set():
            with anyio.move_on_after(PING_SECONDS):
                await _first(self._lost.wait, self._relist.wait)
            if self._lost.is_set():
                return
            if self._relist.is_set():
                # At most one listing each RELIST_SECONDS, the notices that come meanwhile one: a
                # server that said so after each listing had us list it without end.
                with anyio.move_on_after(relist_at - anyio.current_time()):
                    await self._lost.wait()
                    return
                self._relist = anyio.Event()
                await self._list(client)
                relist_at = anyio.current_time() + RELIST_SECONDS
                continue
            try:
                with anyio.fail_after(CONNECT_SECONDS):
                    await client.session.send_ping()
            except MCPError as exc:
                if exc.code != METHOD_NOT_FOUND:
                    raise
                # An answer all the same (2026-07-28 has no ping): the server is alive.

    async def _check_result(self, name: str, result: types.CallToolResult) -> None:
        """What the SDK's `validate_tool_result` checks, within bounds (`SchemaCheck`): a tool with an
        output schema returns structured content that matches it. RuntimeError if not."""
        tool = self.tools.get(name)
        schema = tool.output_schema if tool is not None else None
        if schema is None:
            return
        if result.structured_content is None:
            raise RuntimeError("the tool has an output schema but returned no structured content")
        kept = self._output_checks.get(name)
        if kept is None or kept[0] is not schema:
            kept = self._output_checks[name] = (schema, SchemaCheck.of(schema))
        mismatch = kept[1].mismatch(result.structured_content) if kept[1] is not None else ""
        if mismatch:
            raise RuntimeError(f"its structured content does not match its output schema: {mismatch}")

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):  # a line that did not parse, or too long
            self._fault = self._fault or self._reason(message)
            self._lost.set()
        elif isinstance(message, types.ToolListChangedNotification):
            self._relist.set()

    def _gone(self, why: str) -> None:
        """An HTTP 404 (`SESSION_GONE`, `ENDPOINT_GONE`): lost, made again (a new session) after the backoff."""
        self._fault = self._fault or why
        self._lost.set()


@contextlib.asynccontextmanager
async def _already_open(streams: Any) -> AsyncIterator[Any]:
    """A transport for the client of streams its caller opened (and closes)."""
    yield streams


@contextlib.asynccontextmanager
async def _rationed(transport: Any, logger: logging.Logger, name: str) -> AsyncIterator[Any]:
    """`transport`, what its server sends us rationed (`Rationed`)."""
    async with transport as (read_stream, write_stream):
        rationed = Rationed(read_stream, logger, name)
        yield rationed, _Asking(write_stream, rationed)


class Rationed(anyio.abc.ObjectReceiveStream[Any]):
    """What a server sends us, its own requests rationed (`REQUESTS`, at most `MOST_ANSWERING` of them
    unanswered, none with an id past `MAX_ID_CHARS`): the SDK starts a task to answer each, and a server
    that sends them without end and reads no answer would have them pile up; and its notifications, and
    answers past those we asked for (`owed`), taken at a rate (`NOTIFICATIONS`)."""

    def __init__(self, inner: Any, logger: logging.Logger, name: str) -> None:
        self._inner = inner
        self._contexts = hasattr(inner, "last_context")
        self._rate, self._told = Rate(*REQUESTS), Rate(*TOLD)
        self._notes, self._notes_told = Rate(*NOTIFICATIONS), Rate(*TOLD)
        self.owed = 0  # our requests it has not answered yet (`_Asking`)
        self.answering = 0  # its requests taken that we have not answered yet (`_Asking`)
        self._dropped = 0
        self._log = logger
        self._name = name

    @property
    def last_context(self) -> Any:  # the SDK's dispatcher reads its transport's context through this
        # Whether there is one is known from the start: getattr on a stream without one (stdio's) raised
        # and caught an AttributeError for every message.
        return self._inner.last_context if self._contexts else None

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            message = item.message if isinstance(item, SessionMessage) else None
            if isinstance(message, types.JSONRPCResponse | types.JSONRPCError) and self.owed > 0:
                self.owed -= 1
                return item
            if not isinstance(message, types.JSONRPCRequest):
                if message is not None:  # a notification, or an answer we did not ask for
                    await self._turn()
                return item
            # Each request taken is held, its id with it, until our answer is written, which a server
            # that reads none never lets be: so few at once, and no long id (20 MiB ids, unread: 4 GB
            # in 30 s).
            short = not isinstance(message.id, str) or len(message.id) <= MAX_ID_CHARS
            if self._rate.take() and short and self.answering < MOST_ANSWERING:
                self.answering += 1
                return item
            self._dropped += 1
            if self._told.take():
                what, dropped = "tool server requests dropped", self._dropped
                log_event(self._log, logging.WARNING, what, server=self._name, requests=dropped)
                self._dropped = 0
            await self._turn()  # dropped at a rate too: each cost a parse all the same

    async def _turn(self) -> None:
        """Wait for a notification's turn (`NOTIFICATIONS`)."""
        while not self._notes.take():
            if self._notes_told.take():
                log_event(self._log, logging.WARNING, "tool server messages slowed", server=self._name)
            await anyio.sleep(1 / NOTIFICATIONS[1])

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Asking(anyio.abc.ObjectSendStream[Any]):
    """What we send a server, each request counted as an answer it owes us (`Rationed.owed`), each
    answer as one of its requests answered (`Rationed.answering`)."""

    def __init__(self, inner: Any, rationed: Rationed) -> None:
        self._inner = inner
        self._rationed = rationed

    async def send(self, item: Any) -> None:
        message = item.message if isinstance(item, SessionMessage) else None
        if isinstance(message, types.JSONRPCRequest):
            self._rationed.owed += 1
        elif isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            # Counted once written: a server that reads no answer keeps its requests held.
            await self._inner.send(item)
            self._rationed.answering = max(0, self._rationed.answering - 1)
            return
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _relist_tool(client: Client, connection: Connection, name: str) -> None:
    """The SDK's re-listing until a page lists `name`, at most MAX_RELIST_PAGES, each page's schemas
    forgotten as our listing's are (`_forget_listing`); the call's resend then says what it says."""
    cursor: str | None = None
    for _ in range(MAX_RELIST_PAGES):
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        _forget_listing(client.session, connection.tools, page)
        cursor = page.next_cursor
        if cursor is None or any(tool.name == name for tool in page.tools[:MAX_TOOLS]):
            return


def _forget_listing(session: Any, listed: dict[str, types.Tool], page: types.ListToolsResult) -> None:
    """What the SDK's session keeps of each listing, past what we keep: every output schema of every tool
    ever listed on a page with a cursor (it prunes only on a listing of one page), which a server listing
    new names at each `list_changed` grew without bound (found by a review: 131 -> 996 MiB in 58 s). Its
    output schemas and their validators serve only its own check of a result, which ours replaces
    (`Connection._check_result`); its header maps (2026-07-28's `Mcp-Param-*`) are kept for the tools we
    keep, and this page's."""
    session._tool_output_schemas.clear()
    session._tool_output_validators.clear()
    names = {*listed, *(tool.name for tool in page.tools[:MAX_TOOLS])}
    maps = session._x_mcp_header_maps
    for name in [name for name in maps if name not in names]:
        del maps[name]


async def _fetch_page(client: Client, cursor: str | None, pages: list[types.ListToolsResult]) -> None:
    pages.append(await client.list_tools(cursor=cursor))


async def _first(*waits: Any) -> None:
    """Return when the first of `waits` returns."""
    async with anyio.create_task_group() as tg:

        async def one(wait: Any) -> None:
            await wait()
            tg.cancel_scope.cancel()

        for wait in waits:
            tg.start_soon(one, wait)


def _connection_failed(exc: BaseException) -> bool:
    return isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream | OSError)


def _inner(exc: BaseException) -> BaseException:
    """The first exception a group holds, however deep (the SDK's task groups nest theirs)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _why(exc: BaseException) -> str:
    exc = _inner(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
