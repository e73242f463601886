"""The optional OS-level layer: every run inside its own bubblewrap sandbox.

Each run gets new PID, mount, IPC, UTS and (unless turned off) network namespaces, a read-only view
of the file system, and a private size-limited tmpfs as its working directory. In a PID namespace
a daemonized grandchild dies with the run, `kill(-1)` reaches nothing outside, and the server is not
even visible. Chosen once at start-up: `auto` probes bubblewrap and falls back to plain rlimits
(inside Docker's default seccomp profile the probe fails) and says why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Literal

from runner.config import MIB, Config
from runner.errors import ConfigError
from runner.processes.bootstrap import __file__ as _bootstrap_file

WORKDIR = "/tmp"
# /run is replaced by an empty tmpfs (host sockets stay out of reach) that carries the bootstrap, so
# runs work wherever the server's files are, even under /tmp, which the sandbox hides.
BOOTSTRAP_INSIDE = "/run/runner/bootstrap.py"
HIDDEN = (WORKDIR, "/run")
PROBE_TIMEOUT = 10.0
BOOTSTRAP = os.path.realpath(_bootstrap_file)
# bwrap reports a command killed by signal N as exit status 128 + N.
SIGNAL_EXIT_BASE = 128


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How runs are wrapped: `wrapper` is the argv that goes before the interpreter's (empty: none)."""

    kind: Literal["none", "bwrap"]
    reason: str
    wrapper: tuple[str, ...] = ()

    @property
    def bootstrap(self) -> str:
        """Where the run interpreter finds the bootstrap."""
        return BOOTSTRAP_INSIDE if self.wrapper else BOOTSTRAP

    @property
    def enabled(self) -> bool:
        """Whether runs get their own namespaces."""
        return bool(self.wrapper)


def bwrap_argv(bwrap: str, config: Config) -> tuple[str, ...]:
    """The bubblewrap command line up to and including `--` (bwrap adds PWD=/tmp to the environment)."""
    network = ("--unshare-net",) if config.sandbox_network == "isolated" else ()
    # An interpreter installed under a hidden directory must stay visible.
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(config.python)))
    keep = ("--ro-bind", prefix, prefix) if any(_within(prefix, hidden) for hidden in HIDDEN) else ()
    return (
        bwrap,
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        *network,
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        # --dev's /dev/shm would be a tmpfs of half the host's memory, outside every limit of the run.
        "--size",
        str(config.sandbox_tmp_mb * MIB),
        "--tmpfs",
        "/dev/shm",
        "--proc",
        "/proc",
        "--size",
        str(config.sandbox_tmp_mb * MIB),
        "--tmpfs",
        WORKDIR,
        "--tmpfs",
        "/run",
        "--ro-bind",
        BOOTSTRAP,
        BOOTSTRAP_INSIDE,
        *keep,
        "--chdir",
        WORKDIR,
        "--",
    )


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def choose_sandbox(config: Config) -> Sandbox:
    """Decide once how runs are wrapped; an explicit `bwrap` that cannot work stops the server."""
    if config.sandbox == "none":
        return Sandbox("none", "RUNNER_SANDBOX=none")
    if config.spawn_mode == "fork-server":
        if config.sandbox == "bwrap":
            raise ConfigError(
                "RUNNER_SPAWN_MODE",
                "fork-server cannot be combined with RUNNER_SANDBOX=bwrap (a sandbox per run needs its own "
                "interpreter); use posix-spawn or auto",
            )
        return Sandbox("none", "RUNNER_SPAWN_MODE=fork-server: runs fork from one zygote, not one sandbox each")
    bwrap = shutil.which("bwrap")
    problem = "bubblewrap (bwrap) is not installed" if bwrap is None else _probe(bwrap_argv(bwrap, config), config)
    if bwrap is not None and problem is None:
        return Sandbox("bwrap", f"bubblewrap at {bwrap} works", bwrap_argv(bwrap, config))
    if config.sandbox == "bwrap":
        raise ConfigError("RUNNER_SANDBOX", f"bwrap was asked for but cannot be used: {problem}")
    return Sandbox("none", f"RUNNER_SANDBOX=auto fell back to rlimits only: {problem}")


def _probe(wrapper: tuple[str, ...], config: Config) -> str | None:
    """Run `pass` in the sandbox exactly as runs will be; None if it worked, else why not."""
    try:
        done = subprocess.run(
            [*wrapper, config.python, "-I", "-S", "-c", "pass"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"probe failed: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        return f"probe exited with status {done.returncode}: {said[-1] if said else 'no message'}"
    return None


def exit_code_of_sandboxed(code: int) -> int:
    """Map bwrap's exit status back to Python's convention (negative signal number)."""
    if SIGNAL_EXIT_BASE < code <= SIGNAL_EXIT_BASE + 64:
        return -(code - SIGNAL_EXIT_BASE)
    return code
