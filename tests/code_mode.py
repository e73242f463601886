"""What code mode's tests share (tests/e2e/tools, the Inspector's): a tools file, and a real server over
stdio with the official client, with it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import REPO
from tests.helpers import check_structured, children_of

# mcp-server-time, from requirements-downstream.lock (`make test` builds the venv).
DOWNSTREAM_ENV = Path(os.environ.get("RUNNER_TEST_DOWNSTREAM", str(REPO / ".downstream-env")))
TIME_SERVER = DOWNSTREAM_ENV / "bin" / "mcp-server-time"


HOSTILE_SERVER = REPO / "tests" / "downstream" / "hostile_server.py"


def hostile(**env: str) -> dict[str, Any]:
    """tests/downstream/hostile_server.py as a tools file entry (every tool), with `env`."""
    return {"command": sys.executable, "args": [str(HOSTILE_SERVER)], "tools": ["*"], **({"env": env} if env else {})}


def tools_file(directory: Path, **servers: Any) -> Path:
    """RUNNER_TOOLS_CONFIG's file in `directory`, naming `servers`."""
    path = directory / "tools.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def stdio_env(work_dir: Path, **env: str) -> dict[str, str]:
    """A stdio server's environment: one pooled interpreter, the standard library only, plain runs
    unless `env` says otherwise."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "RUNNER_WORK_DIR": str(work_dir),
        "RUNNER_POOL_SIZE": "1",
        "RUNNER_SANDBOX": "none",
        "RUNNER_PACKAGES": "",
        "RUNNER_WHEELHOUSE": "",
        **env,
    }


def stdio_params(work_dir: Path, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "runner"], cwd=str(REPO), env=stdio_env(work_dir, **env)
    )


def stdio_session(work_dir: Path, errlog: Any, **env: str) -> Client:
    """The official client of a stdio server of ours (`stdio_env`), its log to `errlog`."""
    return Client(stdio_client(stdio_params(work_dir, **env), errlog=errlog))


async def run(client: Client, code: str, **arguments: Any) -> dict[str, Any]:
    """run_python's structured result for `code` (30 s unless `arguments` say otherwise)."""
    result = await client.call_tool("run_python", {"code": code, "timeout": 30, **arguments})
    return check_structured(result.structured_content)


def waited_out(done: dict[str, Any], call: str) -> bool:
    """Whether a run whose tool `call` never answers waited for it until its own time was up: killed at
    its timeout, which names the call (never told a moment before that the call had no time left, and
    ended on its own: found by a soak, 3 runs in 6,000)."""
    return done["status"] == "timeout" and f"while waiting for the tool {call};" in done["message"]


async def run_once(work_dir: Path, log: Path, code: str, **env: str) -> dict[str, Any]:
    """One run of `code` on a stdio server of ours started for it (`stdio_env`), its log in `log`."""
    with log.open("w") as errlog:
        async with stdio_session(work_dir, errlog, **env) as client:
            return await run(client, code)


def server_process() -> int:
    """The pid of the stdio server of ours the test has open (`stdio_session`: a child of its process)."""
    [pid] = [pid for pid in children_of(os.getpid()) if b"runner" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    return pid


def peak_memory(pid: int) -> int:
    """`pid`'s peak resident memory (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def cpu_seconds(pid: int) -> float:
    """The CPU time `pid` has used, user and system."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_measured(work_dir: Path, tmp_path: Path, path: Path, code: str, timeout: float = 30) -> tuple[Any, int]:
    """`code`'s answer from a stdio server of the tools file `path` (its log in stderr.log), and how much
    the server's peak memory grew while it ran."""
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with stdio_session(work_dir, errlog, RUNNER_TOOLS_CONFIG=str(path)) as client:
            server = server_process()
            before = peak_memory(server)
            done = await run(client, code, timeout=timeout)
            return done, peak_memory(server) - before


async def run_costing(client: Client, code: str, **arguments: Any) -> tuple[dict[str, Any], float]:
    """`run`, and the seconds of CPU the server (`server_process`) used meanwhile."""
    server = server_process()
    before = cpu_seconds(server)
    done = await run(client, code, **arguments)
    return done, cpu_seconds(server) - before
