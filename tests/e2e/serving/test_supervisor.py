"""Several workers behind one port (RUNNER_HTTP_WORKERS): load spread over them, metrics added up,
a dead worker replaced, and everything gone after SIGTERM. 64 official clients at once."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import anyio.abc
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO
from tests.helpers import alive, check_structured, children_of, processes_mentioning, settled
from tests.http_server import HttpServer, http_server, server_env

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

CLIENTS = 64
CALLS_PER_CLIENT = 20


@pytest.fixture
def left_nothing(work_dir: Path) -> Iterator[None]:
    yield
    assert settled(lambda: processes_mentioning(str(work_dir)), 10) == []
    assert settled(lambda: list(work_dir.iterdir()), 10) == []


def workers_of(server: HttpServer) -> list[int]:
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").read_text().split()
    return [int(pid) for pid in children]


def when(probe: Callable[[], list[int]], timeout: float = 20) -> list[int]:
    """`probe()` once it is not empty, or at the deadline."""
    deadline = time.monotonic() + timeout
    while not (value := probe()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return value


async def holding_a_call(tg: anyio.abc.TaskGroup, server: HttpServer, marker: Path) -> None:
    """Start a call on `server` that sleeps 100 s (`long_call`, in `tg`); return once it runs."""
    code = f"import time\nopen({str(marker)!r}, 'w').close()\ntime.sleep(100)"
    tg.start_soon(anyio.to_thread.run_sync, long_call, server, code)
    with anyio.fail_after(60):
        while not marker.exists():
            await anyio.sleep(0.02)


async def running(tg: anyio.abc.TaskGroup, server: HttpServer, marker: Path, then: str = "time.sleep(100)") -> int:
    """Start a call on `server` whose run writes its pid to `marker`, then does `then` (`long_call`, in
    `tg`); the run's pid, once it runs."""
    code = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\n{then}"
    tg.start_soon(anyio.to_thread.run_sync, long_call, server, code)
    with anyio.fail_after(60):
        while not marker.exists() or not marker.read_text():
            await anyio.sleep(0.02)
    return int(marker.read_text())


def long_call(server: HttpServer, code: str) -> None:
    """POST a call of `code` with a 120 s timeout and wait for its answer; its worker may close the
    connection as it stops or is killed: what the tests look at is the server, not this answer."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "run_python", "arguments": {"code": code, "timeout": 120}},
    }
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2025-06-18",
    }
    with contextlib.suppress(httpx2.HTTPError):
        httpx2.post(server.url, json=message, headers=headers, timeout=150)


def scrape(server: HttpServer) -> dict[str, float]:
    text = httpx2.get(server.base + "/metrics").text
    return {
        sample.name + json.dumps(sample.labels, sort_keys=True): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_sixty_four_clients_making_twenty_calls_each_all_succeed_across_two_workers(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    env = {"RUNNER_HTTP_WORKERS": "2", "RUNNER_POOL_SIZE": "2", "RUNNER_MAX_QUEUE": "0"}
    served_by: Counter[int] = Counter()
    failures: list[str] = []
    with http_server(work_dir, tmp_path / "log", **env) as server:
        workers = await anyio.to_thread.run_sync(lambda: when(lambda: workers_of(server)))
        assert len(workers) == 2

        async def one_client(number: int) -> None:
            mode = "legacy" if number % 2 else "auto"
            async with Client(streamable_http_client(server.url), mode=mode) as client:  # type: ignore[arg-type]
                for call in range(CALLS_PER_CLIENT):
                    code = f"import os; print(os.getppid(), {number * 100 + call})"
                    result = await client.call_tool("run_python", {"code": code})
                    structured = check_structured(result.structured_content)
                    parent, echoed = structured["stdout"].split()
                    if structured["status"] != "ok" or int(echoed) != number * 100 + call:
                        failures.append(f"client {number} call {call}: {structured}")
                    served_by[int(parent)] += 1

        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                for number in range(CLIENTS):
                    tg.start_soon(one_client, number)
        metrics = scrape(server)
        assert server.stop() == 0
    assert failures == []
    assert sum(served_by.values()) == CLIENTS * CALLS_PER_CLIENT
    assert len(served_by) == 2, "both workers' zygotes ran calls"
    assert metrics['runner_calls_total{"caller": "-", "status": "ok"}'] == CLIENTS * CALLS_PER_CLIENT, (
        "a scrape that reaches one worker counts the calls of both"
    )
    assert metrics["runner_max_concurrent{}"] == 8, "4 slots in each of 2 workers"
    assert not any(alive(pid) for pid in workers)
    assert not list(tmp_path.glob("work/python-runner-metrics-*")), "the shared metrics directory is removed"


async def test_a_worker_that_dies_is_replaced_the_port_keeps_serving_and_the_server_exits_1_naming_it(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """Found by a review: the supervisor exited 0 at its stop, whatever its workers' ends had been, so an
    orchestrator never learnt that one had died (a single server's death it would have seen)."""
    log = tmp_path / "log"
    with http_server(work_dir, log, RUNNER_HTTP_WORKERS="2") as server:
        first = await anyio.to_thread.run_sync(lambda: when(lambda: workers_of(server)))
        assert len(first) == 2
        os.kill(first[0], signal.SIGKILL)

        def two_without_the_killed_one() -> list[int]:
            now = workers_of(server)
            return now if len(now) == 2 and first[0] not in now else []

        replaced = await anyio.to_thread.run_sync(lambda: when(two_without_the_killed_one))
        assert len(replaced) == 2
        assert first[0] not in replaced
        for _ in range(6):
            answer = httpx2.post(
                server.url,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "run_python", "arguments": {"code": "print('up')"}},
                },
                headers={
                    "content-type": "application/json",
                    "accept": "application/json, text/event-stream",
                    "mcp-protocol-version": "2025-06-18",
                },
                timeout=60,
            )
            assert '"stdout":"up\\n"' in answer.text
        assert server.stop() == 1, log.read_text()
    text = log.read_text()
    assert f"worker ended; starting another pid={first[0]} status=-9" in text
    assert text.splitlines()[-1].endswith(f"server stopped; workers had ended badly count=1 ended={first[0]}:-9")


async def test_a_worker_stopped_by_someone_else_ends_well_and_the_server_still_exits_0(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """A worker's clean exit (SIGTERM once it listens for it) is no failure, whoever asked: it is
    replaced, and the server's status stays 0."""
    log = tmp_path / "log"
    with http_server(work_dir, log, RUNNER_HTTP_WORKERS="2") as server:
        first = await anyio.to_thread.run_sync(lambda: when(lambda: workers_of(server)))
        assert len(first) == 2
        # Each says so once it hears SIGTERM (`signals.catch_early`, before its pool starts).
        with anyio.fail_after(60):
            while log.read_text().count("pool starting") < 2:
                await anyio.sleep(0.02)
        os.kill(first[0], signal.SIGTERM)

        def two_without_the_stopped_one() -> list[int]:
            now = workers_of(server)
            return now if len(now) == 2 and first[0] not in now else []

        assert len(await anyio.to_thread.run_sync(lambda: when(two_without_the_stopped_one, 60))) == 2
        assert server.stop() == 0, log.read_text()
    assert f"worker ended; starting another pid={first[0]} status=0" in log.read_text()
    assert "ended badly" not in log.read_text()


async def test_a_worker_killed_during_the_stop_makes_the_server_exit_1_naming_it(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """Found by a review: a worker that died while the server stopped (killed, or crashed in its grace)
    was reaped without a word, and the server exited 0."""
    marker = tmp_path / "started"
    log = tmp_path / "log"
    with http_server(work_dir, log, RUNNER_HTTP_WORKERS="2", RUNNER_SHUTDOWN_GRACE="100") as server:
        async with anyio.create_task_group() as tg:
            await holding_a_call(tg, server, marker)
            server.process.send_signal(signal.SIGTERM)
            # The worker without a call stops at once; the one with it gives the call its grace.
            [holding] = await anyio.to_thread.run_sync(
                lambda: when(lambda: workers if len(workers := workers_of(server)) == 1 else [], 60)
            )
            os.kill(holding, signal.SIGKILL)
            status = await anyio.to_thread.run_sync(lambda: server.process.wait(30))
    text = log.read_text()
    assert status == 1, text
    assert f"worker ended badly while stopping pid={holding} status=-9" in text
    assert text.splitlines()[-1].endswith(f"server stopped; workers had ended badly count=1 ended={holding}:-9")


def test_a_sigterm_while_the_workers_start_stops_them_all(work_dir: Path, tmp_path: Path, left_nothing: None) -> None:
    """The signal comes once the first worker exists, before the supervisor has started the others."""
    env = server_env(work_dir, RUNNER_HTTP_WORKERS="4")
    with open(tmp_path / "log", "wb") as errlog:
        process = subprocess.Popen(
            [sys.executable, "-m", "runner", "--transport", "http"], cwd=REPO, env=env, stderr=errlog
        )
    deadline = time.monotonic() + 60
    while not Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split():
        assert time.monotonic() < deadline, "no worker started"
        time.sleep(0.0005)
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0, (tmp_path / "log").read_text()


async def test_a_second_sigterm_cuts_the_workers_grace_short_as_for_one_server(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """Found by a review: the supervisor passed a signal on once, so a second one did nothing and the
    server waited out the grace with a call in flight (31.3 s of a 30 s grace; 1.7 s with one worker)."""
    marker = tmp_path / "started"
    log = tmp_path / "log"
    with http_server(work_dir, log, RUNNER_HTTP_WORKERS="2", RUNNER_SHUTDOWN_GRACE="100") as server:
        async with anyio.create_task_group() as tg:
            await holding_a_call(tg, server, marker)
            server.process.send_signal(signal.SIGTERM)
            # Each worker says it heard the first: the one with the call now gives it the grace. The
            # other may still be starting (on a busy machine), and says so in another line.
            heard = ("signal received; finishing the calls in flight", "signal received at start; stopping")
            with anyio.fail_after(60):
                while sum(map(log.read_text().count, heard)) < 2:
                    await anyio.sleep(0.02)
            server.process.send_signal(signal.SIGTERM)
            # Well within the 100 s grace: the second signal ends the call's run at once.
            status = await anyio.to_thread.run_sync(lambda: server.process.wait(30))
    assert status == 0, log.read_text()
    # A stop cut short as documented: no traceback of the app's lifespan cut with it (found by a review).
    assert "Traceback" not in log.read_text()


async def test_a_killed_worker_s_plain_runs_are_killed_before_its_directory_goes(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """Found by a review: the supervisor removed a dead worker's directory, the only thing that named
    its plain runs, and left the runs (a posix-spawned run's parent is its worker): alive for good.
    The run's child is what shows it (found by an audit of the claims: the run itself dies of its own
    parent-death signal, so the test passed with the supervisor's kill taken out)."""
    env = {"RUNNER_HTTP_WORKERS": "2", "RUNNER_SANDBOX": "none-posix-spawn"}
    child_pid = tmp_path / "child-pid"
    then = (
        "import subprocess\n"
        f"p = subprocess.Popen(['sleep', '600'])\nopen({str(child_pid)!r}, 'w').write(str(p.pid))\ntime.sleep(100)"
    )
    with http_server(work_dir, tmp_path / "log", **env) as server:
        async with anyio.create_task_group() as tg:
            run = await running(tg, server, tmp_path / "run-pid", then)
            with anyio.fail_after(20):
                while not child_pid.exists() or not child_pid.read_text():
                    await anyio.sleep(0.02)
            child = int(child_pid.read_text())
            [worker] = [pid for pid in workers_of(server) if run in children_of(pid)]
            os.kill(worker, signal.SIGKILL)
            try:
                assert await anyio.to_thread.run_sync(lambda: settled(lambda: alive(run), 30)) is False
                assert await anyio.to_thread.run_sync(lambda: settled(lambda: alive(child), 30)) is False
            finally:
                if alive(child):
                    os.kill(child, signal.SIGKILL)
        assert server.stop() == 1, "a worker was killed"


@pytest.mark.parametrize("next_workers", ["2", "1"], ids=["the next supervisor", "the next single server"])
def test_what_a_supervisor_killed_with_sigkill_left_is_removed_by_the_next_start(
    work_dir: Path, tmp_path: Path, next_workers: str, left_nothing: None
) -> None:
    """Found by looking: a SIGKILLed supervisor left its metrics directory (its workers' files) and each
    worker's directory, and no later start removed them: in a pod's emptyDir they piled up restart by
    restart."""
    with http_server(work_dir, tmp_path / "log", RUNNER_HTTP_WORKERS="2") as server:
        workers = when(lambda: workers_of(server) if len(workers_of(server)) == 2 else [])
        assert httpx2.get(server.base + "/metrics").status_code == 200
        server.process.kill()
        server.process.wait()
        assert settled(lambda: [pid for pid in workers if alive(pid)], 30) == []
    left = sorted(path.name for path in work_dir.iterdir())
    assert any(name.startswith("python-runner-metrics-held-") for name in left), left
    assert sum(name.startswith("python-runner-worker-held-") for name in left) == 2, left
    with http_server(work_dir, tmp_path / "next-log", RUNNER_HTTP_WORKERS=next_workers) as server:
        # A single server's pool removes them as it opens, which may be after it answers /healthz.
        assert settled(lambda: set(left) & {path.name for path in work_dir.iterdir()}, 30) == set()
        assert server.stop() == 0
    assert "removed what a dead server left directories=3" in (tmp_path / "next-log").read_text()


async def test_a_start_while_a_killed_supervisors_workers_finish_their_calls_leaves_them_alone(
    work_dir: Path, tmp_path: Path, left_nothing: None
) -> None:
    """Found by a review: the supervisor alone held its workers' directories, so a start during their grace
    (a restart, another server in the same RUNNER_WORK_DIR) took them for a dead server's, killed a live
    worker's plain run and removed its directory. Each worker now holds them too; the start after the
    last of them is gone removes them."""
    done = tmp_path / "done"
    env = {"RUNNER_HTTP_WORKERS": "2", "RUNNER_SANDBOX": "none-posix-spawn", "RUNNER_SHUTDOWN_GRACE": "60"}
    with http_server(work_dir, tmp_path / "log", **env) as server:
        async with anyio.create_task_group() as tg:
            run = await running(tg, server, tmp_path / "run-pid", f"time.sleep(4)\nopen({str(done)!r}, 'w')")
            workers = workers_of(server)
            [busy] = [pid for pid in workers if run in children_of(pid)]
            environ = Path(f"/proc/{busy}/environ").read_bytes().split(b"\0")
            [busy_dir] = [Path(os.fsdecode(e.partition(b"=")[2])) for e in environ if e.startswith(b"RUNNER_WORK_DIR=")]
            server.process.kill()  # its workers are told (SIGTERM) and finish the call within their grace
            server.process.wait()
            env_next = {"RUNNER_SANDBOX": "none-posix-spawn", "RUNNER_HTTP_WORKERS": "2"}
            with http_server(work_dir, tmp_path / "next-log", **env_next) as following:
                assert httpx2.get(following.base + "/healthz").status_code == 200
                with anyio.fail_after(60):
                    while not done.exists():
                        await anyio.sleep(0.05)
                # Its run was not killed (it wrote `done`), and its directory is still there. (The idle worker
                # ended at once, and its directory may have gone with this start.)
                assert busy_dir.is_dir()
                assert following.stop() == 0
    assert settled(lambda: [pid for pid in workers if alive(pid)], 60) == []
    with http_server(work_dir, tmp_path / "last-log", RUNNER_HTTP_WORKERS="2") as last:
        assert last.stop() == 0
    assert "removed what a dead server left" in (tmp_path / "last-log").read_text()
