"""The app view scenario (issue 51): how soon the view shows the first page of a 2,000,000-row DataFrame's
table once the host hands it the result, against a 10-row one in the same run, in Debian's Chromium; and
what the calls that make them cost. tests/apps/view_driver.mjs does the browsing (its `bench` check),
against a server of the first runner variant started by the official TypeScript client."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
from typing import Any

from .scenarios import say
from .servers import REPO, Launch, ServerSpec

APPS = REPO / "tests" / "apps"
ROWS = (10, 2_000_000)
TARGET_MS = 1000.0


def scenario_view(specs: list[ServerSpec], launch: Launch, repeats: int, packages: str) -> dict[str, Any]:
    node, npm, chromium = shutil.which("node"), shutil.which("npm"), shutil.which("chromium")
    if node is None or npm is None or chromium is None:
        say("[view] skipped: node, npm and Debian's chromium are needed")
        return {"skipped": "node, npm and Debian's chromium are needed"}
    if not (APPS / "node_modules" / "playwright-core").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=APPS, check=True, capture_output=True)
    [spec] = [s for s in specs if s.kind == "runner"][:1]
    with tempfile.TemporaryDirectory() as tmp:
        env = launch.env(spec, {"RUNNER_PACKAGES": packages, "RUNNER_WORK_DIR": tmp, "RUNNER_LOG_LEVEL": "warning"})
        settings = {
            "command": launch.python,
            "args": ["-m", "runner"],
            "env": env,
            "cwd": str(launch.root),
            "chromium": chromium,
            "only": ["declared", "bench"],
            "bench": {"rows": list(ROWS), "repeats": repeats},
        }
        say(f"[view] {repeats} rounds: a {ROWS[0]}-row and a {ROWS[1]:,}-row DataFrame shown in Chromium")
        done = subprocess.run(
            [node, str(APPS / "view_driver.mjs"), json.dumps(settings)],
            cwd=APPS,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp},
            capture_output=True,
            text=True,
            timeout=600,
        )
    reports = {r.pop("check"): r for r in map(json.loads, done.stdout.splitlines())}
    bench = reports.get("bench", {})
    if done.returncode != 0 or "error" in bench or "times" not in bench:
        raise SystemExit(f"run_bench: the view's driver failed: {bench.get('error', '')}\n{done.stderr[-2000:]}")
    return {
        "rows": list(ROWS),
        "repeats": repeats,
        "view_bytes": reports["declared"]["bytes"],
        **bench["times"],
        "cost": bench["cost"],
    }


def view_rows(report: dict[str, Any]) -> list[str]:
    """Markdown: the view's first page, and the calls."""
    scenario = report.get("view")
    if not scenario:
        return []
    if "skipped" in scenario:
        return [f"Skipped: {scenario['skipped']}.", ""]
    small, large = (scenario[str(rows)] for rows in scenario["rows"])
    first_small, first_large = statistics.median(small["firstPageMs"]), statistics.median(large["firstPageMs"])
    call_small, call_large = statistics.median(small["callMs"]), statistics.median(large["callMs"])
    met = "met" if max(large["firstPageMs"]) <= TARGET_MS else "**not met**"
    return [
        "| measure | value |",
        "|---|---|",
        f"| the view's document | {scenario['view_bytes']:,} bytes |",
        f"| first page shown after the result is handed over, {scenario['rows'][0]} rows, p50 | {first_small:.1f} ms |",
        f"| the same, {scenario['rows'][1]:,} rows ({large['tableRows']:,} in the table), p50 / worst "
        f"(target within 1 s: {met}) | {first_large:.1f} / {max(large['firstPageMs']):.1f} ms |",
        f"| ratio, {scenario['rows'][1]:,} / {scenario['rows'][0]} rows | {first_large / first_small:.2f}x |",
        f"| the call that makes each frame, p50 | {call_small:.0f} / {call_large:.0f} ms |",
        *_cost_rows(scenario.get("cost")),
        "",
    ]


def _cost_rows(cost: dict[str, Any] | None) -> list[str]:
    if not cost:
        return []
    shown, plain = statistics.median(cost["withTable"]), statistics.median(cost["withoutTable"])
    return [
        f"| a 1,000 x 10 DataFrame's call, p50, client that shows the view (its table {cost['tableBytes']:,} bytes) "
        f"/ one that does not ({len(cost['withTable'])} each, alternating) | {shown:.2f} / {plain:.2f} ms "
        f"(+{shown - plain:.2f} ms) |",
    ]
