"""The measurements: preflight, then the four scenarios, each of which starts the servers it needs,
drives them and returns its part of the report (a dict that goes to the JSON as is).

- preflight: every server started once; one that cannot start or run print(1) stops the bench;
- scenario_calls: trivial-call latency against the ping floor of the same connection, CPU per call
  (the server's tree, and the whole machine's), paced trivial calls (PACE after the previous answer),
  a CPU-bound snippet, throughput at each concurrency level; one connection per server;
- scenario_flood: a run writes 1 GiB to stdout: server RSS growth, and the kill latency read from
  the output's own timestamps (analyse_flood);
- scenario_startup: spawn to the initialize response, against a bare `import mcp.server.lowlevel`;
- scenario_memory: idle RSS/PSS of the server, and per pooled interpreter (RUNNER_POOL_SIZE 0 vs 8).

Servers take turns batch by batch, the first one changing each time (rotate), so that machine
noise hits all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .drivers import CallResult, Conn, RawConn, ServerGone, open_conn, run_concurrently
from .procfs import comm, descendants, machine_busy, proc_pss, proc_status, reset_peak_rss, tree_cpu
from .servers import Launch, ServerSpec, server_config_line
from .stats import summary
from .workloads import (
    BARE_IMPORT,
    BARE_IMPORT_CODE,
    BARE_IMPORT_EXIT,
    CALL_TIMEOUT,
    CONCURRENCY_LEVELS,
    CPU_CODE,
    CPU_EXPECTED,
    FLOOD_MARK,
    FLOOD_TOTAL,
    PACE,
    THROUGHPUT_ENV,
    TRIVIAL_CODE,
    Params,
    flood_code,
)

RSS_SAMPLE_INTERVAL = 0.002


def say(message: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def rotate(items: Sequence[Any], by: int) -> list[Any]:
    """`items` rotated left by `by`: who goes first changes from batch to batch."""
    if not items:
        return []
    by %= len(items)
    return [*items[by:], *items[:by]]


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
        # The whole machine's CPU (client, server, zygotes, runs, kernel threads) and wall time over
        # each server's back-to-back calls: what one call costs all the cores, and how busy they were.
        busy = {c.spec.label: 0.0 for c in conns}
        wall = {c.spec.label: 0.0 for c in conns}
        for batch in range(p.trivial_calls // p.batch):
            for conn in rotate(conns, batch):
                label = conn.spec.label
                for _ in range(p.batch):
                    pings[label].append(await conn.ping())
                busy0, wall0 = machine_busy(), time.perf_counter()
                for _ in range(p.batch):
                    result = await conn.call(TRIVIAL_CODE, "1")
                    lat[label].append(result.latency)
                    if result.run_duration is not None:
                        durations[label].append(result.run_duration)
                    if not result.ok:
                        failures[label].append(result.problem)
                wall[label] += time.perf_counter() - wall0
                # What the last call left to do (refill, teardown, a few ms) is its CPU too; not longer,
                # or the rest of the shared machine's CPU counts as well.
                await asyncio.sleep(0.01)
                busy[label] += machine_busy() - busy0
        await asyncio.sleep(0.5)  # the last refills finish
        cpu_per_call: dict[str, dict[str, float]] = {}
        for conn in conns:
            if conn.pid is not None:
                (own0, kids0), (own1, kids1) = cpu_before[conn.spec.label], tree_cpu(conn.pid)
                n = len(lat[conn.spec.label])
                cpu_per_call[conn.spec.label] = {"server": (own1 - own0) / n, "children": (kids1 - kids0) / n}
        say(f"[{mode}] paced trivial calls: {p.paced_calls} each, {PACE * 1000:.0f} ms after the previous answer")
        paced: dict[str, list[float]] = {c.spec.label: [] for c in conns}
        for i in range(p.paced_calls):
            for conn in rotate(conns, i):
                await asyncio.sleep(PACE)
                result = await conn.call(TRIVIAL_CODE, "1")
                paced[conn.spec.label].append(result.latency)
                if not result.ok:
                    failures[conn.spec.label].append(result.problem)
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
                "trivial_paced": summary(paced[label]),
                "trivial_machine": {
                    "busy_cpu_per_call": busy[label] / len(lat[label]),
                    "busy_share": busy[label] / ((os.cpu_count() or 1) * wall[label]),
                    "cpus": os.cpu_count(),
                },
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
