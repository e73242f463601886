"""One downstream MCP server, held connected: started (stdio: as a child of ours, its stderr in our log
under its name) or reached (Streamable HTTP, with its headers) with the official client, its tools
listed at start and again when it says they changed, reconnected with backoff when it goes, and
stopped with the server.

Everything it answers is hostile input to us: a listing is taken through the SDK's models and kept
bounded (`MAX_TOOLS`), a result is bounded by the run's budget where the broker reads it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
from mcp import Client, MCPError, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import REQUEST_TIMEOUT

from runner.config import Downstream, python_name
from runner.logs import log_event

MAX_TOOLS = 1000  # a listing's most: more are left out
MAX_PAGES = 100
CONNECT_SECONDS = 30.0  # a start (or a reconnect) that takes longer has failed
PING_SECONDS = 10.0  # how often a quiet connection is checked
BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # waits between reconnections, the last repeated
MAX_STDERR_LINE = 2000
MARK_VARIABLE = "RUNNER_TOOL_SERVER_MARK"


class Down(Exception):
    """The server cannot be reached now; the message says why."""


class TooSlow(Down):
    """The server did not answer within the run's time left (the call is cancelled there)."""


class Connection:
    """One downstream server's connection (`hold` keeps it), its allowed tools as last listed."""

    def __init__(self, server: Downstream, logger: logging.Logger) -> None:
        self.server = server
        self._log = logger
        # What the file gives it to hold (credentials): never in a reason it is down, an error or the log.
        self._secrets = sorted((value for _, value in (*server.env, *server.headers) if len(value) >= 4), key=len)[::-1]
        self.tools: dict[str, types.Tool] = {}  # every tool it listed, by name
        self.down = "not started yet"  # why it cannot be called now; "" while it can
        self.listed = anyio.Event()  # set once a first attempt to connect and list has ended
        self._client: Client | None = None
        # A stdio server's process is told by this mark in its environment, for the stray sweep to leave
        # it and its session alone; `starting` while it is being started (before its exec, no mark yet).
        self.mark = ""
        self.starting = False
        self._lost = anyio.Event()
        self._relist = anyio.Event()

    def python_names(self) -> dict[str, str]:
        """Each allowed tool's name in `mcp_tools`, by its own: one whose Python name another tool (first
        by name) has, or that would be the server object's own (``__class__``, ``_mcp...``), is left out."""
        named: dict[str, str] = {}
        taken: set[str] = set()
        for name in sorted(self.allowed()):
            made = python_name(name)
            if made in taken or made.startswith(("__", "_mcp")):
                continue
            taken.add(made)
            named[name] = made
        return named

    def allowed(self) -> dict[str, types.Tool]:
        """The tools runs may call, of those it listed."""
        if self.server.every_tool:
            return dict(self.tools)
        return {name: tool for name, tool in self.tools.items() if name in self.server.tools}

    async def hold(self) -> None:
        """Connect, list, and stay connected until cancelled: reconnect with backoff whenever the server
        goes. Never raises but for cancellation."""
        failures = 0
        while True:
            try:
                # The start and the first listing within CONNECT_SECONDS; then no deadline.
                with anyio.CancelScope(deadline=anyio.current_time() + CONNECT_SECONDS) as starting:
                    async with self._connected() as client:
                        failures = 0
                        await self._list(client)
                        starting.deadline = math.inf
                        self._client, self.down = client, ""
                        self.listed.set()
                        await self._watch(client)
                if starting.cancelled_caught:
                    self.down = f"not started and listed within {CONNECT_SECONDS:g} s"
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:  # whatever the server or the SDK raised: it is down
                self.down = self.scrubbed(_why(exc))
            finally:
                self._client = None
            if not self.down:
                self.down = "its connection ended"
            self.listed.set()
            log_event(self._log, logging.WARNING, "tool server down", server=self.server.name, error=self.down[:300])
            await anyio.sleep(BACKOFF[min(failures, len(BACKOFF) - 1)])
            failures += 1

    def scrubbed(self, text: str) -> str:
        """`text` with every credential the file gives this server replaced by ``***``."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    async def call(self, tool: str, arguments: dict[str, Any], seconds: float) -> types.CallToolResult:
        """Call `tool`; `Down` if the server is down or does not answer within `seconds` (the run's
        time left; then the call is cancelled there: the SDK sends notifications/cancelled)."""
        client = self._client
        if client is None:
            raise Down(f"the server is down: {self.down}")
        deadline = anyio.current_time() + seconds
        try:
            # The SDK's own clock, not a scope of ours around it: one cancel scope fewer per call.
            return await client.call_tool(tool, arguments, read_timeout_seconds=seconds)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            # The SDK's timeout (it has sent notifications/cancelled), not the same code from the server.
            if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT and anyio.current_time() >= deadline:
                raise TooSlow(f"no answer within {seconds:.1f} s (the run's time left)") from None
            if _connection_failed(exc):
                self._lost.set()
                raise Down(f"the connection failed: {self.scrubbed(_why(exc))}") from None
            raise

    @contextlib.asynccontextmanager
    async def _connected(self) -> AsyncIterator[Client]:
        server = self.server
        self._lost, self._relist = anyio.Event(), anyio.Event()
        async with contextlib.AsyncExitStack() as stack:
            if server.url:
                http = create_mcp_http_client(headers=dict(server.headers))
                await stack.enter_async_context(http)
                transport: Any = streamable_http_client(server.url, http_client=http)
            else:
                errlog = await self._stderr_to_log(stack)
                # The SDK starts it in a session of its own and keeps its pid: it is found by this mark.
                mark = secrets.token_hex(16)
                parameters = StdioServerParameters(
                    command=server.command,
                    args=list(server.args),
                    env={**dict(server.env), MARK_VARIABLE: mark},
                    cwd=server.cwd or None,
                )
                self.mark, self.starting = mark, True
                stack.callback(self._forget_mark)
                try:
                    streams = await stack.enter_async_context(stdio_client(parameters, errlog=errlog))
                finally:
                    # Started (its exec done: the mark is in its environment) or failed: the stray sweep
                    # need not wait for it any more.
                    self.starting = False
                transport = _already_open(streams)
            client = Client(transport, cache=None, message_handler=self._on_message)
            await stack.enter_async_context(client)
            yield client

    def _forget_mark(self) -> None:
        self.mark, self.starting = "", False

    async def _stderr_to_log(self, stack: contextlib.AsyncExitStack) -> Any:
        """A file for the server's stderr whose lines go to our log under the server's name."""
        read_end, write_end = os.pipe()
        errlog = os.fdopen(write_end, "w")
        stack.callback(errlog.close)
        tg = await stack.enter_async_context(anyio.create_task_group())
        stack.push_async_callback(_cancel_soon, tg)
        tg.start_soon(self._log_lines, read_end)
        return errlog

    async def _log_lines(self, fd: int) -> None:
        os.set_blocking(fd, False)
        pending = b""
        try:
            while True:
                await anyio.wait_readable(fd)
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if len(pending) > MAX_STDERR_LINE:
                    lines.append(pending)
                    pending = b""
                for line in lines:
                    text = self.scrubbed(line[:MAX_STDERR_LINE].decode("utf-8", "replace").rstrip())
                    if text:
                        log_event(self._log, logging.INFO, "tool server stderr", server=self.server.name, line=text)
        finally:
            os.close(fd)

    async def _list(self, client: Client) -> None:
        listed: dict[str, types.Tool] = {}
        cursor: str | None = None
        for _ in range(MAX_PAGES):  # a server whose cursor never ends is listed this far
            with anyio.fail_after(CONNECT_SECONDS):
                page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                if len(listed) < MAX_TOOLS:
                    listed[tool.name] = tool
            cursor = page.next_cursor
            if not cursor or len(listed) >= MAX_TOOLS:
                break
        self.tools = listed
        log_event(
            self._log,
            logging.INFO,
            "tool server listed",
            server=self.server.name,
            tools=len(listed),
            allowed=len(self.allowed()),
        )

    async def _watch(self, client: Client) -> None:
        """Until the connection is lost: re-list when the server says its tools changed, ping when quiet."""
        while not self._lost.is_set():
            with anyio.move_on_after(PING_SECONDS):
                await _first(self._lost.wait, self._relist.wait)
            if self._lost.is_set():
                return
            if self._relist.is_set():
                self._relist = anyio.Event()
                await self._list(client)
                continue
            with anyio.fail_after(CONNECT_SECONDS):
                await client.send_ping()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self._lost.set()
        elif isinstance(message, types.ToolListChangedNotification):
            self._relist.set()


@contextlib.asynccontextmanager
async def _already_open(streams: Any) -> AsyncIterator[Any]:
    """A transport for the client of streams its caller opened (and closes)."""
    yield streams


async def _first(*waits: Any) -> None:
    """Return when the first of `waits` returns."""
    async with anyio.create_task_group() as tg:

        async def one(wait: Any) -> None:
            await wait()
            tg.cancel_scope.cancel()

        for wait in waits:
            tg.start_soon(one, wait)


async def _cancel_soon(tg: anyio.abc.TaskGroup) -> None:
    tg.cancel_scope.cancel()


def _connection_failed(exc: BaseException) -> bool:
    return isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream | OSError)


def _why(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _why(inner)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
