"""A downstream MCP server (stdio, 2025-06-18) written by hand in JSON-RPC lines, to misbehave where an
SDK-made one cannot. Its tool ``echo`` says what it got; the mode (argv[1]) says how it misbehaves:

- ``requests``: once listed, it sends ping requests without end and reads nothing more; ``bigids``:
  the same, each with an id of 8 MiB;
- ``stderr``: once listed, it writes stderr lines without end; ``trickle``: notifications without
  end, a byte a write;
- ``notes``: once listed, it sends notifications without end, the number sent so far written to the
  file argv[2] every hundred; ``answers``: the same, of answers to requests no one made; ``bignotes``:
  the same, of notifications of 4 MiB, the number written every one;
- ``exits``: it exits once initialized;
- ``badbyte``: its first answer to a call (the first of all its processes: argv[2] is a file it
  makes) is a line with a byte that is not UTF-8, and nothing more;
- ``described``: it lists 1,000 tools besides ``echo``, each with a 20,000-character description;
- ``endless``: its first answer to a call (the first of all its processes: argv[2] is a file it
  makes) is a line that never ends; ``endless-list``: its answer to tools/list is;
- ``toolong``: its first answer to a call (the first of all its processes: argv[2] is a file it makes)
  is a line of 70 MiB, then it serves on; ``toolong-last``: the same, its id written last;
- ``badlist``: its answer to tools/list is a line that does not parse, and nothing more;
- ``slowlist``: it answers tools/list after argv[2] seconds (its initialize at once);
- ``daemons``: as it starts, it leaves a daemon (a double fork, its own session), and each call starts
  one more in a session of its own: ``sleep`` all, their pids written to the file argv[2] (a line each);
- ``stubborn``: it ignores SIGTERM, and serves on after its stdin's end, until it is killed;
- ``noread``: once listed, it reads nothing more (its stdin fills);
- ``banner``: it says "MCP server running on stdio" on its stdout first, then serves; ``deep``: its
  answer to a call is its arguments as structured content, nested in as many objects as ``depth`` says;
  ``manyblocks``: its answer to a call has 2,000 content blocks;
- ``relists``: after each answer to tools/list, it says its tools changed, and counts the listings in
  the file argv[2];
- ``http``: Streamable HTTP on 127.0.0.1 (its port written to the file argv[2]), whose tools answer
  a call with a JSON body that never ends (``endless``), with an event stream it ends without an
  answer (``cut``), with one of comment lines without end (``chatter``), with one it ends after an
  event with an id and ``retry: 0``, each time it is resumed (a GET with ``Last-Event-ID``) too
  (``resumed``), with an event stream of one answer of 2 MiB of text (``big``), or as they should
  (``echo``);
- ``sessions``: Streamable HTTP as ``http``, with sessions: a request with a session id it did not
  give gets 404 with a JSON-RPC error, as the SDK's own server answers it; once the file argv[2] +
  ``.forget`` is made, it forgets the session it gave (as one started again would) and removes the
  file. Its tool ``echo`` answers;
- ``gone``: Streamable HTTP as ``http`` (no session), whose every POST, once the file argv[2] +
  ``.gone`` is made and until it is removed, gets 404 with a body that is no JSON-RPC message
  (``application/json`` if the file says ``json``, as FastAPI's ``{"detail": "Not Found"}``; else
  ``text/plain``, as Starlette's): the endpoint is gone, or was never there;
- ``refuses``: Streamable HTTP as ``http``, whose every POST gets 401 (a credential it does not take);
- ``redirect``, ``events``, ``comments``, ``retry``: as ``http``, with a session, whose stream of its
  own messages (GET), once the file argv[2] + ``.go`` is made, is a redirect within its origin whose
  body never ends; events of a type no one knows, without end; comment lines, without end; or a
  ``retry: 0`` and its end. The GETs it answered, the bytes it wrote on them and how many of them we
  hung up are in the file argv[2] + ``.gets`` (JSON), with the same of calls' streams (``calls``,
  ``call_bytes``, ``calls_ended``) and the resumptions it answered (``resumed``).

Standard library only."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else ""
LISTINGS: list[object] = []  # relists: the listings asked for so far
ECHO = {"name": "echo", "description": "Says what it got.", "inputSchema": {"type": "object"}}
# An HTTP mode's streams: of its own messages (GET) and of calls' answers, how many it answered, the
# bytes, how many we hung up; and the calls' streams it was asked to resume.
GETS = {"gets": 0, "bytes": 0, "ended": 0, "calls": 0, "call_bytes": 0, "calls_ended": 0, "resumed": 0}
GETS_LOCK = threading.Lock()
QUIET = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}


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
        if MODE == "endless-list":
            write_endlessly(ident)
        if MODE == "badlist":
            sys.stdout.write('{"jsonrpc": "2.0", "id": ' + json.dumps(ident) + ', "result": "not a listing"}\n')
            sys.stdout.flush()
            return
        if MODE == "slowlist":
            time.sleep(float(sys.argv[2]))
        if MODE == "renames":  # new names at each listing, on a page with a cursor, then "changed"
            if (request.get("params") or {}).get("cursor"):  # type: ignore[union-attr]
                send({"jsonrpc": "2.0", "id": ident, "result": {"tools": []}})
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
                return
            LISTINGS.append(ident)
            schema = {"type": "object", "description": "s" * 1000}
            named = [
                {"name": f"t{len(LISTINGS)}_{n}", "inputSchema": schema, "outputSchema": schema} for n in range(50)
            ]
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": [ECHO, *named], "nextCursor": "more"}})
            return
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools()}})
        if MODE == "relists":
            LISTINGS.append(ident)
            with open(sys.argv[2] + ".part", "w") as count:
                count.write(str(len(LISTINGS)))
            os.replace(sys.argv[2] + ".part", sys.argv[2])
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        if MODE == "noread":
            time.sleep(3600)
        misbehave()
    elif method == "tools/call":
        params = request.get("params") or {}
        if MODE == "badbyte" and not os.path.exists(sys.argv[2]):
            open(sys.argv[2], "w").close()
            sys.stdout.buffer.write(b'{"jsonrpc": "2.0", "id": ' + str(ident).encode() + b', "result": "\xff"}\n')
            sys.stdout.flush()
            return
        if MODE == "endless" and not os.path.exists(sys.argv[2]):
            open(sys.argv[2], "w").close()
            write_endlessly(ident)
        if MODE in ("toolong", "toolong-last") and not os.path.exists(sys.argv[2]):
            open(sys.argv[2], "w").close()
            text = "x" * (70 << 20)
            if MODE == "toolong":  # JSON-RPC's fields first, as the Python SDK writes them
                send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": text}]}})
            else:  # last, as the TypeScript SDK does
                send({"result": {"content": [{"type": "text", "text": text}]}, "jsonrpc": "2.0", "id": ident})
            return
        if MODE == "daemons":
            daemon = subprocess.Popen(["sleep", "3601"], start_new_session=True, **QUIET)
            with open(sys.argv[2], "a") as pids:
                pids.write(f"{daemon.pid}\n")
        if MODE == "deep":
            arguments = params.get("arguments") or {}
            nested: object = arguments
            for _ in range(int(arguments.get("depth", 0))):
                nested = {"a": nested}
            result = {"content": [], "structuredContent": nested}
            send({"jsonrpc": "2.0", "id": ident, "result": result})
            return
        if MODE == "manyblocks":
            blocks = [{"type": "text", "text": str(n)} for n in range(2000)]
            blocks.append({"type": "text", "text": "x" * 70_000})  # long enough to be parsed in two
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": blocks}})
            return
        text = json.dumps(params.get("arguments") if isinstance(params, dict) else None)
        send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": f"echo {text}"}]}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": ident, "result": {}})
    elif ident is not None:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "Method not found"}})


def write_endlessly(ident: object) -> None:
    sys.stdout.write('{"jsonrpc": "2.0", "id": ' + json.dumps(ident) + ', "result": {"content": [')
    while True:
        sys.stdout.write('{"type": "text", "text": "' + "x" * 65_000 + '"}, ')


def misbehave() -> None:
    if MODE in ("requests", "bigids"):
        n, long = 0, "x" * (8 << 20) if MODE == "bigids" else ""
        while True:
            n += 1
            send({"jsonrpc": "2.0", "id": f"flood-{n}{long}", "method": "ping"})
    if MODE == "stderr":
        while True:
            sys.stderr.write("a line of a server that says too much\n")
    if MODE == "trickle-stderr":
        while True:
            os.write(2, b"x")
    if MODE == "trickle":
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}})
        os.write(1, note[:-1].encode())
        while True:
            os.write(1, b" ")  # JSON's white space, without end
    if MODE in ("notes", "answers", "bignotes"):
        data = "x" * ((4 << 20) if MODE == "bignotes" else 50)
        note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": data}}
        answer = {"jsonrpc": "2.0", "id": "no one's", "result": {"content": []}}
        sent, each = 0, 1 if MODE == "bignotes" else 100
        while True:
            for _ in range(each):
                send(answer if MODE == "answers" else note)
            sent += each
            with open(sys.argv[2] + ".part", "w") as count:
                count.write(str(sent))
            os.replace(sys.argv[2] + ".part", sys.argv[2])


class Endless(http.server.BaseHTTPRequestHandler):
    """Streamable HTTP, answered in JSON: a call's answer never ends."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        method, ident = request.get("method"), request.get("id")
        tool = (request.get("params") or {}).get("name")
        if MODE == "refuses":
            self.send_response(401)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "12")
            self.end_headers()
            self.wfile.write(b"Unauthorized")
            return
        if MODE == "gone" and os.path.exists(sys.argv[2] + ".gone"):
            with open(sys.argv[2] + ".gone") as gone:
                self.not_found(gone.read() == "json")
            return
        if ident is None:
            self.send_response(202)
            self.end_headers()
            return
        self.send_response(200)
        if method == "tools/call" and tool == "big":
            result = {"content": [{"type": "text", "text": "x" * (2 << 20)}]}
            event = b"data: " + json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode() + b"\n\n"
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(event)))
            self.end_headers()
            self.wfile.write(event)
            return
        if method == "tools/call" and tool in ("cut", "chatter", "resumed"):
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            if tool == "chatter":
                self.tell(calls=1)
                self.endlessly(b":\n" * 32768, "call_bytes", "calls_ended")
            elif tool == "resumed":
                self.wfile.write(b"id: 1\nretry: 0\ndata:\n\n")  # and the end: the client is to resume it
            return  # and the stream ends, with no answer in it
        self.send_header("Content-Type", "application/json")
        if method != "tools/call" or tool == "echo":
            if method == "initialize":
                info = {"name": "raw", "version": "1"}
                result: object = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": info}
            elif method == "tools/call":
                result = {"content": [{"type": "text", "text": "echo"}]}
            else:
                listed = [ECHO] + [{**ECHO, "name": name} for name in ("endless", "cut", "chatter", "resumed", "big")]
                result = {"tools": listed} if method == "tools/list" else {}
            body = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()
            self.send_header("Content-Length", str(len(body)))
            if MODE not in ("http", "gone"):  # a session: the client opens the stream of its own messages
                self.send_header("Mcp-Session-Id", "session-1")
            self.end_headers()
            self.wfile.write(body)
            return
        self.end_headers()
        try:
            while True:
                self.wfile.write(b" " * 65536)
        except OSError:
            pass  # we hung up

    def do_GET(self) -> None:
        if self.headers.get("Last-Event-ID"):  # a call's stream resumed: as before, no answer
            self.tell(resumed=1)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"id: 1\nretry: 0\ndata:\n\n")
            return
        if MODE in ("redirect", "events", "comments", "retry"):
            while not os.path.exists(sys.argv[2] + ".go"):  # the test's word to start
                time.sleep(0.05)
        self.tell(gets=1)
        if MODE == "redirect":
            self.send_response(307)
            self.send_header("Location", self.path)
            self.end_headers()
            self.endlessly(b"x" * 65536)
        elif MODE in ("events", "comments", "retry"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            if MODE == "retry":
                self.wfile.write(b"retry: 0\n\n")  # and the stream ends: the client is to reconnect at once
                return
            self.endlessly(b"event: unknown\ndata: x\n\n" * 3000 if MODE == "events" else b":\n" * 32768)
        else:
            self.send_response(405)
            self.end_headers()

    def do_DELETE(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def not_found(self, json_body: bool) -> None:
        body = b'{"detail": "Not Found"}' if json_body else b"Not Found"
        self.send_response(404)
        self.send_header("Content-Type", "application/json" if json_body else "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def endlessly(self, chunk: bytes, written_as: str = "bytes", ended_as: str = "ended") -> None:
        """Write `chunk` again and again until we hang up, what was written told every 1 MiB or so."""
        written = 0
        try:
            while True:
                self.wfile.write(chunk)
                written += len(chunk)
                if written >= 1 << 20:
                    self.tell(**{written_as: written})
                    written = 0
        except OSError:
            self.tell(**{written_as: written, ended_as: 1})

    def tell(self, **counts: int) -> None:
        with GETS_LOCK:
            for name, count in counts.items():
                GETS[name] += count
            with open(sys.argv[2] + ".gets.part", "w") as told:
                json.dump(GETS, told)
            os.replace(sys.argv[2] + ".gets.part", sys.argv[2] + ".gets")

    def log_message(self, *_: object) -> None:
        pass


class Sessions(Endless):
    """Streamable HTTP with sessions: each process gives its own, and knows no other."""

    session = "session-1"

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        method, ident = request.get("method"), request.get("id")
        forget = sys.argv[2] + ".forget"
        if os.path.exists(forget):
            os.remove(forget)
            Sessions.session = f"session-{int(Sessions.session.split('-')[1]) + 1}"
        if method != "initialize" and self.headers.get("Mcp-Session-Id") != self.session:
            # As the SDK's own server answers it (streamable_http_manager.py): the client passes the
            # error on as it is, not its "Session terminated" for a 404 without one.
            body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}'
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if ident is None:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if method == "initialize":
            info = {"name": "raw", "version": "1"}
            result: object = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": info}
        elif method == "tools/list":
            result = {"tools": [ECHO]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "echo"}]}
        else:
            result = {}
        body = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Mcp-Session-Id", self.session)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    if MODE in ("http", "gone", "refuses", "sessions", "redirect", "events", "comments", "retry"):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sessions if MODE == "sessions" else Endless)
        with open(sys.argv[2] + ".part", "w") as port:
            port.write(str(server.server_address[1]))
        os.rename(sys.argv[2] + ".part", sys.argv[2])
        server.serve_forever()
    if MODE == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if MODE == "banner":
        sys.stdout.write("MCP server running on stdio\n")
        sys.stdout.flush()
    if MODE == "daemons" and os.fork() == 0:
        os.setsid()
        daemon = subprocess.Popen(["sleep", "3602"], **QUIET)
        with open(sys.argv[2], "a") as pids:
            pids.write(f"{daemon.pid}\n")
        os._exit(0)
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if isinstance(request, dict):
            answer(request)
    while MODE == "stubborn":
        time.sleep(60)


if __name__ == "__main__":
    main()
