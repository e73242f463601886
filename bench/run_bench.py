"""Benchmark harness of issue 5: the real server against a naive baseline and the no-op floor.

    python bench/run_bench.py [--quick] [--out DIR] [--server-env K=V ...] [--variant LABEL:K=V[,K=V...] ...]
                              [--server-commit REV | --server-root DIR] [--only calls,flood,startup,memory]

e.g. posix-spawn against fork-server, both against the naive baseline, on the committed runner/:

    python bench/run_bench.py --server-commit HEAD \
        --variant posix-spawn:RUNNER_SANDBOX=none-posix-spawn \
        --variant fork-server:RUNNER_SANDBOX=none

Every scenario runs, in the same invocation and interleaved (batches alternate between servers, the
order rotating from batch to batch, so machine noise hits all of them):

- the real server, `python -m runner` (one column per --variant; default: one variant, "runner",
  with the server's defaults plus --server-env);
- the naive baseline, `bench/naive_server.py` (MCPServer + subprocess + preexec_fn rlimits);
- the no-op floor: a `ping` round trip on the same connection as the calls it is compared with.

Two client modes drive the calls: "client", the official SDK client (`mcp.Client` over the SDK's
stdio transport, `mode="legacy"`), and "raw", hand-written JSON-RPC lines written to the server's
stdin and read back from its stdout (pre-encoded requests, responses matched by id), which takes
the client's own cost out. Scenarios that need the server's pid (flood, memory, start-up) use raw.

Scenarios: trivial `print(1)` latency at concurrency 1 (p50, p99, mean) with the ping floor and the
CPU per call of the server and of everything under it (/proc/PID/stat); throughput at concurrency
1, 4, 8, 16 (RUNNER_MAX_CONCURRENT=8); a ~0.2 s CPU-bound snippet; a 1 GiB stdout flood (server
RSS growth, and the time from crossing RUNNER_MAX_OUTPUT_MB to the kill, from timestamps the run
writes into its own output: see `analyse_flood` in harness/scenarios.py); start-up to the initialize
response against a bare `import mcp.server.lowlevel`; idle RSS/PSS and per pooled interpreter
(RUNNER_POOL_SIZE 0 vs 8).
The egress scenario (`--only egress`, harness/egress.py) is the server's CPU while a run floods its
egress proxy in each of the ways tests/e2e/egress/test_hostile_runs.py counts against its pace, as a share
of a core, against an idle run and an honest download in the same server.

Prints absolute numbers and the ratios the issue's targets are stated in, writes
`bench-<timestamp>.json` and `.md` (and the servers' stderr logs) to --out (default
bench/results/). This is a script that prints numbers: nothing here asserts on time. --quick
takes about a minute with one variant; the full run about 5 minutes (7-10 with three variants).

The server runs from the working tree (--server-root, default this repository) or from a commit
exported to bench/results/server-SHA/ (--server-commit). Not from under /tmp: the bwrap sandbox
mounts its own /tmp over it and the runs cannot find runner/inrun/bootstrap.py (the preflight says so).

--server-env is given to every real-server variant (never to the naive baseline, which reads the
same RUNNER_* limits' defaults); nothing the caller does not ask for is passed, so e.g.
RUNNER_SANDBOX is set only with `--variant fork:RUNNER_SANDBOX=none`.

This file is the command line; the harness itself is the package bench/harness/ (workloads, servers,
procfs, drivers, stats, scenarios, report: its __init__ says what each holds).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# harness/ is next to this file: on sys.path already when this runs as a script, not when it is imported.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.data import DATA_CODE, scenario_data
from harness.egress import scenario_egress
from harness.kept import scenario_kept
from harness.report import machine, render
from harness.scenarios import preflight, say, scenario_calls, scenario_flood, scenario_memory, scenario_startup
from harness.servers import BENCH_DIR, REPO, Launch, build_specs, describe_root, export_commit, server_config_line
from harness.sessions import scenario_sessions
from harness.tools import scenario_tools
from harness.view import scenario_view
from harness.workloads import CALL_TIMEOUT, CPU_CODE, FLOOD_CODE, FULL, QUICK, TRIVIAL_CODE


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions: under ~2 minutes")
    parser.add_argument(
        "--out", type=Path, default=BENCH_DIR / "results", help="results directory (default bench/results)"
    )
    parser.add_argument(
        "--server-env", action="append", default=[], metavar="K=V", help="environment for every real-server variant"
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL:K=V[,K=V...]",
        help="a real-server variant with its own env (repeatable; default: one variant 'runner')",
    )
    parser.add_argument("--no-naive", action="store_true", help="leave the naive baseline out")
    parser.add_argument(
        "--only",
        default="calls,flood,startup,memory,data,sessions,kept,tools,view,egress",
        help="comma-separated scenarios: calls, flood, startup, memory, data, sessions, kept, tools, view, egress "
        "(default: all)",
    )
    parser.add_argument(
        "--modes", default="raw,client", help="client modes for the call scenarios (default raw,client)"
    )
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter that starts every server (default: this one)"
    )
    parser.add_argument(
        "--server-root",
        type=Path,
        default=REPO,
        help="checkout whose runner/ is benchmarked (default: this repository)",
    )
    parser.add_argument(
        "--packages",
        type=Path,
        default=REPO / ".sandbox-env",
        help="the package environment of the data scenario (RUNNER_PACKAGES; default .sandbox-env)",
    )
    parser.add_argument(
        "--variant-commit",
        action="append",
        default=[],
        metavar="LABEL:REV",
        help="a real-server variant running runner/ as of a commit, e.g. the code before a change (repeatable)",
    )
    parser.add_argument(
        "--server-commit",
        metavar="REV",
        help="benchmark runner/ as of a commit (exported to bench/results/server-SHA/), not the working tree",
    )
    return parser.parse_args(argv)


async def main_async(args: argparse.Namespace) -> int:
    """Run the chosen scenarios and write the report."""
    params = QUICK if args.quick else FULL
    modes = tuple(m for m in args.modes.split(",") if m)
    scenarios = {s for s in args.only.split(",") if s}
    known = {"calls", "flood", "startup", "memory", "data", "sessions", "kept", "tools", "view", "egress"}
    unknown = scenarios - known | set(modes) - {"raw", "client"}
    if unknown:
        raise SystemExit(f"run_bench: unknown scenario or mode: {sorted(unknown)}")
    specs = build_specs(args)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir: Path = args.out
    logs = out_dir / f"logs-{stamp}"
    logs.mkdir(parents=True, exist_ok=True)
    root = export_commit(args.server_commit) if args.server_commit else args.server_root.resolve()
    launch = Launch(python=args.python, root=root, logs=logs)
    report: dict[str, Any] = {
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "quick": args.quick,
        "params": params.__dict__ | {"modes": list(modes)},
        "machine": machine(),
        "server_root": str(launch.root),
        "commit": describe_root(launch.root),
        "servers": [{"label": s.label, "kind": s.kind, "env": s.env} for s in specs],
        "workload": {
            "trivial": TRIVIAL_CODE,
            "cpu": CPU_CODE,
            "flood": FLOOD_CODE,
            "data": DATA_CODE,
            "call_timeout": CALL_TIMEOUT,
        },
    }
    begin = time.perf_counter()
    say(f"servers: {', '.join(s.label for s in specs)}; logs in {logs}")
    await preflight(specs, launch)
    for spec, entry in zip(specs, report["servers"], strict=True):
        if spec.kind == "runner":
            entry["server_config"] = server_config_line(launch.log_path(spec, "preflight"))
    if "calls" in scenarios:
        report["calls"] = {}
        for mode in modes:
            report["calls"][mode] = await scenario_calls(mode, specs, launch, params)
    if "flood" in scenarios:
        report["flood"] = await scenario_flood(specs, launch, params)
    if "startup" in scenarios:
        report["startup"] = await scenario_startup(specs, launch, params)
    if "memory" in scenarios:
        report["memory"] = await scenario_memory(specs, launch, params)
    if {"data", "sessions", "tools", "view"} & scenarios and not (args.packages / "site-packages").is_dir():
        raise SystemExit(f"run_bench: no package environment at {args.packages}: make sandbox-env builds it")
    if "data" in scenarios:
        report["data"] = {}
        for mode in modes:
            report["data"][mode] = await scenario_data(mode, specs, launch, params, str(args.packages.resolve()))
    if "sessions" in scenarios:
        report["sessions"] = await scenario_sessions(specs, launch, params, str(args.packages.resolve()))
    if "kept" in scenarios:
        report["kept"] = await scenario_kept(specs, launch, params)
    if "tools" in scenarios:
        report["tools"] = await scenario_tools(specs, launch, params, str(args.packages.resolve()))
    if "view" in scenarios:
        repeats = 3 if args.quick else 7
        report["view"] = scenario_view(specs, launch, repeats, str(args.packages.resolve()))
    if "egress" in scenarios:
        report["egress"] = await scenario_egress(specs, launch, params)
    report["elapsed_s"] = time.perf_counter() - begin
    report["loadavg_end"] = os.getloadavg()
    markdown = render(report)
    json_path = out_dir / f"bench-{stamp}.json"
    md_path = out_dir / f"bench-{stamp}.md"
    json_path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    md_path.write_text(markdown + "\n")
    sys.stdout.write(markdown + "\n")
    say(f"wrote {json_path} and {md_path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
