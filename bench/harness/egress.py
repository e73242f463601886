"""The egress scenario: what a run's floods of the proxy cost the server's CPU. The floods are the ones
tests/e2e/egress/test_hostile_runs.py counts against the proxy's pace (tests/hostile_egress.py: a body of
1-byte chunks, tunnels written a byte at a time, eight processes connecting, asking, trickling heads,
sending heads of 4,000 lines); the tests hold what each gets the proxy to do, this measures what that
costs on this machine, which the tests cannot (a bound in CPU seconds set on one machine failed CI on a
machine half as fast, with the pacing intact).

Each flood runs 3 s in a namespaced server whose listed hosts are real sockets in this process; for each,
the server's own CPU (utime + stime: the proxy is the server's event loop) over the run's wall time,
as a share of a core, against two runs in the same server and rounds: one that sleeps as long (what a
run costs the server however idle), and an honest one that downloads through a tunnel as fast as the
proxy serves it for as long (what the pace lets a fast, legitimate run cost). Whether each flood is paced
is the tests' to say, not this: the download is paced by the same reads as the byte-at-a-time tunnels,
and unpaced those cost about what the paced download does (the run's own writes are their limit here).
The floods of heads of 4,000 lines wait most of their wall time (their processes' 5 s timeouts while the
proxy holds its listener), so their share of a core is low by that too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import statistics
import threading
import time
from types import ModuleType
from typing import Any

from .drivers import open_conn
from .procfs import stat_cpu
from .scenarios import say
from .servers import REPO, Launch, ServerSpec
from .workloads import Params

SECONDS = 3
IDLE = f"import time\ntime.sleep({SECONDS})\nprint('done')\n"
# A tunnel to a host that sends from the moment it is reached, read as fast as it comes for SECONDS.
DOWNLOAD = """
import socket, time
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\n\\r\\n")
got, end = 0, time.monotonic() + {seconds}
while time.monotonic() < end:
    got += len(s.recv(1 << 16))
print(got >> 20, "MiB")
"""


def _floods() -> ModuleType:
    """tests/hostile_egress.py, by its path: the floods and the listed hosts the tests use (stdlib only)."""
    spec = importlib.util.spec_from_file_location("hostile_egress", REPO / "tests" / "hostile_egress.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _speaks(floods: ModuleType) -> contextlib.AbstractContextManager[int]:
    """A listed host that sends each connection 64 KiB blocks from the moment it is accepted, as fast as
    they are taken."""

    def send(connection: socket.socket, stop: threading.Event) -> None:
        with connection, contextlib.suppress(OSError):
            connection.settimeout(0.2)
            block = b"x" * (1 << 16)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    connection.send(block)

    manager: contextlib.AbstractContextManager[int] = floods.upstream(send)
    return manager


async def scenario_egress(specs: list[ServerSpec], launch: Launch, params: Params) -> dict[str, Any]:
    floods = _floods()
    host = floods.UPSTREAM_HOST
    [spec] = [s for s in specs if s.kind == "runner"][:1]
    rounds = 1 if params.trivial_calls < 100 else 3
    taken: dict[str, list[tuple[float, float]]] = {}
    with (
        floods.sink() as sunk,
        floods.answers() as answering,
        floods.dribbles() as dribbling,
        _speaks(floods) as speaking,
    ):
        extra = {
            "RUNNER_SANDBOX": "namespaces",
            "RUNNER_EGRESS_ALLOW": f"{host}:{sunk},{host}:{answering},{host}:{dribbling},{host}:{speaking}",
            "RUNNER_MAX_EGRESS_MB": "1048576",  # the download is not cut by the budget
        }
        closed = answering + 1 if answering < 65535 else answering - 1
        runs = {
            "idle": IDLE,
            "download": DOWNLOAD.format(host=host, port=speaking, seconds=SECONDS),
            "chunks": floods.CHUNKS.format(host=host, port=sunk, seconds=SECONDS),
            "tunnels": floods.TRICKLE.format(host=host, port=sunk),
            "tunnels_in": floods.DRIBBLED.format(host=host, port=dribbling),
            **{
                kind: floods.FLOOD.format(host=host, port=answering, closed=closed, flood=kind)
                for kind in floods.FLOODS
            },
        }
        say(f"[egress] {rounds} round(s) of {len(runs)} runs of {SECONDS} s in a namespaced server")
        async with contextlib.AsyncExitStack() as stack:
            try:
                conn = await open_conn("raw", spec, launch, "egress", stack, extra)
            except Exception as exc:  # no egress here (a server that cannot serve it stops at start)
                say(f"[egress] skipped: the server did not start with egress ({exc!r})")
                return {"skipped": f"no egress here: see {launch.log_path(spec, 'egress')}"}
            for _ in range(rounds):
                for name, code in runs.items():
                    before, start = stat_cpu(conn.pid)[0], time.perf_counter()
                    result = await conn.call(code, None, run_timeout=60)
                    wall, cpu = time.perf_counter() - start, stat_cpu(conn.pid)[0] - before
                    status = (result.structured or {}).get("status")
                    if not result.ok or status != "ok":
                        raise SystemExit(f"run_bench: the egress run {name!r} ended {status!r}: {result.problem}")
                    taken.setdefault(name, []).append((cpu, wall))
    return {"seconds": SECONDS, "rounds": rounds, "runs": taken}


def egress_rows(report: dict[str, Any]) -> list[str]:
    """Markdown: each flood's cost to the server, as a share of a core, against the idle and honest runs."""
    scenario = report.get("egress")
    if not scenario:
        return []
    if "skipped" in scenario:
        return [f"Skipped: {scenario['skipped']}.", ""]

    def share(name: str) -> tuple[float, float, float]:
        cpu = statistics.median(c for c, _ in scenario["runs"][name])
        wall = statistics.median(w for _, w in scenario["runs"][name])
        return cpu, wall, cpu / wall

    download = share("download")[2]
    lines = [
        f"The server's CPU while one run does each for {scenario['seconds']} s, p50 of {scenario['rounds']} "
        "round(s); the share of a core is CPU over the run's wall time.",
        "",
        "| run | server CPU | run's wall time | share of a core | / the download's |",
        "|---|---|---|---|---|",
    ]
    for name in scenario["runs"]:
        cpu, wall, part = share(name)
        lines.append(f"| {name} | {cpu:.2f} s | {wall:.2f} s | {part:.0%} | {part / download:.2f}x |")
    return [*lines, ""]
