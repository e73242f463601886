"""Where one trivial call's wall time goes: a per-stage timeline, server and run interpreter side by side.

    python bench/timeline.py [--calls N] [--body CODE] [--session CODE] [--pause S] [--server-env K=V ...] [--out DIR]

The server runs as ``python -m runner`` would, with a few of its functions wrapped to record
CLOCK_MONOTONIC stamps (the request read, the tool handler, the code framed and written, the run's
report read, the result classified, the response about to be written); nothing else changes. Each call's code
stamps its own first and last line with the same clock, and the client stamps the request sent and
the response read, so every stage of a sequential call is measured on one clock:

    client sent -> request read -> handler -> code framed -> code written -> code starts ->
    code ends -> report read -> result -> handler returns -> response write -> client read

"code ends -> report read" is what the run does after its code, and the server reading it: the run
looks for figures, files and the last expression's value, flushes and closes its output, and sends
its report with its own end (exit status, CPU, peak memory); the server has read both streams to
their end and the whole report. The kernel tears the process down after the answer. The wrappers
cost a list append each.
Prints a table of p50 and mean per stage and writes timeline-<stamp>.json to --out (default
bench/results/).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.servers import BENCH_DIR, INHERITED_ENV, REPO, parse_env_pairs

# Runs in the server process before runner.__main__.main(): wraps the functions whose calls mark the
# stages. Module globals are looked up at call time, so assigning the module attribute is enough.
PROBE = """
import atexit, os, sys, time
marks = []
stamp = time.monotonic
atexit.register(lambda: open(os.environ["TIMELINE_MARKS"], "w").writelines(f"{k} {t!r}\\n" for k, t in marks))
import runner.execution.driver, runner.processes.child, runner.processes.forkserver, runner.protocol.handlers
import runner.transports.stdio, runner.processes.keeper

def before(module, name, label):
    inner = getattr(module, name)
    def wrapper(*args, **kwargs):
        marks.append((label, stamp()))
        return inner(*args, **kwargs)
    setattr(module, name, wrapper)

def around_async(owner, name, label_in, label_out):
    inner = getattr(owner, name)
    async def wrapper(*args, **kwargs):
        if label_in:
            marks.append((label_in, stamp()))
        result = await inner(*args, **kwargs)  # not stamped when cancelled (a sampling interval ends)
        if label_out:
            marks.append((label_out, stamp()))
        return result
    setattr(owner, name, wrapper)

before(runner.transports.stdio, "parse_message", "request_read")
before(runner.execution.driver, "frame_job", "code_framed")
before(runner.execution.driver, "classify", "result")
around_async(runner.protocol.handlers.Handlers, "call_tool", "handler", "handler_returns")
around_async(runner.transports.stdio, "write_all", "response_write", None)
around_async(runner.execution.driver, "write_all", None, "code_written")
before(runner.execution.driver, "parse_report", "report_read")
around_async(runner.processes.keeper.SessionKeeper, "keepable", None, "anchor_said")

from runner.__main__ import main
sys.exit(main())
"""

# The calls' code is BODY between two stamps. The last statement is not an expression, so that no value
# comes back: as with print(1).
BODY = "print(1)"


def stamped(body: str) -> str:
    return f"import sys, time\nfirst = time.monotonic()\n{body}\n_ = sys.stderr.write(repr((first, time.monotonic())))"


STAGES = [
    ("client_sent", "request_read", "client -> server: the request line arrives"),
    ("request_read", "handler", "JSON parse, SDK dispatch to the tool handler"),
    ("handler", "code_framed", "arguments validated, slot, pooled interpreter taken"),
    ("code_framed", "code_written", "code written to the interpreter"),
    ("code_written", "code_starts", "interpreter wakes, reads, compiles"),
    ("code_starts", "code_ends", "the code itself (--body)"),
    ("code_ends", "report_read", "the run gathers what it returns, closes its streams, reports its end"),
    ("report_read", "result", "the report parsed, the group killed"),
    ("result", "handler_returns", "result built, directory removed, logged"),
    ("result", "anchor_said", "(a session's call) the anchor says whether the call can be kept"),
    ("anchor_said", "handler_returns", "(a session's call) the result built, logged"),
    ("handler_returns", "response_write", "SDK serializes the response"),
    ("response_write", "client_read", "server -> client: written, the line arrives"),
]


def first_between(stamps: list[float], low: float, high: float) -> float | None:
    """The first stamp in [low, high], stamps sorted."""
    for value in stamps:
        if value > high:
            return None
        if value >= low:
            return value
    return None


async def drive(
    calls: int, env: dict[str, str], session: str | None = None, pause: float = 0.0, body: str = BODY
) -> tuple[list[dict[str, float]], str]:
    """Start the probed server, make `calls` sequential calls, return each call's stamps. With
    `session` (the code of its first call), the calls run in one session that call began; `pause`
    seconds pass between calls."""
    with tempfile.TemporaryDirectory(prefix="timeline-") as scratch:
        marks_path = Path(scratch) / "marks"
        log_path = Path(scratch) / "server.log"
        server_env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
        server_env.update(env, PYTHONPATH=str(REPO), TIMELINE_MARKS=str(marks_path))
        with open(log_path, "wb") as log:  # noqa: ASYNC230 (a local scratch file)
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                PROBE,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                cwd=REPO,
                env=server_env,
                limit=1 << 24,
            )
        assert proc.stdin is not None
        assert proc.stdout is not None
        stdin, stdout = proc.stdin, proc.stdout

        async def request(ident: int, method: str, params: dict[str, Any]) -> tuple[float, float, dict[str, Any]]:
            sent = time.monotonic()
            message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
            stdin.write(json.dumps(message).encode() + b"\n")
            line = await stdout.readline()
            return sent, time.monotonic(), json.loads(line)

        client = {"name": "timeline", "version": "1"}
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
        await request(0, "initialize", hello)
        stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        arguments: dict[str, Any] = {"code": stamped(body)}
        if session is not None:
            _, _, began = await request(
                0, "tools/call", {"name": "run_python", "arguments": {"code": session, "session": "new"}}
            )
            if began["result"]["structuredContent"]["status"] != "ok":
                raise SystemExit(f"the session did not start: {began['result']}")
            arguments["session"] = began["result"]["structuredContent"]["session"]
        rows = []
        for ident in range(1, calls + 31):
            if pause:
                await asyncio.sleep(pause)
            sent, read, reply = await request(ident, "tools/call", {"name": "run_python", "arguments": arguments})
            structured = reply["result"]["structuredContent"]
            if structured["status"] != "ok":
                raise SystemExit(f"call {ident} failed: {structured}")
            # The stamps are the last thing on stderr: what --body wrote there comes before them.
            stamps = structured["stderr"][structured["stderr"].rindex("(") :]
            starts, ends = json.loads(stamps.replace("(", "[").replace(")", "]"))
            if ident > 30:  # the first calls warm the server up
                rows.append({"client_sent": sent, "code_starts": starts, "code_ends": ends, "client_read": read})
        stdin.close()
        await proc.wait()
        config = next((line for line in log_path.read_text().splitlines() if "pool starting" in line), "")
        by_label: dict[str, list[float]] = {}
        for line in marks_path.read_text().splitlines():
            label, value = line.split()
            by_label.setdefault(label, []).append(float(value))
    for stamps in by_label.values():
        stamps.sort()
    for row in rows:
        for label, stamps in by_label.items():
            found = first_between(stamps, row["client_sent"], row["client_read"])
            if found is not None:
                row[label] = found
    return rows, config.split("pool starting", 1)[-1].strip()


def summarize(rows: list[dict[str, float]]) -> list[dict[str, Any]]:
    """Per stage: p50 and mean in ms over the calls that have both ends."""
    table = []
    for start, end, what in STAGES:
        spans = [row[end] - row[start] for row in rows if start in row and end in row]
        table.append(
            {
                "from": start,
                "to": end,
                "what": what,
                "calls": len(spans),
                "p50_ms": statistics.median(spans) * 1e3 if spans else None,
                "mean_ms": statistics.fmean(spans) * 1e3 if spans else None,
            }
        )
    totals = [row["client_read"] - row["client_sent"] for row in rows]
    table.append(
        {
            "from": "client_sent",
            "to": "client_read",
            "what": "the whole call",
            "calls": len(totals),
            "p50_ms": statistics.median(totals) * 1e3,
            "mean_ms": statistics.fmean(totals) * 1e3,
        }
    )
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--server-env", action="append", default=[], metavar="K=V")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results")
    parser.add_argument(
        "--session",
        metavar="CODE",
        help="run the calls in one session, begun by a call of CODE (e.g. 'import pandas as pd')",
    )
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between calls (default 0)")
    parser.add_argument(
        "--body",
        default=BODY,
        metavar="CODE",
        help="each call's code, timed as the code stage (default 'print(1)'; with --session it may use the "
        "session's state, e.g. 'print(df.v.sum())')",
    )
    args = parser.parse_args()
    env = parse_env_pairs(args.server_env, "--server-env")
    rows, config = asyncio.run(drive(args.calls, env, args.session, args.pause, args.body))
    table = summarize(rows)
    lines = [
        f"python-runner-mcp timeline, {dt.datetime.now().isoformat(timespec='seconds')}; "
        f"{len(rows)} sequential calls of {args.body!r}"
        + (f" in a session begun with {args.session!r}" if args.session is not None else "")
        + (f", {args.pause} s apart" if args.pause else "")
        + f"; load average {os.getloadavg()}",
        f"server: {config}",
        "",
        f"{'stage':<38} {'p50 ms':>7} {'mean ms':>8}  what",
    ]
    for entry in table:
        stage = f"{entry['from']} -> {entry['to']}"
        p50 = "-" if entry["p50_ms"] is None else f"{entry['p50_ms']:.3f}"
        mean = "-" if entry["mean_ms"] is None else f"{entry['mean_ms']:.3f}"
        lines.append(f"{stage:<38} {p50:>7} {mean:>8}  {entry['what']}")
    sys.stdout.write("\n".join(lines) + "\n")
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out / f"timeline-{stamp}.json"
    out.write_text(json.dumps({"server": config, "env": env, "calls": len(rows), "stages": table}, indent=2))
    sys.stdout.write(f"wrote {out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
