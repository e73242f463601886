"""A hand-written JSON-RPC client over a server process's stdio, for tests that need exact frames."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from tests.conftest import REPO

# The standard library only: started from this checkout, the server would take its .sandbox-env and
# .wheelhouse (runner.config.load).
STANDARD_LIBRARY_ONLY = {"RUNNER_PACKAGES": "", "RUNNER_WHEELHOUSE": ""}

# How long a server may take to say it serves: its imports and its pool's start take about 1 s of its CPU,
# which on a busy machine (2 vCPUs, two busy loops and a second server's runs) came in 9-25 s. A request's
# 20 s are for its answer alone: counted from the start, an `initialize` sent at once took over 20 s.
START_TIMEOUT = 45.0

INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}


class RawSession:
    """A server process and newline-delimited JSON-RPC written and read by hand."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self._buffer = bytearray()
        self._next_id = 100

    async def send_line(self, line: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(line)

    async def send(self, message: dict[str, Any]) -> None:
        """Write one message as a line, without waiting for anything."""
        await self.send_line(json.dumps(message).encode() + b"\n")

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send_line(json.dumps(message).encode() + b"\n")

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send_line(json.dumps(message).encode() + b"\n")
        return await self.response(self._next_id)

    async def response(self, request_id: int | str | None) -> dict[str, Any]:
        """The next message answering `request_id` (None: an error about a frame with no usable id)."""
        assert self.process.stdout is not None
        with anyio.fail_after(20):
            while True:
                while b"\n" in self._buffer:
                    line, _, rest = bytes(self._buffer).partition(b"\n")
                    self._buffer[:] = rest
                    message: dict[str, Any] = json.loads(line)
                    assert message["jsonrpc"] == "2.0"
                    if "method" not in message and message.get("id") == request_id:
                        return message
                self._buffer += await self.process.stdout.receive()

    async def initialize(self, version: str = "2025-11-25") -> dict[str, Any]:
        """Handshake-era start: initialize, then the initialized notification."""
        result: dict[str, Any] = (await self.request("initialize", {**INITIALIZE, "protocolVersion": version}))[
            "result"
        ]
        await self.notify("notifications/initialized")
        return result


@asynccontextmanager
async def raw_server(work_dir: Path, stderr_path: Path, **env: str) -> AsyncIterator[RawSession]:
    """Start `python -m runner`; on leaving, the server must already be gone or exit 0 on stdin EOF."""
    with open(stderr_path, "w") as errlog:
        process = await anyio.open_process(
            [sys.executable, "-m", "runner"],
            cwd=REPO,
            env={
                "PATH": "/usr/bin:/bin",
                "RUNNER_WORK_DIR": str(work_dir),
                "RUNNER_POOL_SIZE": "1",
                **STANDARD_LIBRARY_ONLY,
                **env,
            },
            stderr=errlog,
        )
    async with process:
        await _serving(process, stderr_path)
        yield RawSession(process)
        assert process.stdin is not None
        await process.stdin.aclose()
        with anyio.fail_after(20):
            assert await process.wait() == 0


async def _serving(process: Process, stderr_path: Path) -> None:
    """Return once the server has said it serves on stdio; fail if it exits first or does not say so
    within `START_TIMEOUT`."""
    with anyio.fail_after(START_TIMEOUT):
        while "serving on stdio" not in stderr_path.read_text(errors="replace"):
            assert process.returncode is None, f"the server exited at start: {stderr_path.read_text()}"
            await anyio.sleep(0.02)
