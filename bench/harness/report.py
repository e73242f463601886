"""The report: render() turns the dict the scenarios filled into the markdown that is printed and
written next to the JSON (targets first, then every scenario's absolute numbers), with the table
helpers it uses; machine() records what the numbers were measured on.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

from .data import TARGETS as DATA_TARGETS
from .data import data_rows
from .egress import egress_rows
from .kept import kept_rows
from .scenarios import RSS_SAMPLE_INTERVAL
from .sessions import session_rows
from .stats import ratio
from .tools import tools_rows
from .view import view_rows
from .workloads import BARE_IMPORT, CONCURRENCY_LEVELS, CPU_N, PACE, TARGETS, THROUGHPUT_ENV


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
            paced50, naive_paced50 = r.get("trivial_paced", {}).get("p50"), nv.get("trivial_paced", {}).get("p50")
            for title, mine, theirs in (
                (DATA_TARGETS["trivial_vs_naive"] + " (issue 12), back to back", p50, naive50),
                (DATA_TARGETS["trivial_vs_naive"] + f" (issue 12), paced {PACE * 1000:.0f} ms", paced50, naive_paced50),
            ):
                faster = ratio(theirs, mine)
                rows.append(
                    row(
                        title,
                        where,
                        f"{ms(mine)} ms vs naive {ms(theirs)} ms",
                        times(faster),
                        verdict(None if faster is None else faster >= 6),
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
    paced_title = f"trivial `print(1)`, paced ({PACE * 1000:.0f} ms after the previous answer)"
    for key, title in (("trivial", "trivial `print(1)`"), ("trivial_paced", paced_title), ("cpu", cpu_title)):
        for stat in ("p50", "p99", "mean"):
            for label, r in by_label.items():
                value, floor = r.get(key, {}).get(stat), r["ping"].get(stat)
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
    for label, r in by_label.items():
        m = r.get("trivial_machine")
        if m:
            rows.append(
                row(
                    "trivial back to back: the whole machine's busy CPU per call (/proc/stat), share of "
                    f"its {m['cpus']} cores busy",
                    mode,
                    label,
                    f"{ms(m['busy_cpu_per_call'])}; {m['busy_share']:.0%}",
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


def isolation_rows(report: dict[str, Any], naive: str | None) -> list[str]:
    """Issue 11's targets: the variant whose server says sandbox=namespaces against the one that says
    spawn_mode=fork-server sandbox=none (their own start-up lines decide, not their labels)."""
    configs = {spec["label"]: spec.get("server_config", "") for spec in report["servers"] if spec["kind"] == "runner"}
    namespaced = next((label for label, line in configs.items() if "sandbox=namespaces" in line), None)
    plain = next(
        (label for label, line in configs.items() if "spawn_mode=fork-server" in line and "sandbox=none" in line), None
    )
    rows: list[str] = []
    for mode, by_label in report.get("calls", {}).items():
        ns = by_label.get(namespaced or "", {})
        if not ns:
            continue
        where = f"{namespaced} [{mode}]"
        if plain and by_label.get(plain):
            p50, plain50 = ns["trivial"].get("p50"), by_label[plain]["trivial"].get("p50")
            slower = ratio(p50, plain50)
            rows.append(
                row(
                    TARGETS["namespaced_vs_plain"],
                    where,
                    f"{ms(p50)} ms vs {plain} {ms(plain50)} ms",
                    times(slower),
                    verdict(None if slower is None else slower <= 1.3),
                )
            )
        tp = ns["throughput"].get("8", {}).get("calls_per_s")
        ntp = by_label.get(naive or "", {}).get("throughput", {}).get("8", {}).get("calls_per_s")
        faster = ratio(tp, ntp)
        rows.append(
            row(
                TARGETS["namespaced_throughput"],
                where,
                f"{tp:.1f} vs naive {ntp:.1f} calls/s" if tp and ntp else "-",
                times(faster),
                verdict(None if faster is None else faster >= 3),
            )
        )
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
    isolation = isolation_rows(report, naive)
    if isolation:
        lines += [
            "## Targets (issue 11: isolated and fast)",
            "",
            *header("target", "server [mode]", "measured", "ratio", "met"),
            *isolation,
            "",
        ]
    data = data_rows(report, naive)
    if data:
        lines += ["## Data work (issue 12)", "", *data]
    sessions = session_rows(report)
    if sessions:
        lines += ["## Sessions (issue 25)", "", *sessions]
    kept = kept_rows(report)
    if kept:
        lines += ["## Kept output (issue 26)", "", *kept]
    tools = tools_rows(report)
    if tools:
        lines += ["## Code mode (issue 49)", "", *tools]
    view = view_rows(report)
    if view:
        lines += ["## The app view (issue 51)", "", *view]
    egress = egress_rows(report)
    if egress:
        lines += ["## Egress floods: the server's CPU", "", *egress]
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
