"""The tools this server offers, `run_python` and `close_session`: names, descriptions, schemas and
annotations."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from runner.config import KIB, Config, PackagesConfig
from runner.logs import log_event
from runner.protocol.schemas import (
    CLOSE_TOOL,
    RUN_TOOL,
    close_input_schema,
    close_output_schema,
    input_schema,
    output_schema,
)
from runner.protocol.view import AppView

# What the model reads before every call, so short (under ~1,200 characters with the default settings:
# tests/test_docs.py checks docs/tool.md, generated from this) and what a user imports, not every
# distribution with its version (importlib.metadata says those).
DESCRIPTION = (
    "Run Python 3 code in a fresh, isolated process; get its stdout, stderr, exit code and a status "
    "(ok, error, timeout, cpu_limit, memory_limit, output_limit, ...). Each call starts clean in "
    "{directory}, deleted afterwards. Limits: {cpu}s CPU and {mem} MiB memory{preloaded} per process, "
    "{procs} processes and threads, {fsize} MiB per file, {timeout:g}s wall clock by default (timeout, at most "
    "{max_timeout:g}s), {chars:,} characters per output stream.{readable}{importable}{returns}{sessions}"
)
RETURNS = (
    " A final expression's repr() is returned as the result. Pass input files in 'files'; files the code "
    "writes come back (up to {files_kb} KiB), matplotlib figures as PNGs (up to {images})."
)
SESSIONS = (
    ' To keep variables, imports and files between calls, pass session "new", then the handle returned; '
    "a call that fails is rolled back. Sessions end after {idle:,}s idle, {most:,}s after they began, or with "
    "close_session."
)
# What runs may read of the server's files beside their own (RUNNER_SANDBOX_READ_PATHS), bounded: the model
# would otherwise not know those paths are there (found by a first hour).
READABLE = " Also readable, read-only: {paths}."
READABLE_SHOWN = 5
# Where runs have no sandbox (`auto` found none: macOS, Windows, a Linux host without user namespaces or
# bubblewrap), the model must know that its code reaches the user's files.
UNSANDBOXED = (
    " WARNING: this server runs code WITHOUT a sandbox: the code runs as the user who started the server and "
    "can read, change and delete that user's files and reach the network; only the limits above hold. Do not "
    "run code you would not run on this machine yourself."
)
CLOSE_DESCRIPTION = (
    'End a session started by run_python with session "new": its processes, memory and files are '
    "freed at once, and its handle is unknown from then on."
)


class ToolList:
    """The tools this server offers (`tool_definitions`), made again when what run_python's description
    says of code mode's tools (`code_mode()`, as the downstream servers list them now) has changed: one
    down or slow at start is named once it has listed its tools (found by a first hour)."""

    def __init__(
        self,
        config: Config,
        *,
        sandboxed: bool = True,
        shows: tuple[str, ...] = (),
        code_mode: Callable[[], str] | None = None,
        changes: ToolChanges | None = None,
    ) -> None:
        """`changes`: who tells clients when what it says of code mode changes."""
        self._made = functools.partial(tool_definitions, config, sandboxed=sandboxed, shows=shows)
        self._code_mode, self._changes = code_mode, changes
        self._described = code_mode() if code_mode is not None else ""
        self._tools = self._made(code_mode=self._described)

    def listed(self, ctx: ServerRequestContext[Any]) -> list[types.Tool]:
        """The tools as of now, for a client's tools/list: it is told of their next change."""
        if self._changes is not None:
            self._changes.listed(ctx)
        return self.now()

    def now(self) -> list[types.Tool]:
        """The tools as of now."""
        if self._code_mode is not None:
            described = self._code_mode()
            if described != self._described:  # made again only when it changed
                self._described, self._tools = described, self._made(code_mode=described)
        return self._tools


# `subscriptions/listen` streams held at once (each an HTTP response or a stdio request left open), in
# all and by one caller (a token); over HTTP each holds one of RUNNER_HTTP_MAX_CONNECTIONS, so at most a
# quarter of those in all (found by a review: 8 listens of one caller held all 8 connections allowed).
# Past either, a listen is refused and the client lists tools when it needs them.
MAX_LISTENERS = 256
MAX_LISTENERS_PER_CALLER = 16


class ToolChanges:
    """Tells clients that the tools changed: run_python's description (`code_mode()`) names a downstream
    server's tools once it has listed them, a server down at start included. A handshake-era client
    whose connection outlives its requests (stdio's one) gets `notifications/tools/list_changed` once it
    has listed tools; a 2026-07-28 client, a `ToolsListChanged` on each `subscriptions/listen` stream it
    holds (`listen`). Made only where runs may call tools: without them the tools never change.

    `poke` (any server's listing) only wakes `tell_forever`, which tells in a task of its own: a client
    slow to read holds no downstream server's connection."""

    def __init__(
        self,
        code_mode: Callable[[], str],
        logger: logging.Logger,
        *,
        handshake: bool,
        caller_of: Callable[[object], str | None] | None = None,
        connections: int = 0,
    ) -> None:
        """`handshake`: whether a handshake-era connection outlives its requests (stdio, not stateless HTTP);
        `caller_of`: the caller (the token's name) of a request, where there are callers; `connections`:
        how many the transport holds at most (RUNNER_HTTP_MAX_CONNECTIONS), 0 where it has no such bound."""
        self._code_mode, self._log, self._handshake, self._caller_of = code_mode, logger, handshake, caller_of
        self.most = min(MAX_LISTENERS, max(1, connections // 4)) if connections else MAX_LISTENERS
        self.most_per_caller = min(MAX_LISTENERS_PER_CALLER, self.most)
        self._listening: dict[str | None, int] = {}  # streams open, by caller
        self._closed = False
        self._told = code_mode()  # what the tools say as last told (at start: as first listed)
        self._bus = InMemorySubscriptionBus()
        self._listens = ListenHandler(self._bus, max_subscriptions=self.most, max_buffered_events=8)
        self._lister: ServerSession | None = None
        self._poked = anyio.Event()

    def listed(self, ctx: ServerRequestContext[Any]) -> None:
        """A client listed the tools (tools/list): a handshake-era one is told of the next change."""
        if self._handshake and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            self._lister = ctx.session

    async def listen(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """subscriptions/listen: a stream of the tools' changes. Its acknowledgement honours the tools' alone:
        the SDK declares resources' too wherever the method is served, but no resource of ours changes
        (a kept stream is written once) and the kept streams a caller may read are its own."""
        caller = self._caller_of(ctx.request) if self._caller_of is not None and ctx.request is not None else None
        if self._closed:  # found by a review: a listen made again after the stop's close held its grace
            raise MCPError(INTERNAL_ERROR, "the server is stopping: no listen stream is opened now")
        if self._listening.get(caller, 0) >= self.most_per_caller:
            log_event(self._log, logging.INFO, "listen refused", reason="too many", caller=str(caller))
            raise MCPError(
                INTERNAL_ERROR, f"Subscription limit reached: {self.most_per_caller} listen streams at once per caller"
            )
        tools_only = types.SubscriptionFilter(tools_list_changed=params.notifications.tools_list_changed)
        self._listening[caller] = self._listening.get(caller, 0) + 1
        try:
            return await self._listens(ctx, params.model_copy(update={"notifications": tools_only}))
        finally:
            self._listening[caller] -= 1
            if not self._listening[caller]:
                del self._listening[caller]

    def poke(self) -> None:
        """A downstream server listed its tools: tell clients if what run_python says of them changed."""
        self._poked.set()

    def close(self) -> None:
        """End every listen stream (with its result: the client knows it was meant), and refuse new ones,
        as the server stops."""
        self._closed = True
        self._listens.close()

    async def tell_forever(self) -> None:
        """Tell clients of each change, until cancelled. Never raises otherwise: it runs in the server's
        own task group, and a fault of ours in telling ends that telling alone."""
        while True:
            await self._poked.wait()
            self._poked = anyio.Event()
            try:
                await self._tell()
            except Exception:
                self._log.warning("tools changed; telling clients failed", exc_info=True, extra={"fields": {}})

    async def _tell(self) -> None:
        described = self._code_mode()
        if described == self._told:
            return
        self._told = described
        log_event(self._log, logging.INFO, "tools changed; telling clients")
        await self._bus.publish(ToolsListChanged())
        if self._lister is not None:
            try:
                await self._lister.send_tool_list_changed()
            except Exception as exc:  # its connection is gone: it will list again if it comes back
                log_event(self._log, logging.DEBUG, "tools changed; client not told", error=repr(exc)[:200])
                self._lister = None


def tool_definitions(
    config: Config, *, sandboxed: bool = True, shows: tuple[str, ...] = (), code_mode: str = ""
) -> list[types.Tool]:
    """Every tool this server offers, with their hand-written schemas: `close_session` only where
    sessions may be had; `sandboxed`: whether runs are (the description warns where they are not);
    `shows`: what of the server's a run's directory holds (the isolation plan's); `code_mode`: what
    run_python's description says of the tools runs may call (none: nothing)."""
    run = tool_definition(config, sandboxed=sandboxed, shows=shows, code_mode=code_mode)
    if config.sessions.refused:
        return [run]
    return [run, close_definition()]


def close_definition() -> types.Tool:
    """`close_session`."""
    return types.Tool(
        name=CLOSE_TOOL,
        title="Close a Python session",
        description=CLOSE_DESCRIPTION,
        input_schema=close_input_schema(),
        output_schema=close_output_schema(),
        annotations=types.ToolAnnotations(
            title="Close a Python session",
            read_only_hint=False,
            destructive_hint=True,  # the session's state is gone
            idempotent_hint=True,  # closing it again changes nothing (the answer says it is unknown)
            open_world_hint=False,
        ),
    )


def tool_definition(
    config: Config, *, sandboxed: bool = True, shows: tuple[str, ...] = (), code_mode: str = ""
) -> types.Tool:
    """`run_python`, with its hand-written schemas. It says four sections of the configuration, so
    it takes the whole."""
    limits, returns, sessions, packages = config.limits, config.returns, config.sessions, config.packages_section
    return types.Tool(
        name=RUN_TOOL,
        title="Run Python",
        description=DESCRIPTION.format(
            # Empty, unless the server's own files were put in the temp directory and are bound back
            # into each sandboxed run's (`isolation.shown_in_run_directory`): then it says which.
            directory="a working directory empty but for the server's read-only " + ", ".join(shows)
            if shows
            else "an empty working directory",
            importable=_importable(packages),
            preloaded=f" (beyond what {', '.join(packages.preload)} map, when imported)" if packages.preload else "",
            returns=RETURNS.format(images=returns.max_images, files_kb=returns.max_files_bytes // KIB)
            if returns.max_returned_bytes
            else "",
            sessions=SESSIONS.format(idle=sessions.session_idle_seconds, most=sessions.session_max_seconds)
            if not sessions.refused
            else "",
            readable=_readable(config.isolation.sandbox_read_paths),
            cpu=limits.max_cpu_seconds,
            mem=limits.max_memory_mb,
            procs=limits.max_processes,
            fsize=limits.max_file_size_mb,
            timeout=limits.default_timeout,
            max_timeout=limits.max_timeout,
            chars=returns.max_output_chars,
        )
        + ("\n\n" + code_mode if code_mode else "")
        # After the code mode's paragraph, a paragraph of its own (it ends with a list).
        + ("" if sandboxed else ("\n\n" + UNSANDBOXED.lstrip() if code_mode else UNSANDBOXED)),
        input_schema=input_schema(config),
        output_schema=output_schema(),
        # The app view a host that renders MCP Apps shows beside the result (`runner.protocol.view`).
        _meta=AppView.tool_meta() if returns.app_view == "on" else None,
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


def _readable(paths: tuple[str, ...]) -> str:
    if not paths:
        return ""
    shown = ", ".join(paths[:READABLE_SHOWN])
    more = f" and {len(paths) - READABLE_SHOWN} more" if len(paths) > READABLE_SHOWN else ""
    return READABLE.format(paths=shown + more)


def _importable(packages: PackagesConfig) -> str:
    if not packages.package_modules and not packages.wheelhouse_modules:
        return " Standard library only."
    found = " Importable: the standard library"
    if packages.package_modules:
        found += ", " + ", ".join(packages.package_modules)
    if packages.wheelhouse_modules:
        # What the wheelhouse's lock asked for; what they need comes with them.
        wheelhouse = ", ".join(packages.wheelhouse_modules)
        found += "; installed on first import from a vetted offline wheelhouse: " + wheelhouse
    return found + "."
