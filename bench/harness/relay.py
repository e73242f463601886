"""The floor under any broker of tool calls, on this machine: the same ``echo`` calls to
server-everything as raw JSON-RPC lines, made directly and through a minimal relay process (asyncio
streams that copy lines both ways, nothing checked, parsed or logged).

A brokered call crosses two more processes than a direct one (the run, then the server, then the
downstream, and back), and each crossing is a wake-up of a process on another core. The relay pays
exactly those and nothing else, so relayed minus direct is what those two crossings cost here: a
bound below which no broker that keeps the downstream out of the run can go.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
WARM = 50


def _call(n: int) -> bytes:
    params = {"name": "echo", "arguments": {"message": f"m {n}"}}
    request = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
    return (json.dumps(request) + "\n").encode()


def direct(command: list[str], calls: int) -> float:
    """The p50 of `calls` raw echo calls to a server started by this process (microseconds)."""
    return _timed(command, calls)


def _timed(command: list[str], calls: int) -> float:
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert server.stdin is not None
    assert server.stdout is not None
    try:
        server.stdin.write((json.dumps(INITIALIZE) + "\n").encode() + INITIALIZED)
        server.stdin.flush()
        server.stdout.readline()
        took = []
        for n in range(1, WARM + calls + 1):
            start = time.perf_counter()
            server.stdin.write(_call(n))
            server.stdin.flush()
            server.stdout.readline()
            took.append(time.perf_counter() - start)
    finally:
        server.stdin.close()  # a relay kills its server and ends
        server.kill()
        server.wait()
    return statistics.median(took[WARM:]) * 1e6


async def _relay(command: list[str]) -> None:
    server = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    assert server.stdin is not None
    assert server.stdout is not None
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout.buffer)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)

    async def up() -> None:
        while line := await reader.readline():
            server.stdin.write(line)  # type: ignore[union-attr]
        server.kill()

    async def down() -> None:
        while line := await server.stdout.readline():  # type: ignore[union-attr]
            writer.write(line)

    await asyncio.gather(up(), down())


def relayed(command: list[str], calls: int) -> float:
    """The p50 of `calls` raw echo calls through a relay process that started the server (microseconds)."""
    return _timed([sys.executable, __file__, *command], calls)


if __name__ == "__main__":
    asyncio.run(_relay(sys.argv[1:]))
