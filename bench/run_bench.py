"""Benchmark harness of issue 5: the real server against a naive baseline and the no-op floor.

    python bench/run_bench.py [--quick] [--out DIR] [--server-env K=V ...] [--variant LABEL:K=V[,K=V...] ...]
                              [--server-commit REV | --server-root DIR] [--only calls,flood,startup,memory]

e.g. posix-spawn against fork-server, both against the naive baseline, on the committed runner/:

    python bench/run_bench.py --server-commit HEAD \
        --variant posix-spawn:RUNNER_SANDBOX=none,RUNNER_SPAWN_MODE=posix-spawn \
        --variant fork-server:RUNNER_SPAWN_MODE=fork-server

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
RSS growth, and the time from crossing RUNNER_MAX_OUTPUT_BYTES to the kill, from timestamps the run
writes into its own output: see `analyse_flood`); start-up to the initialize response against a
bare `import mcp.server.lowlevel`; idle RSS/PSS and per pooled interpreter (RUNNER_POOL_SIZE 0 vs 8).

Prints absolute numbers and the ratios the issue's targets are stated in, writes
`bench-<timestamp>.json` and `.md` (and the servers' stderr logs) to --out (default
bench/results/). This is a script that prints numbers: nothing here asserts on time. --quick
takes about a minute with one variant; the full run about 5 minutes (7-10 with three variants).

The server runs from the working tree (--server-root, default this repository) or from a commit
exported to bench/results/server-SHA/ (--server-commit). Not from under /tmp: the bwrap sandbox
mounts its own /tmp over it and the runs cannot find runner/bootstrap.py (the preflight says so).

--server-env is given to every real-server variant (never to the naive baseline, which reads the
same RUNNER_* limits' defaults); nothing the caller does not ask for is passed, so e.g.
RUNNER_SPAWN_MODE is set only with `--variant fork:RUNNER_SPAWN_MODE=fork-server`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# harness/ is next to this file: on sys.path already when this runs as a script, not when it is imported.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.drivers import CallResult, Conn, RawConn, ServerGone, open_conn, run_concurrently
from harness.procfs import comm, descendants, proc_pss, proc_status, reset_peak_rss, tree_cpu
from harness.servers import (
    BENCH_DIR,
    REPO,
    Launch,
    ServerSpec,
    build_specs,
    describe_root,
    export_commit,
    server_config_line,
)
from harness.stats import ratio, summary
from harness.workloads import (
    BARE_IMPORT,
    BARE_IMPORT_CODE,
    BARE_IMPORT_EXIT,
    CALL_TIMEOUT,
    CONCURRENCY_LEVELS,
    CPU_CODE,
    CPU_EXPECTED,
    CPU_N,
    FLOOD_CODE,
    FLOOD_MARK,
    FLOOD_TOTAL,
    FULL,
    QUICK,
    TARGETS,
    THROUGHPUT_ENV,
    TRIVIAL_CODE,
    Params,
    flood_code,
)

RSS_SAMPLE_INTERVAL = 0.002


def rotate(items: Sequence[Any], by: int) -> list[Any]:
    """`items` rotated left by `by`: who goes first changes from batch to batch."""
    if not items:
        return []
    by %= len(items)
    return [*items[by:], *items[:by]]


# --- scenarios -------------------------------------------------------------------------------------


def say(message: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


async def scenario_calls(mode: str, specs: list[ServerSpec], launch: Launch, p: Params) -> dict[str, Any]:
    """Trivial-call latency, ping floor, CPU-bound latency and throughput, all on one connection per server."""
    out: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        conns: list[Conn] = []
        for spec in specs:
            conns.append(await open_conn(mode, spec, launch, f"calls-{mode}", stack, THROUGHPUT_ENV))
        await asyncio.sleep(1.0)  # pools fill
        say(f"[{mode}] warm-up")
        for conn in conns:
            for _ in range(p.warmup):
                await conn.ping()
                await conn.call(TRIVIAL_CODE, "1")
            await conn.call(CPU_CODE, CPU_EXPECTED)
        lat: dict[str, list[float]] = {c.spec.label: [] for c in conns}
        pings: dict[str, list[float]] = {c.spec.label: [] for c in conns}
        durations: dict[str, list[float]] = {c.spec.label: [] for c in conns}
        failures: dict[str, list[str]] = {c.spec.label: [] for c in conns}
        say(f"[{mode}] trivial latency and ping floor: {p.trivial_calls} each, batches of {p.batch}, interleaved")
        cpu_before = {c.spec.label: tree_cpu(c.pid) for c in conns if c.pid is not None}
        for batch in range(p.trivial_calls // p.batch):
            for conn in rotate(conns, batch):
                label = conn.spec.label
                for _ in range(p.batch):
                    pings[label].append(await conn.ping())
                for _ in range(p.batch):
                    result = await conn.call(TRIVIAL_CODE, "1")
                    lat[label].append(result.latency)
                    if result.run_duration is not None:
                        durations[label].append(result.run_duration)
                    if not result.ok:
                        failures[label].append(result.problem)
        await asyncio.sleep(0.5)  # the last refills finish
        cpu_per_call: dict[str, dict[str, float]] = {}
        for conn in conns:
            if conn.pid is not None:
                (own0, kids0), (own1, kids1) = cpu_before[conn.spec.label], tree_cpu(conn.pid)
                n = len(lat[conn.spec.label])
                cpu_per_call[conn.spec.label] = {"server": (own1 - own0) / n, "children": (kids1 - kids0) / n}
        say(f"[{mode}] CPU-bound latency: {p.cpu_calls} calls each")
        cpu: dict[str, list[float]] = {c.spec.label: [] for c in conns}
        cpu_run: dict[str, list[float]] = {c.spec.label: [] for c in conns}
        cpu_self: dict[str, list[float]] = {c.spec.label: [] for c in conns}
        for i in range(p.cpu_calls):
            for conn in rotate(conns, i):
                result = await conn.call(CPU_CODE, CPU_EXPECTED)
                cpu[conn.spec.label].append(result.latency)
                if result.run_duration is not None:
                    cpu_run[conn.spec.label].append(result.run_duration)
                if result.structured and result.structured.get("cpu_seconds") is not None:
                    cpu_self[conn.spec.label].append(result.structured["cpu_seconds"])
                if not result.ok:
                    failures[conn.spec.label].append(result.problem)
        throughput: dict[str, dict[str, Any]] = {}
        per_round = max(1, p.throughput_calls // p.throughput_rounds)
        for level in CONCURRENCY_LEVELS:
            say(f"[{mode}] throughput at concurrency {level}: {per_round * p.throughput_rounds} calls each")
            elapsed = {c.spec.label: 0.0 for c in conns}
            ping_elapsed = {c.spec.label: 0.0 for c in conns}
            done = {c.spec.label: 0 for c in conns}
            for rnd in range(p.throughput_rounds):
                for conn in rotate(conns, rnd + level):
                    label = conn.spec.label
                    took, _ = await run_concurrently(conn.ping, per_round, level)
                    ping_elapsed[label] += took

                    async def trivial(conn: Conn = conn) -> CallResult:
                        return await conn.call(TRIVIAL_CODE, "1")

                    took, results = await run_concurrently(trivial, per_round, level)
                    elapsed[label] += took
                    done[label] += len(results)
                    failures[label] += [r.problem for r in results if not r.ok]
            for conn in conns:
                label = conn.spec.label
                throughput.setdefault(label, {})[str(level)] = {
                    "calls": done[label],
                    "seconds": elapsed[label],
                    "calls_per_s": done[label] / elapsed[label],
                    "ping_per_s": done[label] / ping_elapsed[label],
                }
        for conn in conns:
            label = conn.spec.label
            out[label] = {
                "kind": conn.spec.kind,
                "trivial": summary(lat[label]),
                "trivial_samples": lat[label],
                "ping": summary(pings[label]),
                "ping_samples": pings[label],
                "trivial_run_duration": summary(durations[label]),
                "trivial_cpu_per_call": cpu_per_call.get(label),
                "cpu": summary(cpu[label]),
                "cpu_run_duration": summary(cpu_run[label]),
                "cpu_seconds_in_run": summary(cpu_self[label]),
                "throughput": throughput[label],
                "failures": len(failures[label]),
                "failure_examples": sorted(set(failures[label]))[:5],
            }
            if conn.spec.kind == "runner":
                out[label]["server_config"] = server_config_line(launch.log_path(conn.spec, f"calls-{mode}"))
    return out


async def sample_rss(pid: int, peak: list[int], stop: asyncio.Event) -> None:
    """Follow VmRSS of `pid` every RSS_SAMPLE_INTERVAL until `stop`; the maximum goes to peak[0]."""
    while not stop.is_set():
        rss = proc_status(pid).get("VmRSS")
        if rss is not None and rss > peak[0]:
            peak[0] = rss
        await asyncio.sleep(RSS_SAMPLE_INTERVAL)


def analyse_flood(structured: dict[str, Any] | None) -> dict[str, Any]:
    """From a real server's output_limit result, estimate the time from crossing the budget to the kill.

    The run writes 4 KiB records, each starting with the CLOCK_MONOTONIC time at which it was about
    to be written and the byte count before it. The server keeps the head and the tail of what it
    read; its tail ends where it stopped reading, right after the count crossed the budget. So:
      t_first  = stamp of the first record (head): the run's code had started by then;
      t_exit   = t_first + duration_seconds (the server's own time from code delivery to exit,
                 same clock; delivery happened before t_first, so this is a little late);
      t_cross  = stamp of the last complete record in the tail: written before the server read it,
                 and the server crossed the budget on (or after) reading it, so this is early;
      kill latency <= t_exit - t_cross. Both errors make the estimate larger, never smaller.
    """
    if not structured:
        return {"method_ok": False, "why": "no structured result"}
    head_and_tail = structured.get("stdout", "")
    marks = [(int(t), int(n)) for t, n in FLOOD_MARK.findall(head_and_tail)]
    duration = structured.get("duration_seconds")
    info: dict[str, Any] = {
        "status": structured.get("status"),
        "stdout_bytes_read": structured.get("stdout_bytes"),
        "duration_s": duration,
        "records_seen": len(marks),
    }
    if len(marks) < 2 or duration is None:
        info.update(method_ok=False, why="no timestamp records in head and tail")
        return info
    t_first = marks[0][0] / 1e9
    t_cross, n_cross = marks[-1][0] / 1e9, marks[-1][1]
    t_exit = t_first + duration
    info.update(
        method_ok=True,
        first_record_s=0.0,
        crossing_record_at_s=t_cross - t_first,
        crossing_record_offset=n_cross,
        kill_latency_upper_s=t_exit - t_cross,
        write_rate_mib_s=(n_cross / (t_cross - t_first) / (1 << 20)) if t_cross > t_first else None,
    )
    return info


def naive_flood_bytes(wanted_mib: int) -> int:
    """How much the naive baseline is flooded with: it keeps everything (about 7x the bytes in RSS, as
    measured here), so the size shrinks (by halves) to fit in an eighth of the available memory."""
    available = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    size = wanted_mib << 20
    while available and size > (16 << 20) and size * 8 > available:
        size //= 2
    return size


async def scenario_flood(specs: list[ServerSpec], launch: Launch, p: Params) -> dict[str, Any]:
    """A run writes 1 GiB to stdout: server peak RSS growth, and for the real server the kill latency.

    The naive baseline buffers all of it (and answers with all of it, twice: text and structured
    content), so it is flooded once, with `naive_flood_mib` (fitted to the free memory).
    """
    out: dict[str, list[dict[str, Any]]] = {s.label: [] for s in specs}
    naive_total = naive_flood_bytes(p.naive_flood_mib)
    for rep in range(p.flood_reps):
        for spec in rotate(specs, rep):
            if spec.kind == "naive" and rep > 0:
                continue
            total = naive_total if spec.kind == "naive" else FLOOD_TOTAL
            say(f"[flood] {spec.label} writes {total >> 20} MiB, repetition {rep + 1}/{p.flood_reps}")
            conn = await RawConn.start(spec, launch, "flood")
            try:
                await conn.initialize()
                await conn.call(TRIVIAL_CODE, "1")
                await asyncio.sleep(1.0)  # let the pool refill settle
                before = proc_status(conn.pid)
                reset = reset_peak_rss(conn.pid)
                peak = [before.get("VmRSS", 0)]
                stop = asyncio.Event()
                sampler = asyncio.create_task(sample_rss(conn.pid, peak, stop))
                try:
                    result = await asyncio.wait_for(conn.call(flood_code(total), None, CALL_TIMEOUT), 300)
                except TimeoutError:
                    result = None
                stop.set()
                await sampler
                after = proc_status(conn.pid)
                rss0 = before.get("VmRSS", 0)
                growth_sampled = peak[0] - rss0
                growth_hwm = after.get("VmHWM", 0) - rss0 if reset else None
                entry: dict[str, Any] = {
                    "flood_bytes": total,
                    "rss_before": rss0,
                    "peak_rss_sampled": peak[0],
                    "vmhwm_after": after.get("VmHWM"),
                    "hwm_reset": reset,
                    "rss_growth_sampled": growth_sampled,
                    "rss_growth_hwm": growth_hwm,
                    "rss_growth": max(growth_sampled, growth_hwm or 0),
                }
                if result is None:
                    entry["answered"] = False
                else:
                    entry.update(answered=True, latency_s=result.latency, response_bytes=result.size)
                    if spec.kind == "runner":
                        entry.update(analyse_flood(result.structured))
                out[spec.label].append(entry)
            finally:
                await conn.close()
    return out


async def scenario_startup(specs: list[ServerSpec], launch: Launch, p: Params) -> dict[str, Any]:
    """Spawn to initialize response, against `python -c "import mcp.server.lowlevel"` spawn to exit."""
    subjects: list[tuple[str, ServerSpec | None, dict[str, str]]] = [(BARE_IMPORT, None, {})]
    for spec in specs:
        subjects.append((spec.label, spec, {}))
        if spec.kind == "runner":
            subjects.append((f"{spec.label} (RUNNER_POOL_SIZE=0)", spec, {"RUNNER_POOL_SIZE": "0"}))
    times: dict[str, list[float]] = {name: [] for name, _, _ in subjects}
    times[BARE_IMPORT_EXIT] = []
    for rep in range(p.startup_reps):
        say(f"[startup] repetition {rep + 1}/{p.startup_reps}")
        for name, spec, extra in rotate(subjects, rep):
            if spec is None:
                # Spawn to a line written right after the import, as a server's clock stops at its first
                # line; the exit (~0.25 s of module teardown here) is timed apart and not compared.
                start = time.perf_counter()
                proc = await asyncio.create_subprocess_exec(
                    *(launch.python, "-c", BARE_IMPORT_CODE),
                    stdout=asyncio.subprocess.PIPE,
                    cwd=launch.root,
                    env=launch.env(None),
                )
                assert proc.stdout is not None
                await proc.stdout.readline()
                times[name].append(time.perf_counter() - start)
                await proc.wait()
                times[BARE_IMPORT_EXIT].append(time.perf_counter() - start)
                continue
            # A real server's spec env wins over the scenario's pool size only if it sets one itself.
            conn = await RawConn.start(spec, launch, "startup", extra)
            try:
                times[name].append(await conn.initialize())
            finally:
                await conn.close()
    return {name: summary(values) | {"samples": values} for name, values in times.items()}


async def wait_settled(pid: int, pythons: int, limit: float = 20.0) -> bool:
    """Wait until at least `pythons` interpreter descendants exist and the tree stops changing."""
    deadline = time.monotonic() + limit
    last: tuple[Any, ...] | None = None
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        kids = sorted(descendants(pid))
        shape = tuple((kid, proc_status(kid).get("VmRSS")) for kid in kids)
        count = sum(1 for kid in kids if comm(kid).startswith("python"))
        if shape != last:
            last, stable_since = shape, time.monotonic()
        elif count >= pythons and time.monotonic() - stable_since >= 0.75:
            return True
        await asyncio.sleep(0.05)
    return False


async def scenario_memory(specs: list[ServerSpec], launch: Launch, p: Params) -> dict[str, Any]:
    """Idle server RSS, and RSS/PSS per pooled interpreter from RUNNER_POOL_SIZE 0 vs 8."""
    out: dict[str, Any] = {}
    for rep in range(p.memory_reps):
        for spec in rotate(specs, rep):
            sizes = (0, 8) if spec.kind == "runner" else (None,)
            for size in sizes:
                say(f"[memory] {spec.label} pool={size}, repetition {rep + 1}/{p.memory_reps}")
                extra = {} if size is None else {"RUNNER_POOL_SIZE": str(size)}
                conn = await RawConn.start(spec, launch, "memory", extra)
                try:
                    await conn.initialize()
                    await asyncio.sleep(0.5)
                    settled = await wait_settled(conn.pid, size or 0)
                    kids = descendants(conn.pid)
                    by_comm: dict[str, int] = {}
                    for kid in kids:
                        by_comm[comm(kid)] = by_comm.get(comm(kid), 0) + 1
                    entry = {
                        "settled": settled,
                        "server_rss": proc_status(conn.pid).get("VmRSS"),
                        "server_pss": proc_pss(conn.pid),
                        "descendants": len(kids),
                        "descendants_by_name": by_comm,
                        "descendants_rss": sum(proc_status(kid).get("VmRSS", 0) for kid in kids),
                        "descendants_pss": sum(proc_pss(kid) or 0 for kid in kids),
                    }
                finally:
                    await conn.close()
                out.setdefault(spec.label, {}).setdefault(str(size), []).append(entry)
    for spec in specs:
        if spec.kind != "runner":
            continue
        runs = out[spec.label]
        zero = statistics.median(e["descendants_rss"] for e in runs["0"])
        eight = statistics.median(e["descendants_rss"] for e in runs["8"])
        zero_pss = statistics.median(e["descendants_pss"] for e in runs["0"])
        eight_pss = statistics.median(e["descendants_pss"] for e in runs["8"])
        runs["per_pooled_interpreter_rss"] = (eight - zero) / 8
        runs["per_pooled_interpreter_pss"] = (eight_pss - zero_pss) / 8
    return out


# --- report ----------------------------------------------------------------------------------------


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds for the table."""
    return "-" if seconds is None or seconds != seconds else f"{seconds * 1000:.2f}"


def mib(n: float | None) -> str:
    """Bytes as MiB for the table."""
    return "-" if n is None else f"{n / (1 << 20):.1f}"


def times(x: float | None) -> str:
    """A ratio for the table."""
    return "-" if x is None else f"{x:.2f}x"


def verdict(ok: bool | None) -> str:
    """Target met?"""
    return "n/a" if ok is None else ("yes" if ok else "**no**")


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError):
        memory = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    try:
        mcp_version = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        mcp_version = "?"
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory": memory,
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "mcp": mcp_version,
        "uid": os.getuid(),
        "loadavg_start": os.getloadavg(),
    }


def row(*cells: object) -> str:
    """One markdown table row."""
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def header(*titles: str) -> list[str]:
    """A markdown table's header and rule."""
    return [row(*titles), row(*["---"] * len(titles))]


def target_rows(report: dict[str, Any], runners: list[str], naive: str | None) -> list[str]:
    """One row per target, server and mode: measured value, ratio, met or not."""
    rows: list[str] = []
    for mode, by_label in report.get("calls", {}).items():
        nv = by_label.get(naive, {}) if naive else {}
        for label in runners:
            r = by_label.get(label)
            if not r:
                continue
            where = f"{label} [{mode}]" + (f" ({r['failures']} failed calls)" if r["failures"] else "")
            p50, ping50 = r["trivial"].get("p50"), r["ping"].get("p50")
            naive50 = nv.get("trivial", {}).get("p50")
            vs_ping, vs_naive = ratio(p50, ping50), ratio(naive50, p50)
            rows.append(
                row(
                    TARGETS["trivial_vs_ping"],
                    where,
                    f"{ms(p50)} ms vs ping {ms(ping50)} ms",
                    times(vs_ping),
                    verdict(None if vs_ping is None else vs_ping <= 2),
                )
            )
            rows.append(
                row(
                    TARGETS["trivial_vs_naive"],
                    where,
                    f"{ms(p50)} ms vs naive {ms(naive50)} ms",
                    times(vs_naive),
                    verdict(None if vs_naive is None else vs_naive >= 10),
                )
            )
            tp = r["throughput"].get("8", {}).get("calls_per_s")
            ntp = nv.get("throughput", {}).get("8", {}).get("calls_per_s")
            tp_ratio = ratio(tp, ntp)
            measured = f"{tp:.1f} vs naive {ntp:.1f} calls/s" if tp and ntp else "-"
            rows.append(
                row(
                    TARGETS["throughput_c8"],
                    where,
                    measured,
                    times(tp_ratio),
                    verdict(None if tp_ratio is None else tp_ratio >= 5),
                )
            )
    flood = report.get("flood", {})
    for label in runners:
        entries = flood.get(label, [])
        if not entries:
            continue
        growth = max(e["rss_growth"] for e in entries)
        rows.append(
            row(
                TARGETS["flood_rss"],
                f"{label} [raw]",
                f"max {mib(growth)} MiB over {len(entries)} runs",
                "-",
                verdict(growth <= 10 * (1 << 20)),
            )
        )
        kills = [e["kill_latency_upper_s"] for e in entries if e.get("method_ok")]
        if kills:
            rows.append(
                row(
                    TARGETS["flood_kill"],
                    f"{label} [raw]",
                    f"max {ms(max(kills))} ms (upper bound)",
                    "-",
                    verdict(max(kills) <= 0.1),
                )
            )
    startup = report.get("startup", {})
    bare = startup.get(BARE_IMPORT, {})
    for label in runners:
        s = startup.get(label, {})
        r = ratio(s.get("p50"), bare.get("p50"))
        r_min = ratio(s.get("min"), bare.get("min"))
        rows.append(
            row(
                TARGETS["startup"],
                f"{label} [raw]",
                f"{ms(s.get('p50'))} ms vs {ms(bare.get('p50'))} ms (medians; minima {ms(s.get('min'))} vs "
                f"{ms(bare.get('min'))}: {times(r_min)})",
                times(r),
                verdict(None if r is None else r <= 1.15),
            )
        )
    return rows


def call_rows(by_label: dict[str, Any], mode: str, naive: str | None) -> list[str]:
    """Latency, CPU and throughput rows of one client mode."""
    rows: list[str] = []
    nv = by_label.get(naive, {}) if naive else {}

    def vs_naive(r: dict[str, Any], naive_value: float | None, value: float | None, faster_is_bigger: bool) -> str:
        if r["kind"] == "naive":
            return "-"
        return times(ratio(value, naive_value) if faster_is_bigger else ratio(naive_value, value))

    cpu_title = f"CPU-bound (sum of squares, {CPU_N:,})"
    for key, title in (("trivial", "trivial `print(1)`"), ("cpu", cpu_title)):
        for stat in ("p50", "p99", "mean"):
            for label, r in by_label.items():
                value, floor = r[key].get(stat), r["ping"].get(stat)
                naive_value = nv.get(key, {}).get(stat)
                rows.append(
                    row(
                        f"{title} {stat}",
                        mode,
                        label,
                        ms(value),
                        ms(floor),
                        times(ratio(value, floor)),
                        vs_naive(r, naive_value, value, faster_is_bigger=False),
                    )
                )
    for label, r in by_label.items():
        if r["kind"] == "runner":
            d = r["trivial_run_duration"].get("p50")
            rows.append(
                row(
                    "trivial: run duration p50 reported by the server (code delivery to exit)",
                    mode,
                    label,
                    ms(d),
                    "",
                    "",
                    "",
                )
            )
    for label, r in by_label.items():
        c = r.get("trivial_cpu_per_call")
        if c:
            rows.append(
                row(
                    "trivial: CPU per call, server + everything under it (/proc/PID/stat)",
                    mode,
                    label,
                    f"{ms(c['server'])} + {ms(c['children'])}",
                    "",
                    "",
                    "",
                )
            )
    for level in CONCURRENCY_LEVELS:
        for label, r in by_label.items():
            t = r["throughput"][str(level)]
            naive_value = nv.get("throughput", {}).get(str(level), {}).get("calls_per_s")
            rows.append(
                row(
                    f"throughput c={level} (calls/s)",
                    mode,
                    label,
                    f"{t['calls_per_s']:.1f}",
                    f"{t['ping_per_s']:.0f}",
                    f"{times(ratio(t['ping_per_s'], t['calls_per_s']))} slower",
                    vs_naive(r, naive_value, t["calls_per_s"], faster_is_bigger=True),
                )
            )
    bad = {label: r["failures"] for label, r in by_label.items() if r["failures"]}
    if bad:
        rows.append(f"\nFailed calls in {mode} mode: {bad} (examples in the JSON).\n")
    return rows


def render(report: dict[str, Any]) -> str:
    """The markdown report: targets first, then every scenario's absolute numbers."""
    m = report["machine"]
    lines = [
        f"# python-runner-mcp benchmark, {report['started']}",
        "",
        f"Machine: {m['cpu']}, {m['cpus']} CPUs ({m['affinity']} usable), {m['memory']} RAM, Linux {m['kernel']}, "
        f"Python {m['python']}, mcp {m['mcp']}, uid {m['uid']}. Load average at start {m['loadavg_start']}, "
        f"at end {report.get('loadavg_end')}. Mode: {'--quick' if report['quick'] else 'full'}; "
        f"took {report.get('elapsed_s', 0):.0f} s. Server checkout: `{report['server_root']}` ({report['commit']}).",
        "",
    ]
    for spec in report["servers"]:
        env = " ".join(f"{k}={v}" for k, v in spec["env"].items()) or "(defaults)"
        lines.append(f"- **{spec['label']}** ({spec['kind']}): env {env}")
        if spec.get("server_config"):
            lines.append(f"  - server reports: `{spec['server_config']}`")
    lines += [
        "- **ping floor**: a `ping` round trip on the same connection as the calls it is compared with.",
        "- Modes: **raw** = hand-written JSON-RPC lines on the server's stdio (client cost out); "
        '**client** = `mcp.Client(..., mode="legacy")` over the SDK\'s stdio transport.',
        f"- Call scenarios run with {THROUGHPUT_ENV} on every real server; all servers alternate batch by batch.",
        "",
    ]
    runners = [s["label"] for s in report["servers"] if s["kind"] == "runner"]
    naive = next((s["label"] for s in report["servers"] if s["kind"] == "naive"), None)
    targets = target_rows(report, runners, naive)
    if targets:
        lines += ["## Targets (issue 5)", "", *header("target", "server [mode]", "measured", "ratio", "met"), *targets]
        lines.append("")
    calls = report.get("calls", {})
    if calls:
        lines += [
            "## Calls: latency (ms) and throughput (calls/s)",
            "",
            "Latency: from writing the request to reading its response. `x ping`: over the ping floor of the same "
            "connection (same statistic). `vs naive`: how many times faster than the naive baseline (same mode, "
            "statistic or concurrency).",
            "",
            *header("metric", "mode", "server", "value", "ping floor", "x ping", "vs naive"),
        ]
        for mode, by_label in calls.items():
            lines += call_rows(by_label, mode, naive)
        lines.append("")
    flood = report.get("flood", {})
    if flood:
        lines += [
            "## Output flood: a run writes 1 GiB to stdout",
            "",
            "RSS growth: peak server RSS during the call minus its RSS just before (peak: the larger of VmRSS "
            f"sampled every {RSS_SAMPLE_INTERVAL * 1000:.0f} ms and VmHWM after a reset through /proc/PID/clear_refs). "
            "Kill latency: the run stamps every 4 KiB record with CLOCK_MONOTONIC and the server keeps the head and "
            "tail of what it read; `t_exit = first stamp + the server's duration_seconds`, `t_cross = last stamp in "
            "the tail` (the last record read before the count crossed the budget); `t_exit - t_cross` is an upper "
            "bound, both errors make it larger. The naive baseline keeps everything, so it is flooded once and "
            "with less when memory is short (column 2).",
            "",
            *header(
                "server",
                "run writes (MiB)",
                "RSS before (MiB)",
                "peak growth (MiB)",
                "status",
                "bytes read",
                "kill latency, upper bound (ms)",
                "call latency (ms)",
                "response (bytes)",
            ),
        ]
        for label, entries in flood.items():
            for e in entries:
                lines.append(
                    row(
                        label,
                        e["flood_bytes"] >> 20,
                        mib(e["rss_before"]),
                        mib(e["rss_growth"]),
                        e.get("status", "-"),
                        e.get("stdout_bytes_read", "-"),
                        ms(e.get("kill_latency_upper_s")),
                        ms(e.get("latency_s")),
                        e.get("response_bytes", "no answer"),
                    )
                )
        lines.append("")
    startup = report.get("startup", {})
    if startup:
        bare = startup.get(BARE_IMPORT, {}).get("p50")
        lines += [
            "## Start-up: spawn to initialize response",
            "",
            "Bare import: spawn to a line the interpreter writes right after `import mcp.server.lowlevel` (its exit, "
            "with module teardown, is the extra row and is not compared). Each server: spawn to its initialize "
            "response (the request is already in its stdin pipe).",
            "",
            *header("subject", "p50 (ms)", "min (ms)", "max (ms)", "x bare import (p50)", "x bare import (min)"),
        ]
        bare_min = startup.get(BARE_IMPORT, {}).get("min")
        for name, s in startup.items():
            lines.append(
                row(
                    name,
                    ms(s.get("p50")),
                    ms(s.get("min")),
                    ms(s.get("max")),
                    times(ratio(s.get("p50"), bare)),
                    times(ratio(s.get("min"), bare_min)),
                )
            )
        lines.append("")
    memory = report.get("memory", {})
    if memory:
        lines += [
            "## Memory at idle (after initialize, pool filled)",
            "",
            *header(
                "server",
                "pool",
                "server RSS (MiB)",
                "server PSS (MiB)",
                "descendants",
                "descendants RSS (MiB)",
                "descendants PSS (MiB)",
            ),
        ]
        for label, by_size in memory.items():
            for size, entries in by_size.items():
                if not isinstance(entries, list):
                    continue
                e = entries[-1]
                names = ", ".join(f"{n} x{c}" for n, c in sorted(e["descendants_by_name"].items())) or "none"
                lines.append(
                    row(
                        label,
                        size if size != "None" else "-",
                        mib(e["server_rss"]),
                        mib(e["server_pss"]),
                        names,
                        mib(e["descendants_rss"]),
                        mib(e["descendants_pss"]),
                    )
                )
        for label, by_size in memory.items():
            if "per_pooled_interpreter_rss" in by_size:
                lines.append(
                    f"\n{label}: per pooled interpreter, (pool 8 - pool 0) / 8 over every process under the server "
                    f"(sandbox helpers included): RSS {mib(by_size['per_pooled_interpreter_rss'])} MiB, "
                    f"PSS {mib(by_size['per_pooled_interpreter_pss'])} MiB (RSS counts shared pages in every process, "
                    "PSS divides them)."
                )
        lines.append("")
    return "\n".join(lines)


# --- main ------------------------------------------------------------------------------------------


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
        default="calls,flood,startup,memory",
        help="comma-separated scenarios: calls, flood, startup, memory (default: all)",
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
        "--server-commit",
        metavar="REV",
        help="benchmark runner/ as of a commit (exported to bench/results/server-SHA/), not the working tree",
    )
    return parser.parse_args(argv)


async def preflight(specs: list[ServerSpec], launch: Launch) -> None:
    """Start each server once: a bad configuration (exit 2) stops the bench here, with the server's words."""
    for spec in specs:
        conn = await RawConn.start(spec, launch, "preflight")
        try:
            await asyncio.wait_for(conn.initialize(), 60)
            result = await asyncio.wait_for(conn.call(TRIVIAL_CODE, "1"), 60)
        except (ServerGone, TimeoutError, RuntimeError) as exc:
            await conn.close()
            said = conn.log.read_text(errors="replace").strip().splitlines()[-3:]
            raise SystemExit(f"run_bench: server {spec.label!r} did not start: {exc}\n  " + "\n  ".join(said)) from None
        await conn.close()
        if not result.ok:
            hint = ""
            if str(launch.root).startswith(("/tmp/", "/dev/shm/")):
                hint = " (the checkout is under /tmp, which a bwrap sandbox replaces with its own tmpfs)"
            raise SystemExit(
                f"run_bench: server {spec.label!r} cannot run print(1): {result.problem}; see {conn.log}{hint}"
            )


async def main_async(args: argparse.Namespace) -> int:
    """Run the chosen scenarios and write the report."""
    params = QUICK if args.quick else FULL
    modes = tuple(m for m in args.modes.split(",") if m)
    scenarios = {s for s in args.only.split(",") if s}
    unknown = scenarios - {"calls", "flood", "startup", "memory"} | set(modes) - {"raw", "client"}
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
        "workload": {"trivial": TRIVIAL_CODE, "cpu": CPU_CODE, "flood": FLOOD_CODE, "call_timeout": CALL_TIMEOUT},
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
