"""A downstream MCP server (stdio, 2025-06-18) written by hand in JSON-RPC lines, to misbehave where an
SDK-made one cannot. Its tool ``echo`` says what it got; the mode (argv[1]) says how it misbehaves:

- ``requests``: once listed, it sends ping requests without end and reads nothing more;
- ``stderr``: once listed, it writes stderr lines without end;
- ``exits``: it exits once initialized;
- ``badbyte``: its first answer to a call (the first of all its processes: argv[2] is a file it
  makes) is a line with a byte that is not UTF-8, and nothing more;
- ``described``: it lists 1,000 tools besides ``echo``, each with a 20,000-character description.

Standard library only."""

from __future__ import annotations

import json
import os
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else ""
ECHO = {"name": "echo", "description": "Says what it got.", "inputSchema": {"type": "object"}}


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def tools() -> list[dict[str, object]]:
    if MODE != "described":
        return [ECHO]
    long = {"type": "object"}
    return [ECHO] + [{"name": f"t{n}", "description": "d" * 20_000, "inputSchema": long} for n in range(1000)]


def answer(request: dict[str, object]) -> None:
    method, ident = request.get("method"), request.get("id")
    if method == "initialize":
        info = {"name": "raw", "version": "1"}
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": info}
        send({"jsonrpc": "2.0", "id": ident, "result": result})
    elif method == "notifications/initialized" and MODE == "exits":
        sys.exit(0)
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools()}})
        misbehave()
    elif method == "tools/call":
        params = request.get("params") or {}
        if MODE == "badbyte" and not os.path.exists(sys.argv[2]):
            open(sys.argv[2], "w").close()
            sys.stdout.buffer.write(b'{"jsonrpc": "2.0", "id": ' + str(ident).encode() + b', "result": "\xff"}\n')
            sys.stdout.flush()
            return
        text = json.dumps(params.get("arguments") if isinstance(params, dict) else None)
        send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": f"echo {text}"}]}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": ident, "result": {}})
    elif ident is not None:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "Method not found"}})


def misbehave() -> None:
    if MODE == "requests":
        n = 0
        while True:
            n += 1
            send({"jsonrpc": "2.0", "id": f"flood-{n}", "method": "ping"})
    if MODE == "stderr":
        while True:
            sys.stderr.write("a line of a server that says too much\n")


def main() -> None:
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if isinstance(request, dict):
            answer(request)


if __name__ == "__main__":
    main()
