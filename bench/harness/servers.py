"""The servers under test and where they run from: ServerSpec (a variant of the real server, or the
naive baseline), Launch (interpreter, checkout, logs, and the environment each process gets), the
specs built from --server-env and --variant, the checkout's description, a commit exported for
--server-commit, and the configuration line the real server logs at start-up.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent  # bench/: this file is bench/harness/servers.py
REPO = BENCH_DIR.parent
NAIVE_SERVER = BENCH_DIR / "naive_server.py"
# What the SDK's stdio client passes down from its own environment (mcp.client.stdio); raw mode does the same.
INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")


@dataclass(frozen=True)
class ServerSpec:
    """One server under test: the real one (a variant with its env) or the naive baseline."""

    label: str
    kind: str  # "runner" | "naive"
    env: dict[str, str] = field(default_factory=dict)
    root: Path | None = None  # runner/ from another checkout than the Launch's (--variant-commit)

    def argv(self, python: str) -> list[str]:
        """The command line that starts this server."""
        if self.kind == "naive":
            return [python, str(NAIVE_SERVER)]
        return [python, "-m", "runner"]


@dataclass
class Launch:
    """Where and with what every process is started."""

    python: str
    root: Path
    logs: Path
    started: float = field(default_factory=time.time)

    def env(self, spec: ServerSpec | None, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Only the variables the SDK's stdio client would pass, the checkout on PYTHONPATH, and the spec's."""
        env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
        env.update(self.extra_env(spec, extra))
        return env

    def extra_env(self, spec: ServerSpec | None, extra: dict[str, str] | None = None) -> dict[str, str]:
        """What the harness adds on top of the inherited environment."""
        env = {"PYTHONPATH": str(spec.root if spec is not None and spec.root is not None else self.root)}
        if spec is not None and spec.kind == "runner":
            # Every variant alike: a server run from a checkout takes its .sandbox-env and .wheelhouse
            # where these are unset, and an exported commit has none, so a scenario says what it wants.
            env.update({"RUNNER_PACKAGES": "", "RUNNER_WHEELHOUSE": ""})
            env.update(extra or {})
            env.update(spec.env)  # the caller's --server-env / --variant win over scenario settings
        elif spec is not None and extra and "RUNNER_PACKAGES" in extra:
            env["RUNNER_PACKAGES"] = extra["RUNNER_PACKAGES"]  # the data scenario's environment is every server's
        return env

    def root_of(self, spec: ServerSpec) -> Path:
        """The checkout a server runs from (its cwd too: `-m runner` looks there first)."""
        return spec.root if spec.root is not None else self.root

    def log_path(self, spec: ServerSpec, scenario: str) -> Path:
        """Where a server's stderr goes."""
        safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{spec.label}-{scenario}")
        return self.logs / f"{safe}.log"


def server_config_line(log: Path) -> str:
    """The real server's own 'pool starting' log line (python, pool size, sandbox, ...), if any."""
    try:
        for line in log.read_text(errors="replace").splitlines():
            if "pool starting" in line:
                return line.split("pool starting", 1)[1].strip()
    except OSError:
        pass
    return ""


# --- the specs from the command line ---------------------------------------------------------------


def parse_env_pairs(pairs: Sequence[str], what: str) -> dict[str, str]:
    """K=V strings into a dict."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"run_bench: {what}: expected K=V, got {pair!r}")
        env[key] = value
    return env


def build_specs(args: argparse.Namespace) -> list[ServerSpec]:
    """The servers under test."""
    common = parse_env_pairs(args.server_env, "--server-env")
    specs: list[ServerSpec] = []
    for variant in args.variant or ["runner:"]:
        label, _, pairs = variant.partition(":")
        if not label or label == "naive":
            raise SystemExit(f"run_bench: --variant needs a label other than 'naive': {variant!r}")
        env = common | parse_env_pairs([p for p in pairs.split(",") if p], f"--variant {label}")
        specs.append(ServerSpec(label, "runner", env))
    if len({s.label for s in specs}) != len(specs):
        raise SystemExit("run_bench: variant labels must differ")
    for variant in getattr(args, "variant_commit", []):
        label, _, rev = variant.partition(":")
        if not label or not rev:
            raise SystemExit(f"run_bench: --variant-commit needs LABEL:REV, got {variant!r}")
        specs.append(ServerSpec(label, "runner", dict(common), export_commit(rev)))
    # Each server its own uids, unless told (a root server's runs: RUNNER_SANDBOX_UIDS): a commit from
    # before the uids' shared lock (3385199) and this one, side by side, would otherwise refuse to start.
    for number, spec in enumerate(specs):
        spec.env.setdefault("RUNNER_SANDBOX_UIDS", f"{600_000 + number * 10_000}-{609_999 + number * 10_000}")
    if not args.no_naive:
        specs.append(ServerSpec("naive", "naive"))
    return specs


# --- the checkout under test -----------------------------------------------------------------------


def git(*args: str) -> str:
    """Output of a git command in this repository; '' if it fails."""
    exe = shutil.which("git")
    if exe is None:
        return ""
    done = subprocess.run([exe, "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def describe_root(root: Path) -> str:
    """The checkout's commit, '+dirty runner/' if runner/ has local changes."""
    if root != REPO:
        marker = root / ".commit"
        return marker.read_text().strip() if marker.exists() else "not this repository"
    head = git("rev-parse", "--short", "HEAD") or "?"
    return head + ("+dirty runner/" if git("status", "--porcelain", "--", "runner") else "")


def export_commit(rev: str) -> Path:
    """`git archive REV runner` into bench/results/server-SHA/ (never under /tmp: a bwrap sandbox hides /tmp)."""
    sha = git("rev-parse", "--short", f"{rev}^{{commit}}")
    if not sha:
        raise SystemExit(f"run_bench: --server-commit: unknown revision {rev!r}")
    root = BENCH_DIR / "results" / f"server-{sha}"
    if not (root / "runner" / "__main__.py").exists():
        root.mkdir(parents=True, exist_ok=True)
        git_exe, tar_exe = shutil.which("git"), shutil.which("tar")
        if git_exe is None or tar_exe is None:
            raise SystemExit("run_bench: --server-commit needs git and tar")
        archive = subprocess.run([git_exe, "-C", str(REPO), "archive", sha, "runner"], capture_output=True, check=True)
        subprocess.run([tar_exe, "-x", "-C", str(root)], input=archive.stdout, check=True)
    (root / ".commit").write_text(f"{sha} (exported with --server-commit {rev})\n")
    return root
