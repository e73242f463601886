"""The image, built for real and run with a real engine (podman), with the two lines of the Makefile:
the recommended one (every run forked into namespaces of its own) and the plain one.

`make test-container` builds the image from a local base and runs this file with CONTAINER_ENGINE and
CONTAINER_TEST_IMAGE set; without them (in `make test`) every test here is skipped, saying so. The lines
come from `make -n docker-run` and `make -n docker-run-plain`, so these tests check what users run; and
the Docker entry of each of mcp-config-examples/ is started as a client starts it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from runner.outcome import Status
from tests.conftest import REPO
from tests.e2e.adversarial.cases import CASES, Case
from tests.raw import RawSession

ENGINE = os.environ.get("CONTAINER_ENGINE", "")
IMAGE = os.environ.get("CONTAINER_TEST_IMAGE", "")
pytestmark = [
    pytest.mark.skipif(
        not (ENGINE and IMAGE),
        reason="no image to test: `make test-container` builds one with podman (installing it as root where it "
        "can) and runs these tests against it",
    ),
    pytest.mark.timeout(600),
]
LINES = {"sandboxed": "docker-run", "plain": "docker-run-plain"}
SANDBOX_OF = {"sandboxed": "namespaces", "plain": "none"}
# The image's sandbox size (RUNNER_SANDBOX_TMP_MB in the Dockerfile).
IMAGE_SANDBOX_TMP_MB = 32


def line(name: str, *settings: str) -> list[str]:
    """The Makefile's `docker run` line, with `-e` settings put before the image."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", LINES[name], f"DOCKER={ENGINE}", f"IMAGE={IMAGE}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    [command] = [row for row in done.stdout.splitlines() if " run " in row]
    words = shlex.split(command.removeprefix("exec "))
    assert words[-1] == IMAGE
    extra = [word for setting in settings for word in ("-e", setting)]
    return [*words[:-1], *extra, IMAGE]


@asynccontextmanager
async def served(name: str, errlog: Path, *settings: str) -> AsyncIterator[Client]:
    command, *args = line(name, *settings)
    params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    with open(errlog, "w") as log:
        async with Client(stdio_client(params, errlog=log), mode="legacy") as client:  # type: ignore[arg-type]
            yield client


async def call(client: Client, code: str, timeout: float = 10, stdin: str = "") -> dict[str, Any]:
    arguments: dict[str, Any] = {"code": textwrap.dedent(code), "timeout": timeout}
    if stdin:
        arguments["stdin"] = stdin
    result = await client.call_tool("run_python", arguments)
    assert result.structured_content is not None
    return result.structured_content


async def stdout_of(client: Client, code: str) -> str:
    structured = await call(client, code)
    assert structured["status"] == "ok", structured
    text: str = structured["stdout"]
    return text


@pytest.fixture(params=list(LINES))
def line_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# --- One whole session, as make docker-test runs it ------------------------------------------------


def test_one_full_session_passes_every_check_of_its_line(line_name: str, tmp_path: Path) -> None:
    errlog = tmp_path / "server.log"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "docker_session.py"),
            "--container",
            "--sandbox",
            SANDBOX_OF[line_name],
            "--sandbox-tmp-mb",
            str(IMAGE_SANDBOX_TMP_MB),
            "--errlog",
            str(errlog),
            "--",
            *line(line_name),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr + errlog.read_text()
    starting = next(row for row in errlog.read_text().splitlines() if "pool starting" in row)
    assert f"sandbox={SANDBOX_OF[line_name]} " in starting, starting


# --- Nothing of one run reaches a later one ----------------------------------------------------------

PLANT = """
    import os, time
    from multiprocessing import resource_tracker, shared_memory
    planted = []
    for name in os.listdir(".."):
        path = os.path.join("..", name)
        if os.path.isdir(path) and os.path.realpath(path) != os.getcwd():
            try:
                open(os.path.join(path, "planted-sibling"), "w").write("x")
                planted.append(path)
            except OSError:
                pass
    for path in ("/tmp/planted-tmp", "/dev/shm/planted-shm"):
        open(path, "w").write("x")
    segment = shared_memory.SharedMemory(name="planted-segment", create=True, size=4096)
    resource_tracker.unregister(segment._name, "shared_memory")  # left for the next run to find
    # A daemon in its own session keeps planting after the run has ended.
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for fd in (0, 1, 2):
                os.close(fd)
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                for path in ["/tmp/planted-daemon"] + [os.path.join(p, "planted-daemon") for p in planted]:
                    try:
                        open(path, "w").write("x")
                    except OSError:
                        pass
                time.sleep(0.002)
            os._exit(0)
        os._exit(0)
    print("planted")
"""

LOOK = """
    import json, os
    from multiprocessing import shared_memory
    try:
        shared_memory.SharedMemory(name="planted-segment").close()
        segment = "found"
    except FileNotFoundError:
        segment = "absent"
    print(json.dumps({
        "own": sorted(os.listdir(".")),
        "tmp": sorted(name for name in os.listdir("/tmp") if name.startswith("planted")),
        "shm": sorted(name for name in os.listdir("/dev/shm") if "planted" in name),
        "segment": segment,
    }))
"""


async def _later_runs_see(line_name: str, errlog: Path) -> list[dict[str, Any]]:
    async with served(line_name, errlog) as client:
        assert await stdout_of(client, PLANT) == "planted\n"
        return [json.loads(await stdout_of(client, LOOK)) for _ in range(3)]


@pytest.mark.anyio
async def test_a_later_run_starts_with_nothing_an_earlier_run_wrote_in_its_directory(
    line_name: str, tmp_path: Path
) -> None:
    for seen in await _later_runs_see(line_name, tmp_path / "server.log"):
        assert seen["own"] == []


@pytest.mark.anyio
async def test_in_the_sandboxed_line_no_file_or_segment_of_an_earlier_run_is_visible(tmp_path: Path) -> None:
    for seen in await _later_runs_see("sandboxed", tmp_path / "server.log"):
        assert seen == {"own": [], "tmp": [], "shm": [], "segment": "absent"}


@pytest.mark.anyio
@pytest.mark.xfail(
    strict=True,
    reason="the plain line's runs share the container's /tmp and /dev/shm (docs/security.md, Limitations)",
)
async def test_in_the_plain_line_no_file_or_segment_of_an_earlier_run_is_visible(tmp_path: Path) -> None:
    for seen in await _later_runs_see("plain", tmp_path / "server.log"):
        assert seen == {"own": [], "tmp": [], "shm": [], "segment": "absent"}


CONCURRENT = """
    import json, os, time
    me, other = "@ME@", "@OTHER@"
    open(f"/tmp/{me}", "w").write("x")
    open(f"/dev/shm/{me}", "w").write("x")
    seen = set()
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        seen |= {name for name in os.listdir("/tmp") + os.listdir("/dev/shm") if name == other}
        for pid in (entry for entry in os.listdir("/proc") if entry.isdigit()):
            try:
                if other.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                    seen.add("process")
            except OSError:
                pass
        time.sleep(0.01)
    print(json.dumps({"pids": sorted(int(e) for e in os.listdir("/proc") if e.isdigit()), "seen": sorted(seen)}))
"""


@pytest.mark.anyio
async def test_in_the_sandboxed_line_concurrent_runs_cannot_see_each_other(tmp_path: Path) -> None:
    async with served("sandboxed", tmp_path / "server.log") as client:
        first, second = await asyncio.gather(
            stdout_of(client, CONCURRENT.replace("@ME@", "run-a").replace("@OTHER@", "run-b")),
            stdout_of(client, CONCURRENT.replace("@ME@", "run-b").replace("@OTHER@", "run-a")),
        )
    for seen in (json.loads(first), json.loads(second)):
        assert seen["seen"] == []
        assert set(seen["pids"]) <= {1, 2}


THREAD_POOL = """
    import concurrent.futures, os, zlib
    data = [os.urandom(1 << 20) for _ in range(8)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as workers:
        print(len(list(workers.map(lambda chunk: len(zlib.compress(chunk, 6)), data))))
"""


@pytest.mark.anyio
async def test_an_ordinary_thread_pool_runs_under_the_images_default_limits(line_name: str, tmp_path: Path) -> None:
    async with served(line_name, tmp_path / "server.log") as client:
        assert await stdout_of(client, THREAD_POOL) == "8\n"


DATA_WORK = """
    import numpy as np, pandas as pd
    import matplotlib.pyplot as plt
    frame = pd.DataFrame({"x": np.arange(1000), "y": np.random.default_rng(1).normal(size=1000).cumsum()})
    frame.plot(x="x", y="y")
    frame.to_csv("frame.csv", index=False)
    frame.describe()
"""


# What the image's wheelhouse gives runs: imported by name, read-only, never installed at run time.
WHEELHOUSE_WORK = """
    import os, sympy
    from bs4 import BeautifulSoup
    print(sympy.sqrt(8), BeautifulSoup("<p>hi</p>", "html.parser").p.text)
    try:
        open(os.path.join(os.path.dirname(sympy.__file__), "evil.py"), "w")
    except OSError as exc:
        print(exc.errno)
"""


@pytest.mark.anyio
async def test_the_image_s_wheelhouse_packages_import_and_are_read_only(line_name: str, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    async with served(line_name, log) as client:
        assert await stdout_of(client, WHEELHOUSE_WORK) == "2*sqrt(2) hi\n30\n"
        tools = await client.list_tools()
        assert "sympy" in (tools.tools[0].description or "")
    text = log.read_text()
    assert "cache_writable=False" in text, text
    assert "packages installed" not in text, "the image's build installed them all"


# A data run (in the preloading zygote) tries to import the server's own packages.
SERVER_IMPORTS = """
    import numpy
    for name in ("mcp", "pydantic", "runner"):
        try:
            __import__(name)
            print(name)
        except ImportError:
            pass
"""


@pytest.mark.anyio
async def test_data_work_returns_its_table_its_plot_and_its_file_under_the_images_default_limits(
    line_name: str, tmp_path: Path
) -> None:
    async with served(line_name, tmp_path / "server.log") as client:
        for _ in range(2):  # the second from the warm preloading zygote
            result = await client.call_tool("run_python", {"code": textwrap.dedent(DATA_WORK), "timeout": 60})
            structured = result.structured_content
            assert structured is not None
            assert structured["status"] == "ok", structured
            assert "count  1000.000000" in structured["result"]
            assert [(i["name"], i["width"], i["height"]) for i in structured["images"]] == [("figure-1.png", 640, 480)]
            kinds = [block.type for block in result.content]
            assert kinds[:2] == ["text", "image"], kinds
            [csv] = structured["files"]
            assert (csv["path"], csv["mime_type"], kinds[2]) == ("frame.csv", "text/csv", "resource")
        assert await stdout_of(client, SERVER_IMPORTS) == ""
    log = (tmp_path / "server.log").read_text()
    assert "preload=numpy,pandas,matplotlib.pyplot" in log, log


# --- PID 1 and the container's environment ----------------------------------------------------------

REACH_PID1 = """
    import ctypes, errno, json, os, signal
    found = []
    for pid in (entry for entry in os.listdir("/proc") if entry.isdigit()):
        try:
            if b"@TOKEN@" in open(f"/proc/{pid}/environ", "rb").read():
                found.append(int(pid))
        except OSError:
            pass
    try:
        open("/proc/1/environ", "rb").read()
        environ = "read"
    except OSError as exc:
        environ = errno.errorcode[exc.errno]
    pid1 = open("/proc/1/cmdline", "rb").read().replace(b"\\0", b" ").decode().strip()
    ptrace = "not tried"
    if not pid1.startswith("/usr/bin/bwrap"):  # bwrap's init can be traced: stopping it would hang this run
        libc = ctypes.CDLL(None, use_errno=True)
        attached = libc.ptrace(16, 1, 0, 0) == 0  # PTRACE_ATTACH
        ptrace = "attached" if attached else errno.errorcode[ctypes.get_errno()]
        if attached:
            libc.ptrace(17, 1, 0, 0)  # PTRACE_DETACH
    os.kill(1, signal.SIGSTOP)
    print(json.dumps({"token_in": found, "environ": environ, "ptrace": ptrace, "pid1": pid1}))
"""


@asynccontextmanager
async def served_raw(name: str, errlog: Path, *settings: str) -> AsyncIterator[RawSession]:
    """The container with a hand-written client; on leaving, it must end by itself, exit 0, when its
    stdin closes (a stopped or wedged PID 1 would keep it, and `--rm` with it, forever)."""
    with open(errlog, "w") as log:
        process = await anyio.open_process(line(name, *settings), stderr=log)
    async with process:
        session = RawSession(process)
        await session.initialize()
        yield session
        assert process.stdin is not None
        await process.stdin.aclose()
        with anyio.fail_after(30):
            assert await process.wait() == 0


async def raw_stdout(session: RawSession, code: str) -> str:
    reply = await session.request("tools/call", {"name": "run_python", "arguments": {"code": textwrap.dedent(code)}})
    structured = reply["result"]["structuredContent"]
    assert structured["status"] == "ok", structured
    text: str = structured["stdout"]
    return text


@pytest.mark.anyio
async def test_no_run_reads_the_containers_environment_or_stops_its_pid_1(line_name: str, tmp_path: Path) -> None:
    token = "container-secret-" + uuid.uuid4().hex
    async with served_raw(line_name, tmp_path / "server.log", f"SECRET_FOR_THE_TEST={token}") as session:
        seen = json.loads(await raw_stdout(session, REACH_PID1.replace("@TOKEN@", token)))
        # PID 1 got SIGSTOP: the server still answers, and the container ends when the client goes.
        assert await raw_stdout(session, "print('still serving')") == "still serving\n"
    assert seen["token_in"] == []
    if line_name == "plain":
        # tini, the container's PID 1, runs as the runs' uid: only its being non-dumpable keeps them out.
        assert (seen["pid1"].split()[0], seen["environ"], seen["ptrace"]) == ("/usr/bin/tini", "EACCES", "EPERM")
    else:
        # The container's PID 1 is not even visible: PID 1 of the run's namespace is the init the zygote
        # forked for it, which no run can read or trace either.
        assert "zygote.py" in seen["pid1"], seen["pid1"]
        assert (seen["environ"], seen["ptrace"]) == ("EACCES", "EPERM")


# --- The hostile snippets that apply through a container -----------------------------------------------

PLACEHOLDER = re.compile(r"@(TMP|SERVER_PID|PORT|TOKEN)@")
# The adversarial pool's limits (tests/e2e/adversarial/conftest.small_limits), passed with -e.
SMALL_LIMITS = (
    "RUNNER_POOL_SIZE=0",
    "RUNNER_MAX_CONCURRENT=1",
    "RUNNER_MAX_CPU_SECONDS=1",
    "RUNNER_MAX_MEMORY_MB=256",
    "RUNNER_MAX_FILE_SIZE_MB=1",
    "RUNNER_MAX_OUTPUT_MB=4",
    "RUNNER_MAX_OUTPUT_CHARS=20000",
    "RUNNER_MAX_TIMEOUT=10",
)


# Where the container, not the case, decides the outcome: the suite runs as root, where RLIMIT_NPROC is
# not enforced; in the container the runs' uid 10001 meets the process limit (and --pids-limit) first.
IN_CONTAINER = {
    "a thread bomb with small stacks dies with its process": dataclasses.replace(
        next(case for case in CASES if case.id == "a thread bomb with small stacks dies with its process"),
        expect=frozenset({Status.TIMEOUT}),  # the threads it did start keep it alive
        check=None,
        stdout_has=("stopped: can't start new thread",),
    ),
}


def carried_by_json(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def applies(case: Case, line_name: str) -> bool:
    """Cases that need nothing of the host's (its pid, a port, a directory) and no host-side check, and
    whose code and stdin a JSON-RPC message can carry (a lone surrogate is answered at the wire,
    tests/e2e/test_stdio_server.py); those that could signal every process run only where runs have a PID
    namespace of their own."""
    if PLACEHOLDER.search(case.code) or case.check is not None or case.holes or case.listener:
        return False
    if not (carried_by_json(case.code) and carried_by_json(case.stdin)):
        return False
    return line_name == "sandboxed" or not case.needs_pid_namespace


def problems_of(case: Case, result: dict[str, Any]) -> list[str]:
    found = []
    if result["status"] not in {status.value for status in case.expect}:
        found.append(f"status {result['status']}, expected one of {sorted(s.value for s in case.expect)}")
    for name, want in (("stdout", case.stdout), ("stderr", case.stderr)):
        if want is not None and result[name] != want:
            found.append(f"{name} {result[name][:200]!r}, expected {want[:200]!r}")
    for name, has, lacks in (
        ("stdout", case.stdout_has, case.stdout_lacks),
        ("stderr", case.stderr_has, case.stderr_lacks),
    ):
        found += [f"{name} lacks {text!r}" for text in has if text not in result[name]]
        found += [f"{name} has {text!r}" for text in lacks if text in result[name]]
    if case.signal is not None and result["signal"] != case.signal:
        found.append(f"signal {result['signal']}, expected {case.signal}")
    return found


@pytest.mark.anyio
async def test_every_hostile_snippet_that_applies_ends_as_expected_and_the_server_serves_on(
    line_name: str, tmp_path: Path
) -> None:
    cases = [IN_CONTAINER.get(case.id, case) for case in CASES if applies(case, line_name)]
    assert len(cases) > 50
    failures = []
    # Hand-written JSON-RPC: some snippets' stdin is not valid Unicode, which the SDK client cannot send.
    async with served_raw(line_name, tmp_path / "server.log", *SMALL_LIMITS) as session:
        for case in cases:
            arguments = {"code": case.code, "timeout": case.timeout, "stdin": case.stdin}
            reply = await session.request("tools/call", {"name": "run_python", "arguments": arguments})
            if "result" not in reply:
                failures.append(f"{case.id}: answered {reply}")
                continue
            failures += [f"{case.id}: {problem}" for problem in problems_of(case, reply["result"]["structuredContent"])]
            assert await raw_stdout(session, "print('next')") == "next\n", f"the server stopped serving after {case.id}"
    assert failures == [], "\n".join(failures)


# --- The config examples' Docker entries, started as a client starts them ------------------------------

CONFIG_DIR = REPO / "mcp-config-examples"
CONFIG_EXAMPLES = sorted(path.name for path in CONFIG_DIR.glob("*.json"))
# What the examples leave to the user: the image's name and where the clone is.
EXAMPLE_IMAGE = "turhal-ai/python-runner-mcp:latest"
EXAMPLE_CLONE = "/path/to/python-runner-mcp"


def docker_entry(example: str) -> list[str]:
    """The command and arguments of the example's entry whose command is `docker`."""
    servers = json.loads((CONFIG_DIR / example).read_text())["mcpServers"]
    [entry] = [entry for entry in servers.values() if entry["command"] == "docker"]
    return [entry["command"], *entry["args"]]


def for_this_engine(words: list[str]) -> list[str]:
    """The one mapping from an example's entry to what runs here: podman for docker, the image built for
    these tests for the example's, this clone for the placeholder in the seccomp profile's path; every
    flag of the example kept, in its order. One flag is added: podman's --read-only also mounts
    writable, unbounded tmpfs at /var/tmp and /run unless told not to (Docker mounts none), so podman
    users add --read-only-tmpfs=false, as docs/docker.md says and the Makefile's lines do."""
    command, run, *flags, image = words
    assert (command, run, image) == ("docker", "run", EXAMPLE_IMAGE)
    flags = [flag.replace(EXAMPLE_CLONE, str(REPO)) for flag in flags]
    return [ENGINE, run, *flags, "--read-only-tmpfs=false", IMAGE]


def pool_start(log: str) -> dict[str, Any]:
    """The fields of the server's "pool starting" line, in either log format."""
    [starting] = [row for row in log.splitlines() if "pool starting" in row]
    if starting.startswith("{"):
        fields: dict[str, Any] = json.loads(starting)
        return fields
    return {key: value.strip('"') for key, value in re.findall(r'(\w+)=("[^"]*"|\S+)', starting)}


@pytest.mark.anyio
@pytest.mark.parametrize("example", CONFIG_EXAMPLES)
async def test_each_config_example_s_docker_entry_serves_the_image_and_its_run_prints_42(
    example: str, tmp_path: Path
) -> None:
    command, *args = for_this_engine(docker_entry(example))
    [profile] = [flag.removeprefix("seccomp=") for flag in args if flag.startswith("seccomp=")]
    assert Path(profile).is_file(), profile
    # The client's environment (CONTAINERS_CONF: this machine's podman settings), from /, not the clone.
    params = StdioServerParameters(command=command, args=args, env=dict(os.environ), cwd="/")
    log = tmp_path / "server.log"
    with open(log, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            result = await session.call_tool("run_python", {"code": "print(6*7)"})
    assert [tool.name for tool in tools.tools] == ["run_python", "close_session"]
    assert not result.is_error, result
    assert result.structured_content is not None, result
    assert (result.structured_content["status"], result.structured_content["stdout"]) == ("ok", "42\n")
    text = log.read_text()
    starting = pool_start(text)
    assert starting["sandbox"] == "namespaces", text  # the recommended line: every run in its own namespaces
    # An example's -e settings reach the server: openclaw's asks for JSON logs (their lines carry "level").
    assert ("level" in starting) == ("RUNNER_LOG_FORMAT=json" in args), text


# --- Streamable HTTP from the image --------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_image_serves_http_with_a_token_hides_the_tokens_from_runs_and_stops_cleanly(
    line_name: str, tmp_path: Path
) -> None:
    """The Makefile's line with the host's network instead of none (the port must be reachable), the
    tokens file mounted read-only under /run/secrets as Kubernetes mounts a Secret."""
    token = "container-http-" + uuid.uuid4().hex
    (tmp_path / "tokens").write_text(f"tester:{token}\n")
    (tmp_path / "tokens").chmod(0o644)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = (
        "RUNNER_TRANSPORT=http",
        f"RUNNER_HTTP_PORT={port}",
        "RUNNER_AUTH_TOKENS_FILE=/run/secrets/runner/tokens",
    )
    command = [
        "--network=host" if word == "--network=none" else word for word in line(line_name, *settings) if word != "-i"
    ]
    image = command.pop()
    command += ["-v", f"{tmp_path / 'tokens'}:/run/secrets/runner/tokens:ro,Z", image]
    log = tmp_path / "server.log"
    with open(log, "wb") as errlog:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog)
    try:
        with anyio.fail_after(120):
            while "serving on HTTP" not in log.read_text(errors="replace"):
                assert process.poll() is None, log.read_text()
                await anyio.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        assert httpx2.post(url, json={}, headers={"content-type": "application/json"}).status_code == 401
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=60)
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:  # type: ignore[arg-type]
            seen = await stdout_of(
                client,
                """
                try:
                    print(repr(open('/run/secrets/runner/tokens').read()))
                except OSError as exc:
                    print(type(exc).__name__)
                """,
            )
        if line_name == "sandboxed":
            assert token not in seen, "the tokens are not in a run's view"
        else:
            assert token in seen, "the plain line's documented hole: runs share the server's uid"
            assert "a run can read RUNNER_AUTH_TOKENS_FILE" in log.read_text(), "and the server said so"
        ready = httpx2.get(f"http://127.0.0.1:{port}/readyz")
        assert ready.status_code == 200, ready.text
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # podman passes it to tini, which passes it to the server
        returncode = await anyio.to_thread.run_sync(lambda: process.wait(60))
    assert returncode == 0, log.read_text()
    assert token not in log.read_text()
