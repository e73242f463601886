"""The kept-output scenario of issue 26, on raw connections to two real servers that differ only in
whether output is kept (`RUNNER_MAX_KEPT_OUTPUT_MB` 64 against 0), both allowed 600 MiB of output:

- the server's RSS while 10 calls each write 50 MB to stdout, kept whole on disk: VmRSS before,
  after each call, and the high-water mark (VmHWM) at the end, against the same on the server that
  keeps nothing; the target is that it stays flat;
- a call that writes 500 MB (cut in the answer; 64 MiB of it kept) against the same call on the
  server that keeps nothing, interleaved: the target is a p50 within noise.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .drivers import RawConn, open_conn
from .procfs import proc_status
from .scenarios import rotate, say
from .servers import Launch, ServerSpec
from .stats import summary
from .workloads import Params

MB = 1_000_000
ENV = {"RUNNER_MAX_OUTPUT_MB": "600", "RUNNER_DEFAULT_TIMEOUT": "120", "RUNNER_MAX_TIMEOUT": "300"}
KEEPS = {"kept": {**ENV, "RUNNER_MAX_KEPT_OUTPUT_MB": "64"}, "not kept": {**ENV, "RUNNER_MAX_KEPT_OUTPUT_MB": "0"}}


def writes(megabytes: int) -> str:
    """Code that writes `megabytes` MB to stdout in 1 MB lines' worth of 100-byte lines."""
    return (
        "import sys\nblock = ''.join(f'{i:08d} ' + 'x' * 90 + '\\n' for i in range(10_000)).encode()\n"
        f"for _ in range({megabytes}):\n    sys.stdout.buffer.write(block)\nprint('end')"
    )


async def scenario_kept(specs: list[ServerSpec], launch: Launch, p: Params) -> dict[str, Any]:
    """RSS while 50 MB outputs are kept; the p50 of a 500 MB call, kept against not."""
    out: dict[str, Any] = {"servers": {}}
    [spec] = [s for s in specs if s.kind == "runner"][:1]
    rounds = 3 if p.trivial_calls < 60 else 15  # --quick, or the full run
    async with contextlib.AsyncExitStack() as stack:
        conns: dict[str, RawConn] = {}
        for label, env in KEEPS.items():
            conn = await open_conn("raw", spec, launch, f"kept-{label.replace(' ', '-')}", stack, env)
            assert isinstance(conn, RawConn)
            conns[label] = conn
        for label, conn in conns.items():
            say(f"[kept] {label}: 10 calls of 50 MB each")
            rss = [proc_status(conn.pid).get("VmRSS", 0) if conn.pid else 0]
            failures = []
            for _ in range(10):
                result = await conn.call(writes(50), None, 120)
                structured = result.structured or {}
                if not result.ok or structured.get("status") != "ok":
                    failures.append(result.problem or str(structured.get("status")))
                rss.append(proc_status(conn.pid).get("VmRSS", 0) if conn.pid else 0)
            out["servers"][label] = {
                "rss_bytes": rss,
                "hwm_bytes": proc_status(conn.pid).get("VmHWM", 0) if conn.pid else 0,
                "kept_links": len((structured or {}).get("full_output", [])),
                "failures": failures,
            }
        say(f"[kept] {rounds} interleaved rounds of a 500 MB call, kept and not")
        latencies: dict[str, list[float]] = {label: [] for label in conns}
        for n in range(rounds):
            for label in rotate(list(conns), n):
                result = await conns[label].call(writes(500), None, 300)
                if result.ok:
                    latencies[label].append(result.latency)
        for label, values in latencies.items():
            out["servers"][label]["call_500mb"] = summary(values)
    return out


def kept_rows(report: dict[str, Any]) -> list[str]:
    """Markdown: the targets of issue 26 and the numbers of the kept-output scenario."""
    scenario = report.get("kept")
    if not scenario:
        return []
    lines = [
        "| server | VmRSS before | after the 1st of 10 x 50 MB | after the 10th | growth over calls 2-10 | VmHWM "
        "| links | 500 MB call p50 | failures |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    servers = scenario["servers"]
    mib = 2**20
    for label, s in servers.items():
        rss = s["rss_bytes"]
        call = s.get("call_500mb", {}).get("p50")
        lines.append(
            f"| {label} | {rss[0] / mib:.1f} MiB | {rss[1] / mib:.1f} MiB | {rss[-1] / mib:.1f} MiB "
            f"| {(rss[-1] - rss[1]) / mib:+.1f} MiB | {s['hwm_bytes'] / mib:.1f} MiB | {s['kept_links']} "
            f"| {'' if call is None else f'{call:.2f} s'} | {len(s['failures'])} |"
        )
    kept, plain = servers.get("kept", {}).get("call_500mb", {}), servers.get("not kept", {}).get("call_500mb", {})
    if kept.get("p50") and plain.get("p50"):
        lines.append(f"|  | 500 MB call, kept / not kept: {kept['p50'] / plain['p50']:.2f}x | | | | | | | |")
    lines.append("")
    return lines
