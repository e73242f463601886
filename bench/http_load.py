"""Load over Streamable HTTP on loopback: one worker against two (RUNNER_HTTP_WORKERS), interleaved.

    python bench/http_load.py [--clients 8,64] [--calls 20] [--rounds 3] [--client-processes 2] [--out DIR]

Each round starts the server once per worker count, waits for its pools, and drives it with
`--clients` concurrent official SDK clients (`mcp.Client` over `streamable_http_client`, legacy
mode), spread over `--client-processes` load processes so that the client's own CPU is not one
core's worth. Every client makes `--calls` `print(1)` calls; each call's latency is timed in the
client. Reported per worker count and client count: calls per second over the whole load, p50 and
p99 latency, failures, and the CPU seconds per call of the servers (supervisor, workers, zygotes and
runs together, from /proc). Rounds alternate the worker counts so that machine noise hits both.

Nothing here asserts on time: it prints numbers and writes `http-load-<timestamp>.md` and `.json`
to --out (default bench/results/).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLK = os.sysconf("SC_CLK_TCK")

LOAD = r"""
import anyio, json, sys, time
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
url, clients, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
latencies, failures = [], 0
async def one():
    global failures
    async with Client(streamable_http_client(url), mode="legacy") as client:
        for _ in range(calls):
            start = time.perf_counter()
            try:
                result = await client.call_tool("run_python", {"code": "print(1)"})
                ok = not result.is_error
            except Exception:
                ok = False
            latencies.append(time.perf_counter() - start)
            failures += not ok
async def main():
    async with anyio.create_task_group() as tg:
        for _ in range(clients):
            tg.start_soon(one)
sys.stdin.readline()  # go
anyio.run(main)
print(json.dumps({"latencies": latencies, "failures": failures}))
"""


def tree_cpu(root: int) -> float:
    """CPU seconds of `root` and every live descendant, plus what reaped children used."""
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(fields[1])
            stats[int(entry)] = fields
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            f = stats[pid]
            total += (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / CLK
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return total


def start_server(workers: int, work_dir: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "RUNNER_WORK_DIR": work_dir,
        "RUNNER_HTTP_PORT": "0",
        "RUNNER_HTTP_WORKERS": str(workers),
        "RUNNER_MAX_QUEUE": "0",
        "RUNNER_PACKAGES": "",
        "RUNNER_WHEELHOUSE": "",
    }
    errlog = open(log, "wb")  # noqa: SIM115  (the server writes to it until it stops)
    process = subprocess.Popen(
        [sys.executable, "-m", "runner", "--transport", "http"], cwd=REPO, env=env, stderr=errlog
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"url=(http://\S+)", log.read_text(errors="replace"))
        if found:
            return process, found.group(1)
        time.sleep(0.05)
    process.kill()
    raise SystemExit(f"the server did not start: {log.read_text()}")


def wait_ready(base: str, workers: int) -> None:
    import httpx2

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            text = httpx2.get(base + "/metrics").text
            ready = sum(float(m) for m in re.findall(r"^runner_pool_ready (\S+)", text, re.M))
            if ready >= 2 * workers:
                return
        except httpx2.HTTPError:
            pass
        time.sleep(0.2)


def one_load(url: str, clients: int, calls: int, processes: int) -> dict[str, object]:
    share = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
    loaders = [
        subprocess.Popen(
            [sys.executable, "-c", LOAD, url, str(n), str(calls)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in share
        if n
    ]
    time.sleep(1.5)  # the loaders import the SDK before the clock starts
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    for loader in loaders:
        assert loader.stdin is not None
        loader.stdin.write("\n")
        loader.stdin.flush()
    outputs = [json.loads(loader.communicate()[0]) for loader in loaders]
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the loaders, reaped by communicate()
    client_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    latencies = sorted(x for out in outputs for x in out["latencies"])
    return {
        "calls": len(latencies),
        "elapsed": elapsed,
        "failures": sum(out["failures"] for out in outputs),
        "latencies": latencies,
        "client_cpu": client_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", default="8,64")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    results: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="http-load-", dir=REPO / "bench" / "results") as scratch:
        for round_number in range(args.rounds):
            order = (1, 2) if round_number % 2 == 0 else (2, 1)
            for workers in order:
                log = Path(scratch) / f"server-{workers}-{round_number}.log"
                work = Path(scratch) / f"work-{workers}-{round_number}"
                work.mkdir()
                process, url = start_server(workers, str(work), log)
                try:
                    wait_ready(url.rsplit("/", 1)[0], workers)
                    for count in clients:
                        cpu0 = tree_cpu(process.pid)
                        load = one_load(url, count, args.calls, args.client_processes)
                        cpu = tree_cpu(process.pid) - cpu0
                        lat = load["latencies"]
                        assert isinstance(lat, list)
                        row = {
                            "calls_per_second": load["calls"] / load["elapsed"],  # type: ignore[operator]
                            "p50_ms": 1000 * statistics.median(lat),
                            "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
                            "failures": load["failures"],
                            "server_cpu_ms_per_call": 1000 * cpu / max(1, load["calls"]),  # type: ignore[arg-type]
                            "client_cpu_ms_per_call": 1000 * load["client_cpu"] / max(1, load["calls"]),  # type: ignore[operator,arg-type]
                        }
                        results.setdefault(f"{workers} worker(s), {count} clients", []).append(row)  # type: ignore[arg-type]
                        print(  # noqa: T201  (a benchmark prints its numbers)
                            f"round {round_number} workers={workers} clients={count}: "
                            + ", ".join(f"{k} {v:.1f}" for k, v in row.items()),
                            flush=True,
                        )
                finally:
                    process.send_signal(signal.SIGTERM)
                    process.wait(60)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    lines = [
        f"# HTTP load, {args.calls} calls per client, {args.rounds} rounds, "
        f"{args.client_processes} client processes, {os.cpu_count()} CPUs",
        "",
        "| setup | calls/s (median of rounds) | p50 ms | p99 ms | failures | server CPU ms/call | client CPU ms/call |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, rows in results.items():
        med = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
        fails = sum(row["failures"] for row in rows)
        cells = (
            f"{med['calls_per_second']:.0f}",
            f"{med['p50_ms']:.1f}",
            f"{med['p99_ms']:.1f}",
            f"{fails:.0f}",
            f"{med['server_cpu_ms_per_call']:.2f}",
            f"{med['client_cpu_ms_per_call']:.2f}",
        )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for count in clients:
        one, two = (results.get(f"{w} worker(s), {count} clients") for w in (1, 2))
        if one and two:
            ratio = statistics.median(r["calls_per_second"] for r in two) / statistics.median(
                r["calls_per_second"] for r in one
            )
            lines.append(f"\n{count} clients: 2 workers / 1 worker throughput = {ratio:.2f}x")
    report = "\n".join(lines) + "\n"
    print(report)  # noqa: T201
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"http-load-{stamp}.md").write_text(report)
    (out / f"http-load-{stamp}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
