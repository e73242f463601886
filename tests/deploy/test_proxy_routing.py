"""Replicas behind a real proxy: Debian's nginx, started here with deploy/nginx/sessions.conf, in
front of two `python -m runner --transport http` processes on loopback.

The official Python client mirrors `session` into `Mcp-Param-Session` (SEP-2243); each replica
names itself in the handles it makes (RUNNER_HTTP_REPLICA), and nginx routes on that name, so every
call of a session reaches the process that holds it, while new sessions (whose header is "new") go
round-robin over both. 20 sessions of 10 calls each run at once; every one must find its
state intact in every call. nginx is not our code and is not imitated: without it (not root, no
apt-get) these tests are skipped and say why.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import REPO
from tests.helpers import check_structured, processes_mentioning, settled
from tests.http_server import HttpServer, http_server
from tests.tasks_client import TasksExtension

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

NGINX = "/usr/sbin/nginx"
SESSIONS_CONF = REPO / "deploy" / "nginx" / "sessions.conf"
SESSIONS, CALLS = 20, 10


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def configured(backends: list[str], port: int) -> str:
    """deploy/nginx/sessions.conf with this test's listen address and replicas, nothing else changed."""
    text = SESSIONS_CONF.read_text()
    assert text.count("listen 8080;") == 1, "the shipped config still has the shape this test edits"
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{port};")
    for number, backend in enumerate(backends):
        assert text.count(f"server runner-{number}.runner:8000;") == 2
        text = text.replace(f"server runner-{number}.runner:8000;", f"server {backend};")
    assert "runner:8000" not in text
    return text


@contextlib.contextmanager
def nginx(prefix: Path, backends: list[str]) -> Iterator[str]:
    """nginx in the foreground with its files under `prefix`; the URL of its MCP endpoint."""
    if not Path(NGINX).exists():
        pytest.skip(f"no {NGINX}: `make container-tools` installs Debian's nginx-light as root")
    port = free_port()
    for name in ("logs", "temp"):
        (prefix / name).mkdir(parents=True)
    conf = prefix / "nginx.conf"
    conf.write_text(
        "daemon off;\nworker_processes 1;\npid logs/nginx.pid;\nerror_log logs/error.log warn;\n"
        "events { worker_connections 256; }\n"
        "http {\n access_log off;\n client_body_temp_path temp/body;\n proxy_temp_path temp/proxy;\n"
        " fastcgi_temp_path temp/fastcgi;\n uwsgi_temp_path temp/uwsgi;\n scgi_temp_path temp/scgi;\n"
        + configured(backends, port)
        + "}\n"
    )
    check = subprocess.run([NGINX, "-t", "-p", str(prefix), "-c", str(conf)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    with open(prefix / "logs" / "stderr", "wb") as stderr:
        process = subprocess.Popen([NGINX, "-p", str(prefix), "-c", str(conf)], stderr=stderr)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert process.poll() is None, (prefix / "logs" / "stderr").read_text()
            assert time.monotonic() < deadline, "nginx did not start listening"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


@contextlib.contextmanager
def two_replicas(work_dir: Path, logs: Path) -> Iterator[list[HttpServer]]:
    """runner-0 and runner-1, as deploy/nginx/sessions.conf names them, each in a work dir of its own."""
    caps = {"RUNNER_MAX_SESSIONS": str(SESSIONS), "RUNNER_MAX_SESSIONS_PER_CALLER": str(SESSIONS)}
    with contextlib.ExitStack() as stack:
        replicas = []
        for name in ("runner-0", "runner-1"):
            (work_dir / name).mkdir()
            server = http_server(work_dir / name, logs / f"{name}.log", RUNNER_HTTP_REPLICA=name, **caps)
            replicas.append(stack.enter_context(server))
        yield replicas


@contextlib.asynccontextmanager
async def client(url: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(120)) as http,
        Client(streamable_http_client(url, http_client=http), mode="auto") as mcp,  # type: ignore[arg-type]
    ):
        await mcp.list_tools()  # where the client learns that `session` goes into a header
        yield mcp


async def test_nginx_routing_on_mcp_param_session_keeps_20_sessions_of_10_calls_each_intact_over_two_replicas(
    work_dir: Path, tmp_path: Path
) -> None:
    failures: list[str] = []

    async def one_session(url: str, number: int) -> None:
        async with client(url) as mcp:
            started = await mcp.call_tool("run_python", {"code": f"n = {number * 1000}\nseen = []", "session": "new"})
            handle = check_structured(started.structured_content)["session"]
            if not handle.startswith(("s-runner-0.", "s-runner-1.")):
                failures.append(f"session {number}: {handle!r} names no replica")
                return
            for step in range(1, CALLS + 1):
                code = f"n += 1\nseen.append({step})\nprint(n, len(seen), sum(seen))"
                result = check_structured(
                    (await mcp.call_tool("run_python", {"code": code, "session": handle})).structured_content
                )
                expected = f"{number * 1000 + step} {step} {step * (step + 1) // 2}\n"
                if result["status"] != "ok" or result["stdout"] != expected:
                    failures.append(
                        f"session {number} call {step}: {result['status']} {result['message']!r} {result['stdout']!r}"
                    )
                    return
            closed = await mcp.call_tool("close_session", {"session": handle})
            if closed.is_error:
                failures.append(f"session {number} did not close")

    with two_replicas(work_dir, tmp_path) as replicas:
        backends = [server.url.removeprefix("http://").removesuffix("/mcp") for server in replicas]
        with nginx(tmp_path / "nginx", backends) as url:
            async with anyio.create_task_group() as tg:
                for number in range(SESSIONS):
                    tg.start_soon(one_session, url, number)
        for server in replicas:
            assert server.stop() == 0
    assert failures == []
    started = [server.log.read_text().count("session started") for server in replicas]
    assert sum(started) == SESSIONS
    assert min(started) >= SESSIONS // 4, f"new sessions spread over both replicas: {started}"
    assert settled(lambda: processes_mentioning(str(work_dir))) == []


async def test_nginx_routes_each_task_and_each_kept_output_to_the_replica_that_holds_it(
    work_dir: Path, tmp_path: Path
) -> None:
    """Mcp-Name carries a task's id on tasks/* and a link's URI on resources/read; both name the
    replica that made them, so that polling a task and reading a link never land on the other one."""
    failures: list[str] = []
    made: list[str] = []

    async def one_task(url: str, number: int) -> None:
        extension = TasksExtension()
        async with (
            httpx2.AsyncClient(timeout=httpx2.Timeout(120)) as http,
            Client(streamable_http_client(url, http_client=http), mode="auto", extensions=[extension]) as mcp,  # type: ignore[arg-type]
        ):
            code = f"import time\ntime.sleep(1.3)\nprint('{number}' * 30_000)"
            result = await mcp.call_tool("run_python", {"code": code})
            made.extend(created.task_id for created in extension.created)
            structured = check_structured(result.structured_content)
            if structured["status"] != "ok" or not structured["stdout_truncated"] or not extension.created:
                failures.append(f"task {number}: {structured['status']} {extension.created}")
                return
            [kept] = structured["full_output"]
            read = await mcp.read_resource(kept["uri"])
            [contents] = read.contents
            if not isinstance(contents, types.TextResourceContents) or contents.text != f"{number}" * 30_000 + "\n":
                failures.append(f"task {number}: its output read back wrong")

    with two_replicas(work_dir, tmp_path) as replicas:
        backends = [server.url.removeprefix("http://").removesuffix("/mcp") for server in replicas]
        with nginx(tmp_path / "nginx", backends) as url:
            async with anyio.create_task_group() as tg:
                for number in range(8):
                    tg.start_soon(one_task, url, number)
        for server in replicas:
            assert server.stop() == 0
    assert failures == []
    assert len(made) == 8
    assert {task_id.split(".")[0] for task_id in made} == {"t-runner-0", "t-runner-1"}, "spread over both"
    assert settled(lambda: processes_mentioning(str(work_dir))) == []


async def test_nginx_refuses_a_session_header_under_a_protocol_version_that_predates_its_check(
    work_dir: Path, tmp_path: Path
) -> None:
    with two_replicas(work_dir, tmp_path) as replicas:
        backends = [server.url.removeprefix("http://").removesuffix("/mcp") for server in replicas]
        with nginx(tmp_path / "nginx", backends) as url:
            old = httpx2.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={
                    "mcp-protocol-version": "2025-11-25",
                    "mcp-param-session": "s-x",
                    "accept": "application/json",
                },
            )
            assert old.status_code == 400
            assert "2026-07-28" in old.text
            plain = httpx2.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers={"mcp-protocol-version": "2025-11-25", "accept": "application/json, text/event-stream"},
            )
            assert plain.status_code == 200, "without the header, an older version passes"
