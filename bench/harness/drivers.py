"""How the harness talks to a server, and what one call returned (CallResult, judged by check_result).

Two client modes: "raw" (RawConn), hand-written JSON-RPC lines written to the server's stdin and
read back from its stdout (pre-encoded requests, responses matched by id), which takes the client's
own cost out and knows the server's pid and spawn time; "client" (ClientConn), the official SDK
client, `mcp.Client` over the SDK's stdio transport, `mode="legacy"`. Both answer ping() and
call(); open_conn opens either kind, run_concurrently drives a call at a given concurrency.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .procfs import children_of
from .servers import Launch, ServerSpec
from .workloads import CALL_TIMEOUT

PROTOCOL_VERSION = "2025-11-25"
BIG_LINE = 16 * 1024 * 1024  # responses longer than this are counted, not kept (the naive flood answer)


class ServerGone(Exception):
    """The server closed its stdout (exited) while a request was outstanding."""


@dataclass
class CallResult:
    """One tools/call (or ping) as seen by the harness."""

    latency: float
    ok: bool
    problem: str = ""
    run_duration: float | None = None  # the real server's own duration_seconds
    structured: dict[str, Any] | None = None
    size: int = 0


def check_result(
    spec: ServerSpec, result: dict[str, Any] | None, expected: str
) -> tuple[bool, str, dict[str, Any] | None]:
    """Whether a tools/call result is the expected successful output; what went wrong if not."""
    if result is None:
        return False, "response too large to parse", None
    structured = result.get("structuredContent")
    text = "".join(block.get("text", "") for block in result.get("content", []) if isinstance(block, dict))
    if result.get("isError"):
        return False, f"isError: {text[:200]!r}", structured
    if spec.kind == "runner":
        if not structured or structured.get("status") != "ok":
            return False, f"status {structured and structured.get('status')!r}", structured
        output = structured.get("stdout", "")
    else:
        output = text
    if output.strip() != expected:
        return False, f"unexpected output {output[:120]!r}", structured
    return True, "", structured


# --- raw JSON-RPC over the server's stdio ------------------------------------------------------------


class RawConn:
    """A server process driven with hand-written JSON-RPC lines; responses matched by id."""

    mode = "raw"

    def __init__(self, spec: ServerSpec, proc: asyncio.subprocess.Process, spawned_at: float, log: Path) -> None:
        self.spec = spec
        self.proc = proc
        self.pid = proc.pid
        self.spawned_at = spawned_at
        self.log = log
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[tuple[float, dict[str, Any] | None, int]]] = {}
        self._encoded: dict[str, bytes] = {}
        self._reader = asyncio.create_task(self._read_loop())
        self.initialized_at: float | None = None

    @classmethod
    async def start(
        cls, spec: ServerSpec, launch: Launch, scenario: str, extra: dict[str, str] | None = None
    ) -> RawConn:
        """Start the server; nothing is sent yet."""
        log = launch.log_path(spec, scenario)
        with open(log, "ab") as errlog:  # noqa: ASYNC230 (a local log file for the child's stderr)
            spawned_at = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                *spec.argv(launch.python),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=errlog,
                cwd=launch.root_of(spec),
                env=launch.env(spec, extra),
                limit=BIG_LINE,
            )
        return cls(spec, proc, spawned_at, log)

    async def _read_loop(self) -> None:
        assert self.proc.stdout is not None
        buffer = bytearray()
        skipping_head: bytes | None = None  # head of an oversized line being skipped
        skipped = 0
        try:
            while True:
                chunk = await self.proc.stdout.read(1 << 20)
                if not chunk:
                    break
                now = time.perf_counter()
                start = 0
                while True:
                    newline = chunk.find(b"\n", start)
                    piece = chunk[start:] if newline < 0 else chunk[start:newline]
                    if skipping_head is not None:
                        skipped += len(piece)
                    else:
                        buffer += piece
                        if len(buffer) > BIG_LINE:
                            skipping_head, skipped = bytes(buffer[:4096]), len(buffer)
                            buffer.clear()
                    if newline < 0:
                        break
                    if skipping_head is not None:
                        self._dispatch_big(skipping_head, skipped + 1, now)
                        skipping_head, skipped = None, 0
                    else:
                        self._dispatch(bytes(buffer), now)
                        buffer.clear()
                    start = newline + 1
        finally:
            code = await self.proc.wait()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ServerGone(f"{self.spec.label} exited with status {code}; see {self.log}"))
            self._pending.clear()

    def _dispatch(self, line: bytes, now: float) -> None:
        if not line.strip():
            return
        message = json.loads(line)
        if "method" in message or "id" not in message:
            return  # a notification (progress, log) or a request from the server: not ours to time
        future = self._pending.pop(message["id"], None)
        if future is not None and not future.done():
            future.set_result((now, message, len(line) + 1))

    def _dispatch_big(self, head: bytes, size: int, now: float) -> None:
        found = re.search(rb'"id"\s*:\s*(\d+)', head)
        if found is None:
            return
        future = self._pending.pop(int(found.group(1)), None)
        if future is not None and not future.done():
            future.set_result((now, None, size))

    async def _send(self, body: bytes) -> tuple[float, dict[str, Any] | None, int, float]:
        """Write `{"jsonrpc":"2.0","id":N,<body>}`; return (received at, message, size, sent at)."""
        assert self.proc.stdin is not None
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[tuple[float, dict[str, Any] | None, int]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        line = b'{"jsonrpc":"2.0","id":' + str(request_id).encode() + b"," + body + b"}\n"
        sent = time.perf_counter()
        self.proc.stdin.write(line)
        await self.proc.stdin.drain()
        received, message, size = await future
        return received, message, size, sent

    async def request(self, method: str, params: dict[str, Any] | None = None) -> tuple[float, dict[str, Any] | None]:
        """Any request; returns (latency, response)."""
        body = b'"method":' + json.dumps(method).encode()
        if params is not None:
            body += b',"params":' + json.dumps(params, separators=(",", ":")).encode()
        received, message, _, sent = await self._send(body)
        return received - sent, message

    async def initialize(self) -> float:
        """The handshake; returns the time from spawn to the initialize response."""
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        }
        body = b'"method":"initialize","params":' + json.dumps(params).encode()
        received, message, _, _ = await self._send(body)
        if message is None or "result" not in message:
            raise RuntimeError(f"{self.spec.label}: initialize failed: {message}")
        assert self.proc.stdin is not None
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        await self.proc.stdin.drain()
        self.initialized_at = received
        return received - self.spawned_at

    async def ping(self) -> float:
        """One ping round trip."""
        received, _, _, sent = await self._send(b'"method":"ping"')
        return received - sent

    async def call(self, code: str, expected: str | None, run_timeout: float = CALL_TIMEOUT) -> CallResult:
        """One tools/call of run_python with pre-encoded arguments."""
        return await self.call_with({"code": code, "timeout": run_timeout}, expected)

    async def call_with(self, arguments: dict[str, Any], expected: str | None) -> CallResult:
        """One tools/call of run_python with these arguments (pre-encoded, once per distinct set)."""
        key = json.dumps(arguments, sort_keys=True)
        body = self._encoded.get(key)
        if body is None:
            params = {"name": "run_python", "arguments": arguments}
            body = b'"method":"tools/call","params":' + json.dumps(params, separators=(",", ":")).encode()
            self._encoded[key] = body
        received, message, size, sent = await self._send(body)
        latency = received - sent
        if message is None:
            return CallResult(latency, expected is None, "response not parsed (too large)", size=size)
        if "result" not in message:
            return CallResult(latency, False, f"JSON-RPC error {message.get('error')}", size=size)
        if expected is None:
            structured = message["result"].get("structuredContent")
            return CallResult(latency, True, structured=structured, size=size)
        ok, problem, structured = check_result(self.spec, message["result"], expected)
        duration = structured.get("duration_seconds") if self.spec.kind == "runner" and structured else None
        return CallResult(latency, ok, problem, duration, structured, size)

    async def close(self) -> int:
        """Close stdin (the server's cue to stop) and wait; kill after 15 s."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.proc.stdin.close()
        try:
            code = await asyncio.wait_for(self.proc.wait(), 15)
        except TimeoutError:
            self.proc.kill()
            code = await self.proc.wait()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        return code


# --- the official SDK client ------------------------------------------------------------------------


class ClientConn:
    """The official Python client: `mcp.Client` over the SDK's stdio transport, legacy handshake."""

    mode = "client"

    def __init__(self, spec: ServerSpec, client: Any, pid: int | None) -> None:
        self.spec = spec
        self.client = client
        self.pid = pid  # found among our children: the SDK's transport does not tell

    @classmethod
    async def start(
        cls,
        spec: ServerSpec,
        launch: Launch,
        scenario: str,
        stack: contextlib.AsyncExitStack,
        extra: dict[str, str] | None = None,
    ) -> ClientConn:
        """Start and initialize; the connection lives as long as `stack`."""
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        argv = spec.argv(launch.python)
        errlog = stack.enter_context(open(launch.log_path(spec, scenario), "a"))  # noqa: SIM115, ASYNC230
        params = StdioServerParameters(
            command=argv[0], args=argv[1:], env=launch.extra_env(spec, extra), cwd=launch.root_of(spec)
        )
        # Client(StdioServerParameters) is Client(stdio_client(params)); the transport is built here only
        # to send the server's stderr to a log file instead of ours.
        client = Client(stdio_client(params, errlog=errlog), mode="legacy")
        before = set(children_of(os.getpid()))
        await stack.enter_async_context(client)
        new = sorted(set(children_of(os.getpid())) - before)
        return cls(spec, client, new[0] if len(new) == 1 else None)

    async def ping(self) -> float:
        """One ping round trip."""
        start = time.perf_counter()
        await self.client.send_ping()
        return time.perf_counter() - start

    async def call(self, code: str, expected: str | None, run_timeout: float = CALL_TIMEOUT) -> CallResult:
        """One tools/call through the client (its parsing and output-schema validation included)."""
        start = time.perf_counter()
        result = await self.client.call_tool("run_python", {"code": code, "timeout": run_timeout})
        latency = time.perf_counter() - start
        dumped = result.model_dump(by_alias=True, exclude_none=True)
        if expected is None:
            return CallResult(latency, True, structured=dumped.get("structuredContent"))
        ok, problem, structured = check_result(self.spec, dumped, expected)
        duration = structured.get("duration_seconds") if self.spec.kind == "runner" and structured else None
        return CallResult(latency, ok, problem, duration, structured)


Conn = RawConn | ClientConn


# --- opening and driving connections ---------------------------------------------------------------


async def open_conn(
    mode: str, spec: ServerSpec, launch: Launch, scenario: str, stack: contextlib.AsyncExitStack, extra: dict[str, str]
) -> Conn:
    """A connection of the given mode, initialized, closed with `stack`."""
    if mode == "client":
        return await ClientConn.start(spec, launch, scenario, stack, extra)
    conn = await RawConn.start(spec, launch, scenario, extra)
    stack.push_async_callback(conn.close)
    await conn.initialize()
    return conn


async def run_concurrently(job: Callable[[], Awaitable[Any]], total: int, concurrency: int) -> tuple[float, list[Any]]:
    """Run `job` `total` times with `concurrency` workers; (elapsed seconds, results)."""
    remaining = total
    results: list[Any] = []

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            results.append(await job())

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - start, results
