"""The sessions scenario of issue 25, interleaved on one raw connection per real server (the naive
baseline has no sessions):

- the question a session answers from kept state, `df.v.sum()` on a 2,000,000-row DataFrame loaded
  once, against the same question asked as a one-shot call that reads the data from a CSV handed in
  with `files` (4 MB: one digit a row) every time; the target is a ratio of at least 20x;
- a trivial `print(1)` in a session against a one-shot `print(1)`: the target is a p50 within 1.5x;
- the memory of an idle session after a call that loaded pandas: the keeper's, with the call it forked
  ahead, as proportional set size (Pss of /proc/PID/smaps_rollup: the pages only they map in full,
  once for the two of them; the preloading zygote's pages they still share, in part), and the
  keeper's private pages alone (Private_Clean + Private_Dirty: none of what it shares with its call
  ahead or the zygote); and the anchor's Pss (it holds the directory's snapshot).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

from .drivers import RawConn, open_conn
from .procfs import children_of, descendants, tree_run_nanoseconds
from .scenarios import rotate, say
from .servers import Launch, ServerSpec
from .stats import summary
from .workloads import Params

ROWS = 2_000_000
CSV = "v\n" + "".join(f"{i % 10}\n" for i in range(ROWS))
EXPECTED_SUM = str(sum(i % 10 for i in range(ROWS)))
LOAD = "import pandas as pd\ndf = pd.read_csv('data.csv')\nimport os\nos.remove('data.csv')\nprint(len(df))"
ASK = "print(df.v.sum())"
ONE_SHOT = "import pandas as pd\ndf = pd.read_csv('data.csv')\nprint(df.v.sum())"
TRIVIAL = "print(1)"
# Rolled back (it fails), so its parent stays the session's keeper: its pid inside and PID namespace.
WHO_KEEPS = "import os\nprint(os.getppid(), os.readlink('/proc/self/ns/pid'))\nraise SystemExit(3)"
# In the back-to-back rounds the kept sum follows either the CSV call (its session then idle for the
# CSV call's 100 ms and more) or the last trivial call of the round before, one in the same session
# (then the session's next call is forked from the state that call left only as that call ends).
# Half the kept calls are of each kind, so the kept p50 lies between the two; both are reported.
AFTER = {"csv": "after the CSV call (session idle)", "trivial_session": "after a call of the same session"}
TARGETS = {
    "kept_vs_csv": "df.v.sum() on a kept 2,000,000-row DataFrame >= 20x faster than reading the CSV in a one-shot call",
    "trivial": "a trivial call in a session: p50 within 1.5x of a one-shot trivial call",
}


# A server's tree is quiet once, over QUIET_WINDOW, it ran for less than QUIET_SHARE of it; it is
# waited for at most QUIET_PATIENCE.
QUIET_WINDOW = 0.002
QUIET_SHARE = 0.1
QUIET_PATIENCE = 0.5


async def quiet(pid: int) -> bool:
    """Wait until the server `pid` and every process under it have (nearly) stopped running: what the
    calls before left to do (a run's teardown, the pool's next interpreter, a session's next call
    forked ahead, an old keeper's exit) is done. Whether it came within QUIET_PATIENCE. A process
    seen for the first time counts with all it has run (it was made meanwhile)."""
    deadline = time.monotonic() + QUIET_PATIENCE
    before, since = tree_run_nanoseconds(pid), time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(QUIET_WINDOW / 2)
        now, at = tree_run_nanoseconds(pid), time.monotonic()
        ran = sum(value - before.get(member, 0) for member, value in now.items() if value >= before.get(member, 0))
        if at - since >= QUIET_WINDOW:
            if ran < QUIET_SHARE * (at - since) * 1e9:
                return True
            before, since = now, at
    return False


def rollup_bytes(pid: int, *names: bytes) -> int:
    """The sum of these fields of /proc/PID/smaps_rollup, bytes; 0 if the process is gone."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.split(b":", 1)[0] in names:
                    total += int(line.split()[1]) * 1024
    except OSError:
        return 0
    return total


def private_bytes(pid: int) -> int:
    return rollup_bytes(pid, b"Private_Clean", b"Private_Dirty")


def pss_bytes(pid: int) -> int:
    return rollup_bytes(pid, b"Pss")


def _inner_pid(pid: int) -> int:
    """A process's pid in its innermost PID namespace (the last of NSpid), or 0."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except OSError:
        pass
    return 0


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[1])
    except OSError:
        return 0


def keeper_and_anchor(server: int, keeper_inner: int, namespace: str) -> tuple[int, int]:
    """The host pids of the session's keeper and of its anchor (its parent): the server's descendant
    whose pid inside is `keeper_inner` (as a call sees its parent) in the PID namespace `namespace`
    (as /proc/PID/ns/pid names it: a pooled run elsewhere may have the same pid inside); (0, 0) if none."""
    for pid in descendants(server):
        with contextlib.suppress(OSError):
            if _inner_pid(pid) == keeper_inner and os.readlink(f"/proc/{pid}/ns/pid") == namespace:
                return pid, _parent(pid)
    return 0, 0


async def scenario_sessions(specs: list[ServerSpec], launch: Launch, p: Params, packages: str) -> dict[str, Any]:
    """Kept DataFrame against the CSV, trivial in a session against one-shot, idle session memory."""
    out: dict[str, Any] = {"packages": packages, "rows": ROWS, "csv_bytes": len(CSV)}
    runners = [spec for spec in specs if spec.kind == "runner"]
    rounds = max(6, p.trivial_calls // 5)
    files = [{"path": "data.csv", "content": CSV}]
    async with contextlib.AsyncExitStack() as stack:
        conns: list[RawConn] = []
        for spec in runners:
            conn = await open_conn("raw", spec, launch, "sessions", stack, {"RUNNER_PACKAGES": packages})
            assert isinstance(conn, RawConn)
            conns.append(conn)
        handles: dict[str, str] = {}
        say("[sessions] warm-up: a session loads the CSV once; a one-shot call reads it")
        for conn in conns:
            started = await conn.call_with({"code": LOAD, "files": files, "session": "new", "timeout": 60}, str(ROWS))
            if not started.ok or not started.structured:
                raise SystemExit(f"run_bench: the session did not start on {conn.spec.label}: {started.problem}")
            handles[conn.spec.label] = started.structured["session"]
            for _ in range(2):
                await conn.call_with({"code": ONE_SHOT, "files": files, "timeout": 60}, EXPECTED_SUM)
                await conn.call_with({"code": ASK, "session": handles[conn.spec.label], "timeout": 60}, EXPECTED_SUM)
        kinds = ["kept", "csv", "trivial_session", "trivial_one_shot"]
        kinds += [f"settled_{kind}" for kind in kinds]
        # The kept sum again, by what came just before it on its connection (see AFTER).
        kinds += [f"kept_after_{before}" for before in AFTER]
        samples: dict[str, dict[str, list[float]]] = {c.spec.label: {kind: [] for kind in kinds} for c in conns}
        never_quiet = dict.fromkeys(samples, 0)  # waits for a quiet tree that gave up, by server
        failures: dict[str, list[str]] = {c.spec.label: [] for c in conns}
        say(f"[sessions] {rounds} rounds per server of: kept sum, CSV sum, 5 trivial in the session, 5 one-shot")
        before = dict.fromkeys(samples, "")  # the kind of the last call on each connection
        for n in range(rounds):
            for conn in rotate(conns, n):
                label, handle = conn.spec.label, handles[conn.spec.label]
                pairs = _pairs(handle, files)
                for kind, arguments, expected in rotate(pairs[:2], n) + rotate(pairs[2:], n) * 5:
                    result = await conn.call_with(arguments, expected)
                    samples[label][kind].append(result.latency)
                    if kind == "kept" and before[label] in AFTER:
                        samples[label][f"kept_after_{before[label]}"].append(result.latency)
                    before[label] = kind
                    if not result.ok:
                        failures[label].append(f"{kind}: {result.problem}")
        # The same pairs again, each call once the server's tree is quiet: a call's own cost, without
        # what the calls before it left to do (on two cores, back to back, that runs alongside it).
        settled = max(6, rounds // 2)
        say(f"[sessions] {settled} rounds per server of the same, each call once the server is quiet")
        for n in range(settled):
            for conn in rotate(conns, n):
                label, handle = conn.spec.label, handles[conn.spec.label]
                for kind, arguments, expected in rotate(_pairs(handle, files, "settled_"), n):
                    if conn.pid and not await quiet(conn.pid):
                        never_quiet[label] += 1
                    result = await conn.call_with(arguments, expected)
                    samples[label][kind].append(result.latency)
                    if not result.ok:
                        failures[label].append(f"{kind}: {result.problem}")
        for conn in conns:
            label = conn.spec.label
            # A call that fails is rolled back, so the keeper it was forked from (its parent) stays the
            # keeper; it names it by its pid inside and its PID namespace, which no pooled run shares.
            asked = await conn.call_with({"code": WHO_KEEPS, "session": handles[label]}, None)
            said = (asked.structured or {}).get("stdout", "").split()
            inner, namespace = (int(said[0]), said[1]) if len(said) == 2 and said[0].isdigit() else (0, "")
            keeper, anchor = keeper_and_anchor(conn.pid, inner, namespace) if conn.pid and inner else (0, 0)
            ahead = await _call_ahead(keeper) if keeper else []
            out.setdefault("servers", {})[label] = {
                **{kind: summary(values) for kind, values in samples[label].items()},
                "never_quiet": never_quiet[label],
                "keeper_pss_bytes": sum(pss_bytes(pid) for pid in [keeper, *ahead]) if keeper else None,
                "keeper_private_bytes": private_bytes(keeper) if keeper else None,
                "anchor_pss_bytes": pss_bytes(anchor) if anchor else None,
                "failures": failures[label][:10],
                "failure_count": len(failures[label]),
            }
    return out


async def _call_ahead(keeper: int) -> list[int]:
    """The call the idle `keeper` forks ahead (after a roll-back it does so once told): its pid, when
    there is one within a second (an idle session's memory is the keeper's with it)."""
    for _ in range(100):  # /proc is polled: nothing tells when the fork is done
        ahead = children_of(keeper)
        if ahead:
            return ahead
        await asyncio.sleep(0.01)
    return []


def _pairs(handle: str, files: list[dict[str, str]], prefix: str = "") -> list[tuple[str, dict[str, Any], str]]:
    """The calls compared, as (kind, arguments, expected output): the kept sum and the CSV one, then
    a trivial call in the session and a one-shot one."""
    return [
        (prefix + "kept", {"code": ASK, "session": handle, "timeout": 60}, EXPECTED_SUM),
        (prefix + "csv", {"code": ONE_SHOT, "files": files, "timeout": 60}, EXPECTED_SUM),
        (prefix + "trivial_session", {"code": TRIVIAL, "session": handle, "timeout": 10}, "1"),
        (prefix + "trivial_one_shot", {"code": TRIVIAL, "timeout": 10}, "1"),
    ]


def session_rows(report: dict[str, Any]) -> list[str]:
    """Markdown: the targets of issue 25 and the numbers of the sessions scenario."""
    scenario = report.get("sessions")
    if not scenario:
        return []
    lines = [
        f"### Sessions (RUNNER_PACKAGES={scenario['packages']}; {scenario['rows']:,} rows, "
        f"a {scenario['csv_bytes'] / 1e6:.1f} MB CSV)",
        "",
        "| server | kept df.v.sum() p50 | CSV one-shot p50 | ratio | trivial in session p50 | trivial one-shot p50 "
        "| ratio | idle keeper Pss (with its call ahead) | keeper private | anchor Pss | failures |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, s in scenario.get("servers", {}).items():
        kept, csv = s["kept"]["p50"], s["csv"]["p50"]
        in_session, one_shot = s["trivial_session"]["p50"], s["trivial_one_shot"]["p50"]
        keeper, private, anchor = s["keeper_pss_bytes"], s["keeper_private_bytes"], s["anchor_pss_bytes"]
        lines.append(
            f"| {label} | {kept * 1000:.1f} ms | {csv * 1000:.1f} ms | {csv / kept:.1f}x "
            f"| {in_session * 1000:.2f} ms | {one_shot * 1000:.2f} ms | {in_session / one_shot:.2f}x "
            f"| {'' if keeper is None else f'{keeper / 2**20:.1f} MiB'} "
            f"| {'' if private is None else f'{private / 2**20:.1f} MiB'} "
            f"| {'' if anchor is None else f'{anchor / 2**20:.1f} MiB'} | {s['failure_count']} |"
        )
        met = "met" if csv / kept >= 20 else "NOT met"
        lines.append(f"|  | {TARGETS['kept_vs_csv']}: {met} | | | | | | | | | |")
        met = "met" if in_session / one_shot <= 1.5 else "NOT met"
        lines.append(f"|  | {TARGETS['trivial']}: {met} | | | | | | | | | |")
        by_before = [(what, s.get(f"kept_after_{kind}", {})) for kind, what in AFTER.items()]
        if all(stats.get("n") for _, stats in by_before):
            cells = "; ".join(
                f"{what}: {stats['p50'] * 1000:.1f} ms, {csv / stats['p50']:.1f}x ({stats['n']} calls)"
                for what, stats in by_before
            )
            lines.append(f"|  | the kept sum by the call before it: {cells} | | | | | | | | | |")
        if s.get("settled_kept", {}).get("n"):
            kept, csv = s["settled_kept"]["p50"], s["settled_csv"]["p50"]
            in_session, one_shot = s["settled_trivial_session"]["p50"], s["settled_trivial_one_shot"]["p50"]
            lines.append(
                f"| {label}, each call once the server is quiet (not the targets' measure; "
                f"{s['never_quiet']} waits gave up) | {kept * 1000:.1f} ms | {csv * 1000:.1f} ms | {csv / kept:.1f}x "
                f"| {in_session * 1000:.2f} ms | {one_shot * 1000:.2f} ms | {in_session / one_shot:.2f}x | | | | |"
            )
    lines.append("")
    return lines
