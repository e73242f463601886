"""Where the time of one trivial call goes: the server under py-spy, and the run interpreter's stages.

    python bench/profile_calls.py [--py-spy PATH] [--calls N] [--server-root DIR] [--server-env K=V ...] [--out DIR]

py-spy is not a project dependency: install it into a throwaway venv, e.g.
``python3 -m venv /tmp/prof && /tmp/prof/bin/pip install py-spy`` and pass ``--py-spy /tmp/prof/bin/py-spy``
(found on PATH otherwise).

Part 1, the server: `python -m runner` driven with hand-written JSON-RPC (bench/run_bench.py's raw
mode), N sequential `print(1)` calls after a warm-up, sampled by ``py-spy record --nonblocking
--function`` (only samples where a thread is on CPU; idle waits in epoll are not counted). Also the
server's own CPU time (utime+stime) and its reaped children's (cutime+cstime: every run interpreter
and sandbox helper) from /proc/PID/stat over the same calls. Output: top frames by self and by
inclusive samples, self time by source area, in ms per call.

Part 2, the run interpreter (the child): the server's own `runner.processes.spawn.spawn_child` (same argv,
environment, sandbox wrapper, limits) driven by hand: spawn to the bootstrap's ready line (what the
warm pool hides), code delivery to exit for `print(1)`, `pass` and `os._exit(0)` (interpreter
finalization is the difference), CPU of the whole life from wait4; plus ``-X importtime`` of the
bootstrap, and bare ``python -I -S -c pass`` for comparison.

Writes profile-<stamp>.txt (the summary), profile-<stamp>-server.raw (py-spy collapsed stacks) and
profile-<stamp>.json to --out (default bench/results/).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.drivers import RawConn
from harness.procfs import tree_cpu
from harness.servers import BENCH_DIR, REPO, Launch, ServerSpec, parse_env_pairs, server_config_line
from harness.workloads import TRIVIAL_CODE

WAIT_LEAVES = ("EpollSelector.select ", "select (")
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def area(path: str) -> str:
    """A coarse source area for a frame's file."""
    if "/site-packages/" in path:
        package = path.split("/site-packages/", 1)[1].split("/", 1)[0]
        return f"site-packages/{package}"
    if "/runner/" in path:
        return "runner/" + path.rsplit("/runner/", 1)[1]
    if "/lib/python3" in path:
        module = path.split("/lib/python3", 1)[1].split("/", 1)[1]
        return "stdlib/" + module.split("/", 1)[0].removesuffix(".py")
    return path


def short(frame: str) -> str:
    """`func (file)` with the file shortened to its area."""
    match = FRAME.match(frame)
    if not match:
        return frame
    path = match.group("file")
    return f"{match.group('func')} ({area(path)}{'' if '/runner/' in path else ':' + Path(path).name})"


def analyse_raw(raw: Path, calls: int, rate: int) -> dict[str, Any]:
    """Top frames from py-spy's collapsed stacks (`f1;f2;... count` per line)."""
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    area_counts: Counter[str] = Counter()
    total = 0
    waiting = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        leaf = frames[-1]
        if leaf.startswith(WAIT_LEAVES):
            # The event loop blocked in epoll_wait: py-spy's idle detection lets some of these
            # through (they exceed what /proc says the process spent on CPU). Not work.
            waiting += count
            continue
        total += count
        self_counts[short(leaf)] += count
        match = FRAME.match(leaf)
        area_counts[area(match.group("file")) if match else "?"] += count
        for name in {short(frame) for frame in frames}:
            incl_counts[name] += count

    def per_call(samples: int) -> float:
        return samples / rate / calls * 1000

    return {
        "samples": total,
        "epoll_wait_samples_dropped": waiting,
        "rate_hz": rate,
        "calls": calls,
        "sampled_cpu_ms_per_call": per_call(total),
        "top_self": [(name, n, n / total if total else 0, per_call(n)) for name, n in self_counts.most_common(25)],
        "top_inclusive": [(name, n, n / total if total else 0, per_call(n)) for name, n in incl_counts.most_common(40)],
        "self_by_area": [(name, n, n / total if total else 0, per_call(n)) for name, n in area_counts.most_common(20)],
    }


async def profile_server(args: argparse.Namespace, out: Path, stamp: str) -> dict[str, Any]:
    """Part 1: py-spy on the server during sequential trivial calls."""
    logs = out / f"logs-{stamp}"
    logs.mkdir(parents=True, exist_ok=True)
    launch = Launch(python=args.python, root=args.server_root.resolve(), logs=logs)
    spec = ServerSpec("runner", "runner", parse_env_pairs(args.server_env, "--server-env"))
    conn = await RawConn.start(spec, launch, "profile")
    raw = out / f"profile-{stamp}-server.raw"
    try:
        await conn.initialize()
        for _ in range(30):
            await conn.call(TRIVIAL_CODE, "1")
        await asyncio.sleep(1.0)
        spy = subprocess.Popen(  # noqa: ASYNC220 (started and signalled, never waited on in the loop)
            [
                *(args.py_spy, "record", "--pid", str(conn.pid), "--rate", str(args.rate), "--format", "raw"),
                *("--function", "--nonblocking", "--output", str(raw)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        await asyncio.sleep(1.5)  # attach
        own0, kids0 = tree_cpu(conn.pid)
        latencies: list[float] = []
        durations: list[float] = []
        failures = 0
        start = time.perf_counter()
        for _ in range(args.calls):
            result = await conn.call(TRIVIAL_CODE, "1")
            latencies.append(result.latency)
            failures += not result.ok
            if result.run_duration is not None:
                durations.append(result.run_duration)
        wall = time.perf_counter() - start
        await asyncio.sleep(0.3)  # the last refill spawn finishes
        own1, kids1 = tree_cpu(conn.pid)
        spy.send_signal(signal.SIGINT)
        _, spy_err = spy.communicate(timeout=60)
    finally:
        await conn.close()
    calls = args.calls
    info: dict[str, Any] = {
        "server_config": server_config_line(conn.log),
        "calls": calls,
        "failures": failures,
        "wall_s": wall,
        "latency_ms_p50": statistics.median(latencies) * 1000,
        "run_duration_ms_p50": statistics.median(durations) * 1000 if durations else None,
        "server_cpu_ms_per_call": (own1 - own0) / calls * 1000,
        "children_cpu_ms_per_call": (kids1 - kids0) / calls * 1000,
        "py_spy_stderr": spy_err.decode(errors="replace").strip().splitlines()[-3:],
        "raw_file": str(raw),
    }
    if raw.exists():
        info["profile"] = analyse_raw(raw, calls, args.rate)
    return info


def child_stages(server_root: Path, sandbox_mode: str, reps: int) -> dict[str, Any]:
    """Part 2: the run interpreter's stages, spawned exactly as the server spawns it."""
    sys.path.insert(0, str(server_root))
    from runner.config import Config
    from runner.config.disk import open_environment
    from runner.inrun.wire import frame_job
    from runner.processes.isolation import plan_isolation
    from runner.processes.limits import count_tasks_of_uid, limits_for
    from runner.processes.spawn import remove_tree, spawn_child

    config = open_environment(Config.from_env({**os.environ, "RUNNER_SANDBOX": sandbox_mode}))
    plan = plan_isolation(config)
    limits = limits_for(config.limits, config.pool, count_tasks_of_uid(), plan)
    if plan.forked:
        # Forked by a zygote, never spawned (spawn_child refuses); part 1 measures them through the server.
        sys.path.remove(str(server_root))
        return {"sandbox": plan.mode, "python": config.python, "skipped": "runs are forked by the zygote"}
    base = tempfile.mkdtemp(prefix="profile-", dir=config.work_dir)
    results: dict[str, Any] = {"sandbox": plan.mode, "python": config.python}
    try:
        for label, code, expected in (
            ("print(1)", b"print(1)", b"1"),
            ("pass", b"pass", b""),
            ("print(1); os._exit(0)", b"import os, sys\nprint(1)\nsys.stdout.flush()\nos._exit(0)", b"1"),
        ):
            failures: list[str] = []
            ready: list[float] = []
            run: list[float] = []
            cpu: list[float] = []
            for _ in range(reps):
                t0 = time.perf_counter()
                child = spawn_child(config.python, base, limits, plan)
                line = b""
                while not line.endswith(b"\n"):
                    select.select([child.stdout], [], [])
                    part = os.read(child.stdout, 1)
                    if not part:
                        break
                    line += part
                t1 = time.perf_counter()
                os.set_blocking(child.code, True)
                t2 = time.perf_counter()
                os.write(child.code, frame_job(code))
                child.close_fd(child.code)
                if child.pidfd is not None:
                    select.select([child.pidfd], [], [])
                t3 = time.perf_counter()
                _, status, usage = os.wait4(child.pid, 0)
                child.reaped = True
                try:
                    output = os.read(child.stdout, 4096)
                except BlockingIOError:
                    output = b""
                if os.waitstatus_to_exitcode(status) != 0 or output.strip() != expected:
                    failures.append(f"exit {os.waitstatus_to_exitcode(status)}, stdout {output[:80]!r}")
                child.close_all()
                if child.workdir:
                    remove_tree(child.workdir)
                ready.append(t1 - t0)
                run.append(t3 - t2)
                cpu.append(usage.ru_utime + usage.ru_stime)
            results[label] = {
                "spawn_to_ready_ms_p50": statistics.median(ready) * 1000,
                "delivery_to_exit_ms_p50": statistics.median(run) * 1000,
                "delivery_to_exit_ms_min": min(run) * 1000,
                "cpu_ms_whole_life_p50": statistics.median(cpu) * 1000,
                "failures": failures,
            }
    finally:
        remove_tree(base)
        sys.path.remove(str(server_root))
    return results


def bare_startup(python: str, reps: int) -> dict[str, float]:
    """`python -I -S -c pass`: wall and CPU, spawn to exit."""
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        pid = os.posix_spawn(python, [python, "-I", "-S", "-c", "pass"], {"PATH": "/usr/bin:/bin"})
        _, _, usage = os.wait4(pid, 0)
        walls.append(time.perf_counter() - start)
        cpus.append(usage.ru_utime + usage.ru_stime)
    return {"wall_ms_p50": statistics.median(walls) * 1000, "cpu_ms_p50": statistics.median(cpus) * 1000}


def import_times(server_root: Path, python: str) -> list[tuple[str, int, int]]:
    """`-X importtime` of the bootstrap up to its ready line and a `pass` run: (module, self us, cumulative us)."""
    workdir = tempfile.mkdtemp(prefix="importtime-")
    code_r, code_w = os.pipe()
    try:
        os.write(code_w, b"4\npass")  # framed as the server frames code: its byte count first
        os.close(code_w)
        done = subprocess.run(
            [
                *(
                    python,
                    "-I",
                    "-S",
                    "-X",
                    "utf8",
                    "-X",
                    "importtime",
                    str(server_root / "runner" / "inrun" / "bootstrap.py"),
                ),
                *(workdir, "10", str(256 << 20), "4096", str(16 << 20)),
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            pass_fds=(code_r,),
            env={"PATH": "/usr/bin:/bin"},
            check=False,
            preexec_fn=lambda: os.dup2(code_r, 3),
            timeout=30,
        )
    finally:
        os.close(code_r)
        shutil.rmtree(workdir, ignore_errors=True)
    rows: list[tuple[str, int, int]] = []
    for line in done.stderr.decode(errors="replace").splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = [p.strip() for p in line[len("import time:") :].split("|")]
        if len(parts) == 3 and parts[0].isdigit():
            rows.append((parts[2], int(parts[0]), int(parts[1])))
    return rows


def render(report: dict[str, Any]) -> str:
    """The text summary."""
    env = " ".join(report.get("server_env") or []) or "(defaults)"
    lines = [f"python-runner-mcp profile, {report['started']}; server env {env}; load average {report['loadavg']}", ""]
    server = report.get("server")
    if server:
        lines += [
            "== Server: py-spy during sequential trivial calls ==",
            f"server: {server['server_config']}",
            f"{server['calls']} calls ({server['failures']} failed), wall {server['wall_s']:.2f} s, "
            f"latency p50 {server['latency_ms_p50']:.2f} ms (mean {server['wall_s'] / server['calls'] * 1000:.2f} ms), "
            "server-reported run duration p50 "
            f"{server['run_duration_ms_p50'] or 0:.2f} ms",
            f"CPU per call from /proc/PID/stat: server {server['server_cpu_ms_per_call']:.2f} ms, "
            f"everything under it {server['children_cpu_ms_per_call']:.2f} ms (run interpreters, sandbox helpers, a "
            "zygote and its forks: live ones' own time plus what each reaped)",
        ]
        prof = server.get("profile")
        if prof:
            lines += [
                f"py-spy: {prof['samples']} samples at {prof['rate_hz']} Hz = "
                f"{prof['sampled_cpu_ms_per_call']:.2f} ms per call ({prof['epoll_wait_samples_dropped']} more "
                "samples with epoll_wait as the leaf left out: the loop waiting, which py-spy's idle filter does not "
                "always catch)",
                "",
                "Self time by area (ms per call, share of samples):",
            ]
            lines += [f"  {ms:7.3f} ms  {share:6.1%}  {name}" for name, _, share, ms in prof["self_by_area"]]
            lines += ["", "Top frames by self time:"]
            lines += [f"  {ms:7.3f} ms  {share:6.1%}  {name}" for name, _, share, ms in prof["top_self"]]
            lines += ["", "Top frames by inclusive time:"]
            lines += [f"  {ms:7.3f} ms  {share:6.1%}  {name}" for name, _, share, ms in prof["top_inclusive"]]
        lines.append("")
    for key, child in report.get("children", {}).items():
        lines += [f"== Run interpreter, spawned as the server does ({key}: sandbox {child['sandbox']}) =="]
        if child["sandbox"] == "bwrap":
            lines.append("  (CPU from wait4 is bwrap's own only: bwrap does not reap the sandboxed interpreter)")
        if "skipped" in child:
            lines += [f"  skipped: {child['skipped']}", ""]
            continue
        for label in ("print(1)", "pass", "print(1); os._exit(0)"):
            c = child[label]
            lines.append(
                f"  {label:24s} spawn->ready {c['spawn_to_ready_ms_p50']:6.2f} ms | delivery->exit p50 "
                f"{c['delivery_to_exit_ms_p50']:6.2f} ms (min {c['delivery_to_exit_ms_min']:.2f}) | "
                f"CPU whole life {c['cpu_ms_whole_life_p50']:6.2f} ms"
                + (f" | {len(c['failures'])} FAILED: {c['failures'][0]}" if c["failures"] else "")
            )
        lines.append("")
    bare = report.get("bare")
    if bare:
        lines += [
            f"== Bare `python -I -S -c pass`: wall {bare['wall_ms_p50']:.2f} ms, "
            f"CPU {bare['cpu_ms_p50']:.2f} ms (p50) ==",
            "",
        ]
    imports = report.get("imports")
    if imports:
        total = sum(row[1] for row in imports)
        lines.append(
            f"== -X importtime of the bootstrap (sum of self times {total / 1000:.2f} ms), top by cumulative =="
        )
        top = sorted(imports, key=lambda row: -row[2])[:15]
        lines += [f"  {cum / 1000:7.2f} ms cumulative {own / 1000:6.2f} ms self  {name}" for name, own, cum in top]
        lines.append("")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or "/tmp/prof-venv/bin/py-spy")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rate", type=int, default=1000, help="py-spy samples per second")
    parser.add_argument("--child-reps", type=int, default=30)
    parser.add_argument("--server-env", action="append", default=[], metavar="K=V")
    parser.add_argument("--server-root", type=Path, default=REPO)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results")
    parser.add_argument("--skip-server", action="store_true", help="only the child stages (no py-spy needed)")
    parser.add_argument("--skip-children", action="store_true", help="only the server under py-spy")
    parser.add_argument("--label", default="", help="added to the output file names")
    return parser.parse_args()


def main() -> int:
    """Entry point."""
    args = parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S") + (f"-{args.label}" if args.label else "")
    report: dict[str, Any] = {
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "server_env": args.server_env,
        "loadavg": os.getloadavg(),
    }
    if not args.skip_server:
        if not (args.py_spy and os.access(args.py_spy, os.X_OK)):
            raise SystemExit("profile_calls: py-spy not found; pass --py-spy PATH (see the docstring)")
        report["server"] = asyncio.run(profile_server(args, out, stamp))
    root = args.server_root.resolve()
    if not args.skip_children:
        report["children"] = {
            "server default": child_stages(root, os.environ.get("RUNNER_SANDBOX", "auto"), args.child_reps),
            "RUNNER_SANDBOX=none-posix-spawn": child_stages(root, "none-posix-spawn", args.child_reps),
        }
        python = report["children"]["RUNNER_SANDBOX=none-posix-spawn"]["python"]
        report["bare"] = bare_startup(python, args.child_reps)
        report["imports"] = import_times(root, python)
    report["loadavg_end"] = os.getloadavg()
    text = render(report)
    (out / f"profile-{stamp}.txt").write_text(text + "\n")
    (out / f"profile-{stamp}.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    sys.stdout.write(text + "\n")
    sys.stderr.write(f"wrote {out}/profile-{stamp}.txt, .json and -server.raw\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
