"""The data scenario of issue 12: a data workload (a 1,000-row DataFrame, `describe()`, one line plot
returned as a PNG) and the trivial `print(1)`, interleaved on one connection per server, against
the naive baseline starting a fresh interpreter from the same package environment per call; and the
memory of the server and its zygotes at rest, and of each data run at its peak.

Every server gets RUNNER_PACKAGES (the real ones build a preloading zygote from it; the naive one
puts its site-packages on the path of each fresh interpreter). The real server returns the figure
the code left open as an image; the naive one is asked to print it, base64-encoded, as text: both
send the same PNG back.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from typing import Any

from .drivers import Conn, open_conn
from .procfs import children_of, descendants, proc_cmdline, proc_status
from .scenarios import rotate, say
from .servers import Launch, ServerSpec
from .stats import summary
from .workloads import TRIVIAL_CODE, Params

DATA_CODE = """\
import numpy as np, pandas as pd
import matplotlib.pyplot as plt
frame = pd.DataFrame({"x": np.arange(1000), "y": np.random.default_rng().normal(size=1000).cumsum()})
frame.plot(x="x", y="y")
print(frame.describe().shape)
"""
# The naive server returns text only: the same PNG, printed.
NAIVE_DATA_CODE = (
    DATA_CODE
    + """\
import base64, io
buffer = io.BytesIO()
plt.gcf().savefig(buffer, format="png")
print(base64.b64encode(buffer.getvalue()).decode())
"""
)
DATA_EXPECTED = "(8, 2)"
TARGETS = {
    "data_vs_naive": "data workload p50 >= 10x faster than the naive baseline",
    "trivial_vs_naive": "trivial call p50 >= 6x faster than the naive baseline",
}


def _ok(conn: Conn, structured: dict[str, Any] | None, text: str) -> str:
    """What is wrong with a data call's answer; '' when it is right."""
    if conn.spec.kind == "runner":
        if not structured or structured.get("status") != "ok":
            return f"status {structured and structured.get('status')}"
        if not structured["stdout"].startswith(DATA_EXPECTED) or len(structured.get("images", [])) != 1:
            return f"stdout {structured['stdout'][:80]!r}, {len(structured.get('images', []))} images"
        return ""
    return "" if DATA_EXPECTED in text else f"answer {text[:80]!r}"


async def scenario_data(mode: str, specs: list[ServerSpec], launch: Launch, p: Params, packages: str) -> dict[str, Any]:
    """Data and trivial latency per server, interleaved; memory at rest and per data run."""
    out: dict[str, Any] = {"packages": packages}
    rounds = max(4, p.trivial_calls // 10)
    async with contextlib.AsyncExitStack() as stack:
        conns = [await open_conn(mode, s, launch, f"data-{mode}", stack, {"RUNNER_PACKAGES": packages}) for s in specs]
        say(f"[data {mode}] warm-up (the preloading zygote starts)")
        for conn in conns:
            for _ in range(3):
                await _data_call(conn)
                await conn.call(TRIVIAL_CODE, "1")
        await asyncio.sleep(1.0)
        for conn in conns:
            if conn.pid is not None:
                out.setdefault("idle", {})[conn.spec.label] = _tree_memory(conn.pid)
        data: dict[str, list[float]] = {c.spec.label: [] for c in conns}
        trivial: dict[str, list[float]] = {c.spec.label: [] for c in conns}
        peaks: dict[str, list[int]] = {c.spec.label: [] for c in conns}
        failures: dict[str, list[str]] = {c.spec.label: [] for c in conns}
        say(f"[data {mode}] {rounds} rounds of one data call and three trivial calls per server, interleaved")
        for n in range(rounds):
            for conn in rotate(conns, n):
                label = conn.spec.label
                latency, problem, structured = await _data_call(conn)
                data[label].append(latency)
                if problem:
                    failures[label].append(problem)
                if structured and structured.get("peak_memory_bytes"):
                    peaks[label].append(structured["peak_memory_bytes"])
                for _ in range(3):
                    result = await conn.call(TRIVIAL_CODE, "1")
                    trivial[label].append(result.latency)
                    if not result.ok:
                        failures[label].append(result.problem)
        for label in data:
            out.setdefault("servers", {})[label] = {
                "data": summary(data[label]),
                "trivial": summary(trivial[label]),
                "peak_memory_bytes": statistics.median(peaks[label]) if peaks[label] else None,
                "failures": failures[label][:10],
                "failure_count": len(failures[label]),
            }
    return out


async def _data_call(conn: Conn) -> tuple[float, str, dict[str, Any] | None]:
    code = DATA_CODE if conn.spec.kind == "runner" else NAIVE_DATA_CODE
    result = await conn.call(code, None, 60.0)
    structured = result.structured
    text = ""
    if structured is not None and conn.spec.kind != "runner":
        text = str(structured.get("result", structured))
    problem = result.problem or _ok(conn, structured, text)
    return result.latency, problem, structured


def _tree_memory(server: int) -> dict[str, Any]:
    """RSS (bytes) of the server, of each zygote (its children running zygote.py; their own forks, the
    pooled runs, share most of their pages), and of everything under the server, summed."""
    kids = descendants(server)
    zygotes = [kid for kid in children_of(server) if "zygote.py" in proc_cmdline(kid)]
    return {
        "server_rss": proc_status(server).get("VmRSS"),
        "zygotes_rss": sorted(proc_status(kid).get("VmRSS", 0) for kid in zygotes),
        "descendants": len(kids),
        "all_descendants_rss": sum(proc_status(kid).get("VmRSS", 0) for kid in kids),
    }


def data_rows(report: dict[str, Any], naive: str | None) -> list[str]:
    """Markdown: the targets of issue 12 and the data scenario's numbers, per mode."""
    lines: list[str] = []
    for mode, scenario in report.get("data", {}).items():
        servers = scenario.get("servers", {})
        base = servers.get(naive) if naive else None
        lines += [
            f"### Data work [{mode}] (RUNNER_PACKAGES={scenario['packages']})",
            "",
            "| server | data p50 | data p99 | trivial p50 | trivial p99 | data vs naive | trivial vs naive "
            "| peak RSS per data run | failures |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for label, s in servers.items():
            data_ratio = base["data"]["p50"] / s["data"]["p50"] if base and label != naive else None
            trivial_ratio = base["trivial"]["p50"] / s["trivial"]["p50"] if base and label != naive else None
            peak = s["peak_memory_bytes"]
            lines.append(
                f"| {label} | {s['data']['p50'] * 1000:.1f} ms | {s['data']['p99'] * 1000:.1f} ms "
                f"| {s['trivial']['p50'] * 1000:.2f} ms | {s['trivial']['p99'] * 1000:.2f} ms "
                f"| {'' if data_ratio is None else f'{data_ratio:.1f}x'} "
                f"| {'' if trivial_ratio is None else f'{trivial_ratio:.1f}x'} "
                f"| {'' if peak is None else f'{peak / 2**20:.0f} MiB'} | {s['failure_count']} |"
            )
            if data_ratio is not None and trivial_ratio is not None:
                met = "met" if data_ratio >= 10 else "NOT met"
                lines.append(f"|  | {TARGETS['data_vs_naive']}: {met} | | | | | | | |")
                met = "met" if trivial_ratio >= 6 else "NOT met"
                lines.append(f"|  | {TARGETS['trivial_vs_naive']}: {met} | | | | | | | |")
        idle = scenario.get("idle", {})
        if idle:
            lines += [
                "",
                "Memory at rest after the warm-up (RSS): server, each zygote, everything under the server.",
                "",
            ]
            for label, m in idle.items():
                zygotes = ", ".join(f"{n / 2**20:.0f} MiB" for n in m["zygotes_rss"]) or "none"
                lines.append(
                    f"- {label}: server {m['server_rss'] / 2**20:.0f} MiB; zygotes {zygotes}; "
                    f"{m['descendants']} processes under the server, {m['all_descendants_rss'] / 2**20:.0f} MiB "
                    "of RSS summed (shared pages counted in each)"
                )
        lines.append("")
    return lines
