# A benchmark client: its blocking reads of /proc and of small files inside coroutines are deliberate
# (they are the measurement), and its random numbers only pick the workload mix.
# ruff: noqa: ASYNC230, ASYNC240, S311
"""Soak test: thousands of mixed runs over stdio against `python -m runner`, then leak and growth checks.

The client is raw newline-delimited JSON-RPC over the server's stdin/stdout (no SDK), so that every
line the server writes is parsed and checked, and cancellation is an exact `notifications/cancelled`.
Runs are mixed: normal, failing, timing out, flooding output, reading stdin, leaving a setsid daemon
behind, cancelled 0-0.4 s after being sent, and sessions (harness/soak_sessions.py: opened, used,
rolled back after every kind of failure, attacked from inside a call, then closed, left to expire or
ended by their keeper's death), and with `--tools` code mode's runs (harness/soak_tools.py: tool calls
from threads at once, past the limit, given up, timed out and cancelled in flight); the client keeps
`--concurrency` calls in flight, above the server's RUNNER_MAX_CONCURRENT, so calls queue. After the
mix, a "cancel storm" writes `--cancel-storm` calls back to back, each cancelled as soon as it is sent.

Checks (the script exits 1 when one fails):

- every call got the status its kind must end in, once (every call of a session story included);
  cancelled calls got no answer; every stdout line was a JSON-RPC 2.0 message;
- with the server idle again (no count moving for 1.2 s), compared with the same state after a
  warm-up: no more processes of ours (the server's helpers: warm pool, fork server; a process is
  "ours" when the work dir is in its command line or environment) but kept PID namespaces' inits;
  of those, no zygote ever more than its bound (RUNNER_POOL_SIZE + RUNNER_MAX_CONCURRENT +
  RUNNER_MAX_SESSIONS; sampled through the mix, harness/soak_census.py); no more zygote fds (but the
  three each kept namespace holds) and no other zygote mounts; no more entries in the work dir, no
  more server fds (/proc/<pid>/fd; root only, the server is non-dumpable), no more run cgroups, no
  more host mounts (the same once the server is gone), and server VmRSS growth under
  `--max-rss-growth-mib` (default 16 MiB);
- on stdin EOF the server exits 0 and leaves no process, nothing in the work dir and no cgroup;
- a client that disconnects mid-run, killed (stdin EOF and a dead stdout) or closing the server's
  stdin, leaves no run nor setsid daemon of a run alive one second later (in every mode: each marks
  itself by its command name), and the server is gone within 5 s.

Usage (from the repository root):

    .venv/bin/python bench/soak.py --runs 2000
    .venv/bin/python bench/soak.py --runs 2000 --sandbox bwrap --concurrency 32
    .venv/bin/python bench/soak.py --runs 100 --json /tmp/soak.json --log /tmp/server.log

A summary table goes to stdout (`--json` writes the figures too). The server's log goes to `--log`;
without it, to a temporary directory that is kept (and named) only when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# harness/ is next to this file: on sys.path already when this runs as a script, not when it is imported
# (tests/e2e/test_soak.py imports it as bench.soak).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.procfs import proc_status
from harness.servers import REPO
from harness.soak_census import Census, count_lines, kept_bound, kept_cgroups, parents
from harness.soak_sessions import Story, plan_story
from harness.soak_tools import tool_kinds, tools_file

INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "soak", "version": "1"}}
LINE_LIMIT = 64 * 1024 * 1024  # the client's own bound on one line from the server
MIB = 1024 * 1024
KEPT_PREFIX = "python-runner-kept-"  # the kept output's directory (runner/execution/kept.py)


CGROUP_ROOT = "/sys/fs/cgroup"


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


# --- processes ---------------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    """True if `pid` is a live process (zombies count as dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def processes_mentioning(text: str, exclude: set[int] | None = None) -> list[int]:
    """Live processes whose command line or environment contains `text`.

    Root reads every environment; others cannot read a non-dumpable run's, but still its command
    line, which names the run's directory.
    """
    exclude = (exclude or set()) | {os.getpid()}
    needle = text.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in exclude:
            continue
        for name in ("cmdline", "environ"):
            try:
                data = Path(f"/proc/{entry}/{name}").read_bytes()
            except OSError:
                continue
            if needle in data and alive(int(entry)):
                found.append(int(entry))
                break
    return sorted(found)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def fd_count(pid: int) -> int | None:
    """Open fds of `pid`; None when /proc does not let us see them (a non-dumpable server, not root)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


# --- the kinds of run ---------------------------------------------------------------------------------

Verdict = Callable[[dict[str, Any]], str | None]  # structuredContent -> what is wrong, or None


def expect(
    status: str, stdout: str | None = None, stderr_has: str | None = None, message_has: str | None = None
) -> Verdict:
    def verdict(structured: dict[str, Any]) -> str | None:
        if structured.get("status") != status:
            return f"status {structured.get('status')!r} ({structured.get('message')!r}), expected {status!r}"
        if message_has is not None and message_has not in structured.get("message", ""):
            return f"message {structured.get('message')!r} lacks {message_has!r}"
        if stdout is not None and structured.get("stdout") != stdout:
            return f"stdout {structured.get('stdout', '')[:80]!r}, expected {stdout[:80]!r}"
        if stderr_has is not None and stderr_has not in structured.get("stderr", ""):
            return f"stderr {structured.get('stderr', '')[-80:]!r} lacks {stderr_has!r}"
        return None

    return verdict


@dataclass(frozen=True)
class Plan:
    """One call to make: its kind, arguments, what its result must be, and when to cancel it."""

    kind: str
    arguments: dict[str, Any]
    verdict: Verdict | None  # None: cancelled, no answer expected
    cancel_after: float | None = None
    story: Story | None = None  # a session's calls, made one after another (harness/soak_sessions.py)


SLEEP = "import time\ntime.sleep(30)"
FLOODS = [
    "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
    "while True:\n    print('spam ' * 20)",
    "import sys\nwhile True:\n    sys.stderr.write('e' * 4096)",
]
DAEMON = (
    "import os, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        time.sleep(60)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
    "print('parent done')\n"
)


def plan_normal(rng: random.Random) -> Plan:
    n = rng.randrange(1_000_000)
    return Plan("normal", {"code": f"print(sum(range({n})))"}, expect("ok", stdout=f"{sum(range(n))}\n"))


def plan_failing(rng: random.Random) -> Plan:
    n = rng.randrange(1000)
    code = f"print('before')\nraise ValueError('soak {n}')"
    return Plan("failing", {"code": code}, expect("error", stdout="before\n", stderr_has=f"ValueError: soak {n}"))


def plan_timeout(rng: random.Random) -> Plan:
    return Plan("timeout", {"code": SLEEP, "timeout": round(rng.uniform(0.1, 0.5), 3)}, expect("timeout"))


def plan_flood(rng: random.Random) -> Plan:
    return Plan("flood", {"code": rng.choice(FLOODS), "timeout": 30}, expect("output_limit"))


def plan_stdin(rng: random.Random) -> Plan:
    text = "".join(rng.choice("abc xyz\n\u00e9\u20ac") for _ in range(rng.randrange(2000)))
    code = "import sys\nsys.stdout.write(sys.stdin.read())"
    return Plan("stdin", {"code": code, "stdin": text}, expect("ok", stdout=text))


def plan_daemon(rng: random.Random) -> Plan:
    return Plan("daemon", {"code": DAEMON, "timeout": 10}, expect("ok", stdout="parent done\n"))


def plan_cancelled(rng: random.Random) -> Plan:
    return Plan("cancelled", {"code": SLEEP, "timeout": 30}, None, cancel_after=rng.uniform(0.0, 0.4))


def plan_session(rng: random.Random) -> Plan:
    return Plan("session", {}, None, story=plan_story(rng))


KINDS: dict[str, tuple[int, Callable[[random.Random], Plan]]] = {
    "normal": (35, plan_normal),
    "failing": (15, plan_failing),
    "timeout": (10, plan_timeout),
    "flood": (10, plan_flood),
    "stdin": (10, plan_stdin),
    "daemon": (5, plan_daemon),
    "cancelled": (15, plan_cancelled),
    "session": (6, plan_session),
}


def plans(rng: random.Random, count: int, tools: bool = False) -> list[Plan]:
    """`count` plans, every kind at least once when count allows, then by weight; with `tools`, code
    mode's kinds too (harness/soak_tools.py)."""
    kinds = {**KINDS, **tool_kinds(Plan, expect)} if tools else KINDS
    names = list(kinds)
    chosen = names[:count] + rng.choices(names, weights=[kinds[n][0] for n in names], k=max(0, count - len(names)))
    rng.shuffle(chosen)
    return [kinds[name][1](rng) for name in chosen]


# --- a raw JSON-RPC client ------------------------------------------------------------------------------


def wire_problem(message: Any) -> str | None:
    """Why a parsed line from the server is not a JSON-RPC 2.0 message, or None."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return "not a JSON-RPC 2.0 object"
    if "method" in message:
        return None if isinstance(message["method"], str) else "a method that is not a string"
    if ("result" in message) == ("error" in message) or "id" not in message:
        return "a response needs an id and exactly one of result and error"
    return None


class Client:
    """Requests over a server's stdin; a task reading its stdout and handing each response to its caller."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.lines = 0
        self.bad_lines: list[str] = []
        self.stray: list[dict[str, Any]] = []  # responses nobody waits for (a cancelled call answered)
        self.notifications: Counter[str] = Counter()
        self.answered: Counter[int] = Counter()
        self._next_id = 0
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while raw := await self.process.stdout.readline():
            self.lines += 1
            try:
                message = json.loads(raw)
            except ValueError as exc:
                self.bad_lines.append(f"not JSON ({exc}): {raw[:200]!r}")
                continue
            problem = wire_problem(message)
            if problem is not None:
                self.bad_lines.append(f"{problem}: {raw[:200]!r}")
            elif "method" in message:
                self.notifications[message["method"]] += 1
            else:
                request_id = message["id"]
                if isinstance(request_id, int):
                    self.answered[request_id] += 1
                future = self.pending.pop(request_id, None) if isinstance(request_id, int) else None
                if future is not None and not future.done():
                    future.set_result(message)
                else:
                    self.stray.append(message)
        for future in self.pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the server closed its stdout"))

    async def write(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def send(self, method: str, params: dict[str, Any] | None = None) -> tuple[int, asyncio.Future[Any]]:
        request_id = self.new_id()
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.write(message)
        return request_id, future

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        _, future = await self.send(method, params)
        return await asyncio.wait_for(future, 60)

    async def initialize(self) -> None:
        result = await self.request("initialize", INITIALIZE)
        assert "result" in result, result
        await self.write({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def close(self) -> int:
        """stdin EOF, then the server's exit status."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await self.process.stdin.wait_closed()
        code = await asyncio.wait_for(self.process.wait(), 30)
        await asyncio.wait_for(self._reader, 10)
        return code


# --- driving runs ---------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What came back, per kind."""

    statuses: defaultdict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    latencies: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    wrong: list[str] = field(default_factory=list)
    cancelled_ids: list[int] = field(default_factory=list)
    calls: int = 0
    stories: int = 0  # of the calls, session stories (each several calls)


# Session stories open at once: within RUNNER_MAX_SESSIONS_PER_CALLER (`server_env`), so that none
# is refused for the cap (tests/e2e/execution/test_sessions.py tests the caps).
STORIES_AT_ONCE = 8
SESSION_IDLE_SECONDS = 3


async def make_call(
    client: Client,
    tally: Tally,
    kind: str,
    arguments: dict[str, Any],
    *,
    tool: str = "run_python",
    cancel_after: float | None = None,
    answer_within: float = 120,
) -> dict[str, Any] | None:
    """One call, its answer recorded under `kind`: its structuredContent, or None if it was cancelled
    (`cancel_after` seconds after it was sent, unless answered by then) or had no proper answer."""
    started = time.monotonic()
    request_id, future = await client.send("tools/call", {"name": tool, "arguments": arguments})
    if cancel_after is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(future), cancel_after)
        if future.done():
            tally.statuses[kind]["finished before the cancel"] += 1
            return None
        client.pending.pop(request_id, None)  # an answer now would be counted as a stray
        params = {"requestId": request_id, "reason": "soak"}
        await client.write({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})
        tally.cancelled_ids.append(request_id)
        tally.statuses[kind]["cancelled"] += 1
        tally.latencies[kind].append(time.monotonic() - started)
        return None
    try:
        response = await asyncio.wait_for(future, answer_within)
    except TimeoutError:
        tally.statuses[kind]["no answer"] += 1
        tally.wrong.append(f"{kind} call {request_id}: no answer within {answer_within:g} s")
        return None
    tally.latencies[kind].append(time.monotonic() - started)
    structured = response.get("result", {}).get("structuredContent")
    if not isinstance(structured, dict):
        tally.statuses[kind]["protocol error"] += 1
        tally.wrong.append(f"{kind} call {request_id}: {json.dumps(response)[:200]}")
        return None
    tally.statuses[kind][structured.get("status", "closed" if structured.get("closed") else "?")] += 1
    return structured


@dataclass
class StoryCaller:
    """A session story's calls (`harness.soak_sessions.StoryCall`), recorded under "session"."""

    client: Client
    tally: Tally
    sandboxed: bool
    idle_seconds: float = SESSION_IDLE_SECONDS

    async def __call__(
        self, arguments: dict[str, Any], *, tool: str = "run_python", cancel_after: float | None = None
    ) -> dict[str, Any] | None:
        return await make_call(self.client, self.tally, "session", arguments, tool=tool, cancel_after=cancel_after)


async def drive(
    client: Client, batch: list[Plan], concurrency: int, tally: Tally, *, sandboxed: bool, answer_within: float = 120
) -> None:
    """Make every call of `batch`, at most `concurrency` in flight (and `STORIES_AT_ONCE` session
    stories, each one call at a time, on top), and record what came back."""
    gate = asyncio.Semaphore(concurrency)
    stories = asyncio.Semaphore(STORIES_AT_ONCE)
    caller = StoryCaller(client, tally, sandboxed)

    async def one(plan: Plan) -> None:
        if plan.story is not None:
            async with stories:
                tally.calls += 1
                tally.stories += 1
                tally.wrong.extend(await plan.story(caller))
            return
        async with gate:
            tally.calls += 1
            arguments, kind = plan.arguments, plan.kind
            structured = await make_call(
                client, tally, kind, arguments, cancel_after=plan.cancel_after, answer_within=answer_within
            )
            if structured is None or plan.verdict is None:
                return
            problem = plan.verdict(structured)
            if problem is not None:
                tally.wrong.append(f"{kind} call: {problem}")

    await asyncio.gather(*(one(plan) for plan in batch))


def descendants(pid: int) -> set[int]:
    """Live descendants of `pid` (orphans of runs included: the server is their subreaper)."""
    parent_of = parents()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parent_of.items() if parent in frontier} - found
        found |= frontier
    return found


def ours(work_dir: Path, server: int) -> list[int]:
    """The server's helpers alive now (warm pool, fork server, sandboxes) and whatever a run left:
    its descendants, and any process naming the work dir in its command line or environment."""
    return sorted(descendants(server) | set(processes_mentioning(str(work_dir), {server})))


def describe(pids: list[int]) -> dict[int, str]:
    """pid -> parent pid, state and command line, for a report (taken while they are alive)."""
    described = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
            described[pid] = f"ppid={int(fields[1])} state={fields[0].decode()} {cmdline(pid)[:120]}"
        except (OSError, IndexError):
            described[pid] = "gone"
    return described


def server_cgroups(server: int, root: str = CGROUP_ROOT) -> list[str]:
    """The server's parent cgroups (`python-runner-<pid>-*`, one per source and hierarchy), wherever
    they are under /sys/fs/cgroup; none where there are no cgroups."""
    mark = f"python-runner-{server}-"
    found = []
    for top, subdirs, _ in os.walk(root):
        for name in list(subdirs):
            if name.startswith(mark):
                found.append(os.path.join(top, name))
                subdirs.remove(name)  # what is below is the runs'
    return found


def run_cgroups(server: int) -> list[str]:
    """The run cgroups under the server's parents at this moment."""
    return [
        os.path.join(parent, name)
        for parent in server_cgroups(server)
        for name in os.listdir(parent)
        if name.startswith("run-") and os.path.isdir(os.path.join(parent, name))
    ]


def entries(work_dir: Path) -> list[Path]:
    """Everything under the work dir: the pool's base directory and its runs' directories. Not the
    kept output's directory: what it holds lives for RUNNER_KEPT_OUTPUT_SECONDS by design, within the
    store's budgets (tests/unit/execution/test_kept.py)."""
    kept = list(work_dir.glob(KEPT_PREFIX + "*"))
    return sorted(path for path in work_dir.rglob("*") if not any(path == k or k in path.parents for k in kept))


async def cancel_storm(client: Client, calls: int, tally: Tally) -> None:
    """Calls written back to back, each followed at once by its notifications/cancelled: as a client
    whose user stops every call right away. Most are cancelled while waiting for a slot or while their
    interpreter is being started, a window the mixed runs rarely hit."""
    for _ in range(calls):
        params = {"name": "run_python", "arguments": {"code": SLEEP, "timeout": 30}}
        request_id, _ = await client.send("tools/call", params)
        client.pending.pop(request_id, None)
        await client.write(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": request_id, "reason": "soak"},
            }
        )
        tally.cancelled_ids.append(request_id)
        tally.statuses["cancel storm"]["cancelled"] += 1


async def quiet(server: int, work_dir: Path) -> bool:
    """Wait (up to 20 s) until the server is idle: for 1.2 s (past the server's 1 s sweep of strays)
    the number of its helper processes, of entries in its work dir and of its fds have not moved."""
    deadline = time.monotonic() + 20
    samples: list[tuple[int, int, int | None]] = []
    while time.monotonic() < deadline:
        await asyncio.sleep(0.3)
        samples.append((len(ours(work_dir, server)), len(entries(work_dir)), fd_count(server)))
        if len(samples) >= 5 and len(set(samples[-5:])) == 1:
            return True
    return False


# --- the checks -----------------------------------------------------------------------------------------


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    skipped: bool = False


@dataclass
class Peak:
    """The most kept PID namespaces any zygote of the server had, sampled while the mix runs."""

    inits: int = 0

    async def sample(self, server: int, every: float = 0.25) -> None:
        while True:
            self.inits = max(self.inits, Census.of(server).most_inits)
            await asyncio.sleep(every)


def server_env(work_dir: Path, args: argparse.Namespace) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "RUNNER_WORK_DIR": str(work_dir),
        "RUNNER_SANDBOX": args.sandbox,
        "RUNNER_POOL_SIZE": str(args.pool_size),
        "RUNNER_MAX_CONCURRENT": str(args.max_concurrent),
        "RUNNER_MAX_QUEUE": str(max(64, args.concurrency)),
        "RUNNER_MAX_OUTPUT_MB": "1",
        "RUNNER_MAX_CPU_SECONDS": "10",
        "RUNNER_LOG_LEVEL": "info",
        "RUNNER_SESSION_IDLE_SECONDS": str(SESSION_IDLE_SECONDS),
        "RUNNER_MAX_SESSIONS": str(args.max_sessions),
        "RUNNER_MAX_SESSIONS_PER_CALLER": str(STORIES_AT_ONCE),
        # The standard library only unless --env says otherwise (from a checkout the server would take its
        # .sandbox-env and .wheelhouse).
        "RUNNER_PACKAGES": "",
        "RUNNER_WHEELHOUSE": "",
        # Code mode's downstream, its file beside the work dir (not in it: the checks count what is there).
        **({"RUNNER_TOOLS_CONFIG": str(tools_file(work_dir.parent))} if args.tools else {}),
        **dict(item.split("=", 1) for item in args.env),
    }


async def soak(args: argparse.Namespace, work_dir: Path, log_path: Path) -> tuple[list[Check], dict[str, Any]]:
    rng = random.Random(args.seed)
    figures: dict[str, Any] = {
        "runs": args.runs,
        "cancel_storm": args.cancel_storm,
        "concurrency": args.concurrency,
        "max_concurrent": args.max_concurrent,
        "sandbox": args.sandbox,
        "seed": args.seed,
    }
    checks: list[Check] = []
    host_mounts_at_start = count_lines("/proc/self/mountinfo")
    with open(log_path, "wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "runner",
            cwd=REPO,
            env=server_env(work_dir, args),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            limit=LINE_LIMIT,
        )
    client = Client(process)
    try:
        await client.initialize()
        warm = Tally()
        sandboxed = args.sandbox not in ("none", "none-posix-spawn")
        await drive(client, plans(rng, args.warmup, args.tools), args.concurrency, warm, sandboxed=sandboxed)
        figures["quiet_after_warmup"] = await quiet(process.pid, work_dir)
        rss_before, fds_before = proc_status(process.pid).get("VmRSS"), fd_count(process.pid)
        census_before = Census.of(process.pid)
        helpers_before = [pid for pid in ours(work_dir, process.pid) if pid not in census_before.all_inits]
        entries_before = entries(work_dir)
        cgroups_before = run_cgroups(process.pid)
        figures["helpers_after_warmup"] = describe(helpers_before)

        tally = Tally()
        started = time.monotonic()
        peak = Peak()
        sampling = asyncio.create_task(peak.sample(process.pid))
        try:
            await drive(client, plans(rng, args.runs, args.tools), args.concurrency, tally, sandboxed=sandboxed)
        finally:
            sampling.cancel()
        wall = time.monotonic() - started
        await cancel_storm(client, args.cancel_storm, tally)
        figures["quiet_at_end"] = await quiet(process.pid, work_dir)
        rss_after, fds_after = proc_status(process.pid).get("VmRSS"), fd_count(process.pid)
        census_after = Census.of(process.pid)
        peak.inits = max(peak.inits, census_after.most_inits)
        helpers_after = [pid for pid in ours(work_dir, process.pid) if pid not in census_after.all_inits]
        entries_after = entries(work_dir)
        host_mounts_at_end = census_after.host_mounts
        cgroups_after = run_cgroups(process.pid)
        helpers_described = figures["helpers_at_end"] = describe(helpers_after)
        figures["work_dir_at_end"] = [str(path.relative_to(work_dir)) for path in entries_after]
        # Calls still cancelled: give late answers a moment to arrive before counting them.
        await asyncio.sleep(0.2)
        cancelled_answered = sum(client.answered[i] for i in tally.cancelled_ids)
        exit_code = await client.close()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        raise
    # Whatever was ours at the end must be gone within a second of the server (pids are not reused
    # that fast).
    deadline = time.monotonic() + 1.0
    while True:
        last_seen = {*helpers_after, *census_after.all_inits}
        leaked_after = sorted(set(processes_mentioning(str(work_dir))) | {p for p in last_seen if alive(p)})
        if not leaked_after or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.02)
    left_files = sorted(str(path) for path in work_dir.rglob("*"))
    left_cgroups = sorted(server_cgroups(process.pid))
    host_mounts_left = count_lines("/proc/self/mountinfo")
    log_text = log_path.read_text(errors="replace")

    figures.update(
        wall_seconds=round(wall, 2),
        runs_per_second=round(args.runs / wall, 1),
        statuses={kind: dict(counts) for kind, counts in sorted(tally.statuses.items())},
        session_stories=tally.stories,
        latency_seconds={
            kind: {"p50": round(statistics.median(v), 3), "p95": round(_percentile(v, 95), 3), "max": round(max(v), 3)}
            for kind, v in sorted(tally.latencies.items())
            if v
        },
        rss_before=rss_before,
        rss_after=rss_after,
        fds_before=fds_before,
        fds_after=fds_after,
        stdout_lines=client.lines,
        notifications=dict(client.notifications),
        log_cancelled_runs=log_text.count("status=cancelled"),
        log_cancelled_calls=log_text.count("call cancelled"),
        log_killed_strays=log_text.count("killing a process a run left behind"),
        log_errors=log_text.count(" ERROR "),
        log_error_lines=[line[:300] for line in log_text.splitlines() if " ERROR " in line][:5],
        server_log=str(log_path),
    )

    answered_once = all(client.answered[i] <= 1 for i in client.answered)
    checks.append(
        Check(
            "every call ended as its kind must",
            not tally.wrong and answered_once and tally.calls == args.runs,
            f"{tally.calls - len(tally.wrong):,} of {args.runs:,} right"
            + (f"; {tally.wrong[:3]}" if tally.wrong else ""),
        )
    )
    checks.append(
        Check(
            "cancelled calls got no answer",
            cancelled_answered == 0,
            f"{len(tally.cancelled_ids)} cancelled, {cancelled_answered} answered anyway",
        )
    )
    checks.append(
        Check(
            "stdout carried only JSON-RPC",
            not client.bad_lines and not [m for m in client.stray if m.get("id") is None],
            f"{client.lines:,} lines, {len(client.bad_lines)} bad"
            + (f": {client.bad_lines[:2]}" if client.bad_lines else ""),
        )
    )
    new = [helpers_described[pid] for pid in helpers_after if pid not in helpers_before]
    checks.append(
        Check(
            "server's processes, end vs warm-up",
            len(helpers_after) <= len(helpers_before),
            f"{len(helpers_before)} -> {len(helpers_after)} (warm pool, fork server; but kept PID namespaces' "
            "inits; bound: no more)" + (f"; new: {new[:3]}" if len(helpers_after) > len(helpers_before) else ""),
        )
    )
    bound = kept_bound(args.pool_size, args.max_concurrent, args.max_sessions)
    if census_after.inits or census_before.inits:
        checks.append(
            Check(
                "kept PID namespaces of a zygote",
                peak.inits <= bound and census_after.most_inits <= bound,
                f"at most {peak.inits} during the mix, {census_before.most_inits} -> {census_after.most_inits} "
                f"(bound {bound}: RUNNER_POOL_SIZE + RUNNER_MAX_CONCURRENT + RUNNER_MAX_SESSIONS)",
            )
        )
    zygote_fds = [
        (census_before.fds_beyond_inits(zygote), census_after.fds_beyond_inits(zygote))
        for zygote in census_before.inits
        if zygote in census_after.inits
    ]
    if zygote_fds and all(None not in pair for pair in zygote_fds):
        checks.append(
            Check(
                "zygotes' fds, end vs warm-up",
                all(after <= before for before, after in zygote_fds),  # type: ignore[operator]
                ", ".join(f"{before} -> {after}" for before, after in zygote_fds)
                + " (but 3 for each kept namespace, and its network namespace and cgroup; bound +0)",
            )
        )
    zygote_mounts = [
        (census_before.zygote_mounts.get(zygote), census_after.zygote_mounts.get(zygote))
        for zygote in census_before.inits
    ]
    if zygote_mounts and all(None not in pair for pair in zygote_mounts):
        checks.append(
            Check(
                "zygotes' mounts, end vs warm-up",
                all(after == before for before, after in zygote_mounts),
                ", ".join(f"{before} -> {after}" for before, after in zygote_mounts) + " (the runs' shared view)",
            )
        )
    checks.append(
        Check(
            "host mounts: warm-up, end, server gone",
            census_before.host_mounts == host_mounts_at_end == host_mounts_left == host_mounts_at_start,
            f"{host_mounts_at_start} before the server, {census_before.host_mounts} -> {host_mounts_at_end}, "
            f"{host_mounts_left} once it is gone (bound: no more)",
        )
    )
    checks.append(
        Check(
            "work-dir entries, end vs warm-up",
            len(entries_after) <= len(entries_before),
            f"{len(entries_before)} -> {len(entries_after)} (the pool's directories; bound: no more)",
        )
    )
    if fds_before is None or fds_after is None:
        checks.append(Check("server fds, end vs warm-up", True, "not measurable here (/proc/<pid>/fd needs root)"))
    else:
        grown = fds_after - fds_before
        checks.append(
            Check("server fds, end vs warm-up", grown <= 0, f"{fds_before} -> {fds_after} ({grown:+d}, bound +0)")
        )
    if rss_before is None or rss_after is None:
        checks.append(Check("server RSS growth", False, "VmRSS not readable"))
    else:
        growth = (rss_after - rss_before) / MIB
        checks.append(
            Check(
                "server RSS growth",
                growth <= args.max_rss_growth_mib,
                f"{rss_before / MIB:.1f} MiB -> {rss_after / MIB:.1f} MiB ({growth:+.1f} MiB, "
                f"bound {args.max_rss_growth_mib:g} MiB)",
            )
        )
    # A namespaced zygote keeps a cgroup with each kept namespace: no more of them than its inits, and
    # no more of the others (a spawned run's own) than at the warm-up.
    kept_before = kept_cgroups(cgroups_before, list(census_before.inits))
    kept_after = kept_cgroups(cgroups_after, list(census_after.inits))
    others_before = [path for path in cgroups_before if os.path.basename(path) not in kept_before]
    others_after = [path for path in cgroups_after if os.path.basename(path) not in kept_after]
    inits_after = sum(len(inits) for inits in census_after.inits.values())
    checks.append(
        Check(
            "run cgroups, end vs warm-up",
            len(others_after) <= len(others_before) and len(kept_after) <= inits_after,
            f"{len(others_before)} -> {len(others_after)} (the warm pool's spawned runs; bound: no more); kept with "
            f"a namespace {len(kept_before)} -> {len(kept_after)} (bound: the kept inits, {inits_after})",
        )
    )
    checks.append(Check("server exit status on stdin EOF", exit_code == 0, str(exit_code)))
    checks.append(Check("leaked processes, server gone", not leaked_after, str(len(leaked_after))))
    checks.append(Check("files left in the work dir", not left_files, str(len(left_files))))
    checks.append(Check("cgroups left, server gone", not left_cgroups, str(left_cgroups[:3] or 0)))
    return checks, figures


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# --- a client that disconnects mid-run -----------------------------------------------------------------

# A holding run and the setsid daemon it leaves, each marked by its command name (prctl PR_SET_NAME,
# which a process may do to itself in every mode, and which the host's /proc/PID/comm shows under its
# host pid; a sandboxed run's /proc is read-only).
HOLD = (
    "import ctypes, os, time\n"
    "def mark(kind):\n"
    "    ctypes.CDLL(None).prctl(15, ({tag!r} + kind).encode(), 0, 0, 0)\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        mark('d')\n"
    "        time.sleep(120)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
    "mark('r')\n"
    "time.sleep(120)\n"
)


def marked(tag: str) -> list[tuple[int, str]]:
    """Live processes whose command name is `tag` and one letter: (host pid, "r" run or "d" daemon)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                name = Path(f"/proc/{entry}/comm").read_text().strip()
            except OSError:
                continue
            if name[:-1] == tag and alive(int(entry)):
                found.append((int(entry), name[-1]))
    return found


def disconnect_client(
    work_dir: str, tag: str, calls: int, running: int, how: str, log: str, settings: list[str]
) -> int:
    """The client process of `disconnect_check`: start a server, fill it with runs that hold, then
    report them and either close the server's stdin (eof) or wait to be killed (kill)."""
    args = _parser().parse_args([f"--env={setting}" for setting in settings])
    env = {**server_env(Path(work_dir), args), "RUNNER_MAX_CONCURRENT": str(running)}
    with open(log, "wb") as errlog:
        server = subprocess.Popen(
            [sys.executable, "-m", "runner"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
        )
    assert server.stdin is not None
    assert server.stdout is not None

    def write(message: dict[str, Any]) -> None:
        assert server.stdin is not None
        server.stdin.write(json.dumps(message).encode() + b"\n")
        server.stdin.flush()

    write({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE})
    server.stdout.readline()
    write({"jsonrpc": "2.0", "method": "notifications/initialized"})
    code = HOLD.format(tag=tag)
    for n in range(1, calls + 1):
        params = {"name": "run_python", "arguments": {"code": code, "timeout": 60}}
        write({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params})
    deadline = time.monotonic() + 30
    seen: list[tuple[int, str]] = []
    while time.monotonic() < deadline:
        seen = marked(tag)
        started = Counter(kind for _, kind in seen)
        if started["r"] >= running and started["d"] >= running:
            break
        time.sleep(0.02)
    sys.stdout.write(json.dumps({"server": server.pid, "marked": [pid for pid, _ in seen]}) + "\n")
    sys.stdout.flush()
    if how == "eof":
        server.stdin.close()
        sys.stdout.write("closed\n")
        sys.stdout.flush()
        server.stdout.read()  # keep reading: this client has only hung up its own end
    time.sleep(3600)
    return 0


def disconnect_check(
    how: str,
    work_dir: Path,
    log: Path,
    running: int = 3,
    calls: int = 5,
    settings: tuple[str, ...] = ("RUNNER_SANDBOX=none",),
) -> Check:
    """A client fills a server with `calls` holding runs (`running` at once, each with a setsid daemon),
    then disconnects: SIGKILLed ("kill": stdin EOF and a dead stdout) or closing the server's stdin
    ("eof"). One second later no run or daemon may be alive; the server must be gone within 5 s."""
    tag = "soak" + os.urandom(4).hex()  # 12 characters and the kind: within comm's 15
    client = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--disconnect-client",
            how,
            str(work_dir),
            tag,
            str(calls),
            str(running),
            str(log),
            *settings,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None
        ready, _, _ = select.select([client.stdout], [], [], 60)
        if not ready:
            return Check(f"client {how} mid-run", False, "the client never got its runs going")
        said = json.loads(client.stdout.readline())
        server, pids = said["server"], said["marked"]
        if how == "kill":
            client.send_signal(signal.SIGKILL)
        else:
            assert client.stdout.readline() == "closed\n"
        gone_at = time.monotonic()
        server_gone = runs_gone = survivors = others = None
        while time.monotonic() < gone_at + 5 and (server_gone is None or survivors is None):
            if runs_gone is None and not any(alive(pid) for pid in pids) and not marked(tag):
                runs_gone = time.monotonic() - gone_at
            if server_gone is None and not alive(server):
                server_gone = time.monotonic() - gone_at
            if survivors is None and time.monotonic() >= gone_at + 1.0:
                survivors = sorted({pid for pid in pids if alive(pid)} | {pid for pid, _ in marked(tag)})
                others = processes_mentioning(str(work_dir), {server, client.pid, *pids})
            time.sleep(0.005)
        assert survivors is not None
        assert others is not None
    finally:
        if client.poll() is None:
            client.kill()
        client.wait(10)
        if client.stdout is not None:
            client.stdout.close()
    left = sorted(str(path) for path in work_dir.rglob("*"))
    label = "client killed mid-run" if how == "kill" else "client closed stdin mid-run"
    if len(pids) < 2 * running:
        return Check(label, False, f"only {len(pids)} of {2 * running} runs and daemons ever started")
    ok = not survivors and not others and server_gone is not None and not left
    detail = (
        f"{len(survivors)} of {len(pids)} runs and daemons alive 1 s later"
        + (f" (all gone after {runs_gone:.2f} s)" if runs_gone is not None else "")
        + f", {len(others)} other processes; "
        + (f"server gone after {server_gone:.2f} s" if server_gone is not None else "server still alive after 5 s")
        + (f"; {len(left)} files left" if left else "")
    )
    return Check(label, ok, detail)


# --- command line ----------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="calls to make after warm-up (default 2000)")
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight at once (default 16)")
    parser.add_argument("--max-concurrent", type=int, default=4, help="RUNNER_MAX_CONCURRENT (default 4)")
    parser.add_argument("--pool-size", type=int, default=2, help="RUNNER_POOL_SIZE (default 2)")
    parser.add_argument("--max-sessions", type=int, default=16, help="RUNNER_MAX_SESSIONS (default 16)")
    parser.add_argument(
        "--sandbox",
        default="auto",
        choices=["auto", "namespaces", "bwrap", "none", "none-posix-spawn"],
        help="RUNNER_SANDBOX (default auto, the server's own default)",
    )
    parser.add_argument(
        "--cancel-storm",
        type=int,
        default=20,
        help="after the mix, calls written back to back, each cancelled as soon as sent (default 20)",
    )
    parser.add_argument("--warmup", type=int, default=100, help="mixed calls before the first measurement")
    parser.add_argument(
        "--max-rss-growth-mib", type=float, default=16.0, help="bound on server VmRSS growth (default 16)"
    )
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="another RUNNER_* setting for the server"
    )
    parser.add_argument(
        "--tools", action="store_true", help="mix in code mode's runs: a downstream's tools called (harness/soak_tools)"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the mix (default: random, printed)")
    parser.add_argument("--no-disconnect", action="store_true", help="skip the client-disconnect checks")
    parser.add_argument("--json", type=Path, help="also write the figures and checks here")
    parser.add_argument("--log", type=Path, help="the server's stderr log (default: in a temporary directory)")
    parser.add_argument("--disconnect-client", nargs="+", help=argparse.SUPPRESS)
    return parser


def report(checks: list[Check], figures: dict[str, Any], args: argparse.Namespace) -> None:
    say(
        f"soak: {args.runs:,} runs after {args.warmup} warm-up, client concurrency {args.concurrency}, "
        f"RUNNER_MAX_CONCURRENT={args.max_concurrent}, pool {args.pool_size}, sandbox {args.sandbox}, "
        f"then {args.cancel_storm} calls cancelled at once, "
        + ("code mode's runs mixed in, " if args.tools else "")
        + f"seed {args.seed}"
    )
    statuses: dict[str, dict[str, int]] = figures.get("statuses", {})
    columns = sorted({status for counts in statuses.values() for status in counts})
    say()
    say(f"{'kind':<12} {'runs':>6} " + " ".join(f"{c:>{max(7, len(c))}}" for c in columns) + "     p50     p95")
    for kind, counts in statuses.items():
        latency = figures.get("latency_seconds", {}).get(kind, {})
        cells = " ".join(f"{counts.get(c, 0):>{max(7, len(c))}}" for c in columns)
        timing = f"{latency['p50']:>6.3f}s {latency['p95']:>6.3f}s" if latency else "      -       -"
        say(f"{kind:<12} {sum(counts.values()):>6} {cells} {timing}")
    if "wall_seconds" in figures:
        say()
        say(
            f"wall time {figures['wall_seconds']:.1f} s ({figures['runs_per_second']:.1f} runs/s), "
            f"{figures['stdout_lines']:,} stdout lines"
        )
        say(
            f"server log: {figures['log_cancelled_calls']} calls cancelled "
            f"({figures['log_cancelled_runs']} while running, the rest before their run started), "
            f"{figures['log_killed_strays']} daemons killed by the sweep, {figures['log_errors']} ERROR lines"
        )
        for line in figures["log_error_lines"]:
            say(f"  {line}")
    say()
    for check in checks:
        verdict = "SKIP" if check.skipped else "PASS" if check.ok else "FAIL"
        say(f"  {verdict}  {check.name:<42} {check.detail}")
    failed = [c for c in checks if not c.ok]
    say()
    summary = f"{len(checks) - len(failed)} of {len(checks)} checks passed"
    say(summary + (f"; FAILED: {[c.name for c in failed]}" if failed else ""))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.disconnect_client:
        how, work_dir, tag, calls, running, log, *settings = args.disconnect_client
        return disconnect_client(work_dir, tag, int(calls), int(running), how, log, settings)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    scratch = Path(tempfile.mkdtemp(prefix="runner-soak-"))
    work_dir = scratch / "work"
    work_dir.mkdir()
    log_path = args.log or scratch / "server.log"
    checks, figures = asyncio.run(soak(args, work_dir, log_path))
    if not args.no_disconnect:
        for how in ("kill", "eof"):
            where = scratch / f"disconnect-{how}"
            (where / "work").mkdir(parents=True)
            settings = (f"RUNNER_SANDBOX={args.sandbox}", f"RUNNER_POOL_SIZE={args.pool_size}", *args.env)
            checks.append(disconnect_check(how, where / "work", where / "server.log", settings=settings))
    report(checks, figures, args)
    if args.json:
        payload = {**figures, "checks": [c.__dict__ for c in checks], "passed": all(c.ok for c in checks)}
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    if all(c.ok for c in checks) and args.log is None:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        say(f"kept {scratch} for inspection")
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
