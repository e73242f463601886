"""The naive baseline of issue 5: what users pick today, kept small and honest.

A high-level MCP framework server (the SDK's `MCPServer`, formerly FastMCP) with one tool,
`run_python(code, timeout)`, that starts a fresh interpreter per call with `subprocess.run` and a
`preexec_fn` applying the same rlimits as the real server's (CPU, AS, NPROC, FSIZE, CORE, computed by
`runner.processes.limits` from the same RUNNER_* variables and defaults), and returns stdout (and stderr if
any). No pool, no output cap, no process-group kill: one `subprocess.run` per call. The framework
runs a sync tool in a worker thread, so calls do overlap.

Run from the repository root: ``.venv/bin/python bench/naive_server.py`` (stdio).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile

from mcp.server.mcpserver import MCPServer

try:  # the checkout on PYTHONPATH (the harness sets it), else the one this file is in
    from runner.config import Config
    from runner.config.disk import open_environment
    from runner.processes.isolation import IsolationPlan
    from runner.processes.limits import count_tasks_of_uid, limits_for
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from runner.config import Config
    from runner.config.disk import open_environment
    from runner.processes.isolation import IsolationPlan
    from runner.processes.limits import count_tasks_of_uid, limits_for

CONFIG = open_environment(Config.from_env())
# Plain spawned interpreters of the server's own uid, no helper next to them.
BASELINE_PLAN = IsolationPlan("none-posix-spawn", "the naive baseline", cgroup_reason="the naive baseline")
LIMITS = limits_for(CONFIG.limits, CONFIG.pool, count_tasks_of_uid(), BASELINE_PLAN)
# With RUNNER_PACKAGES (the data scenario): each fresh interpreter imports from the same package
# environment as the real server's runs, told the same things (one BLAS thread, no display, the
# prebuilt font cache), with room for what numpy, pandas and pyplot map (~230 MB) on top of the limit.
PACKAGE_ENV = {
    "PYTHONPATH": CONFIG.packages_site,
    "MPLCONFIGDIR": os.path.join(CONFIG.packages, "mplconfig"),
    "MPLBACKEND": "Agg",
    "OPENBLAS_NUM_THREADS": "1",
}
ADDRESS_SPACE = LIMITS.address_space_bytes + (512 << 20 if CONFIG.packages_site else 0)

mcp = MCPServer("naive-python-runner", log_level="WARNING")


def _apply_limits() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (LIMITS.cpu_seconds, LIMITS.cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_NPROC, (LIMITS.nproc, LIMITS.nproc))
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMITS.file_size_bytes, LIMITS.file_size_bytes))


@mcp.tool()
def run_python(code: str, timeout: float = CONFIG.default_timeout) -> str:
    """Run Python code in a fresh interpreter and return its output."""
    with tempfile.TemporaryDirectory(prefix="naive-run-") as workdir:
        try:
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir}
            done = subprocess.run(
                # -I ignores PYTHONPATH: with packages, -E -s -S keep the rest of what -I does.
                [
                    CONFIG.python,
                    "-E",
                    "-s",
                    "-S",
                    "-c",
                    f"import sys; sys.path.append({CONFIG.packages_site!r})\n{code}",
                ]
                if CONFIG.packages_site
                else [CONFIG.python, "-I", "-S", "-c", code],
                cwd=workdir,
                env=env | PACKAGE_ENV if CONFIG.packages_site else env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=min(timeout, CONFIG.max_timeout),
                preexec_fn=_apply_limits,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout or b""
            return out.decode(errors="replace") + f"\n[timed out after {timeout}s]"
    text = done.stdout.decode(errors="replace")
    if done.stderr:
        text += "\n[stderr]\n" + done.stderr.decode(errors="replace")
    if done.returncode:
        text += f"\n[exit code {done.returncode}]"
    return text


if __name__ == "__main__":
    mcp.run("stdio")
