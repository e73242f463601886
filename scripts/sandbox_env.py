"""The package environment runs import from (RUNNER_PACKAGES): built from requirements-sandbox.lock,
and checked against it.

    python scripts/sandbox_env.py build ENV [--lock requirements-sandbox.lock]
    python scripts/sandbox_env.py check ENV [--lock requirements-sandbox.lock]

ENV gets ``site-packages/`` (every locked wheel, hash-checked, nothing else: no pip, no setuptools,
nothing of the server's), ``requirements.lock`` (the lock it was made from) and ``mplconfig/``
(matplotlib's font cache, built once here so that no run builds it). Build with the interpreter runs
use: wheels are made for one Python version.
`build` makes the new environment next to the old one and swaps them, so a failed build leaves the
old one whole. `check` exits 1, naming each difference, when the environment is not what the lock
says.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import lockfiles  # scripts/ is on sys.path: this file is run as a script

locks = lockfiles.load()
normalized = locks.normalized


def locked(lock: Path) -> dict[str, str]:
    """name -> version for every pinned line of a pip-compile lock."""
    return {name: pin.version for name, pin in locks.parse_lock(lock.read_text()).items()}


def installed(site: Path) -> dict[str, str]:
    """name -> version for every distribution installed in `site`."""
    return {normalized(d.metadata["Name"]): d.version for d in metadata.distributions(path=[str(site)])}


def differences(want: dict[str, str], have: dict[str, str]) -> list[str]:
    """What `have` lacks, has in another version, or has besides `want`; empty when they agree."""
    found = []
    for name in sorted(want.keys() | have.keys()):
        if name not in have:
            found.append(f"{name}=={want[name]} is locked but not installed")
        elif name not in want:
            found.append(f"{name}=={have[name]} is installed but not locked")
        elif want[name] != have[name]:
            found.append(f"{name} is locked at {want[name]} but {have[name]} is installed")
    return found


def check(env: Path, lock: Path) -> int:
    site = env / "site-packages"
    if not site.is_dir():
        sys.stderr.write(f"{env}: no site-packages; build it with `make sandbox-env`\n")
        return 1
    problems = differences(locked(lock), installed(site))
    for problem in problems:
        sys.stderr.write(f"{env}: {problem} ({lock}); rebuild with `make sandbox-env`\n")
    return 1 if problems else 0


def build(env: Path, lock: Path) -> int:
    new = env.with_name(env.name + ".new")
    shutil.rmtree(new, ignore_errors=True)
    site = new / "site-packages"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    pip += ["--require-hashes", "--only-binary=:all:", "--no-deps", "--target", str(site), "-r", str(lock)]
    subprocess.run(pip, check=True)
    # The lock goes with the environment: the server reads from it which distributions were asked for
    # (numpy, not cycler), to say what runs may import.
    shutil.copyfile(lock, new / "requirements.lock")
    # The font cache made once (pip made the bytecode): runs see both read-only.
    mplconfig = new / "mplconfig"
    mplconfig.mkdir()
    warm = f"import sys; sys.path.append({str(site)!r}); import matplotlib.pyplot"
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MPLCONFIGDIR": str(mplconfig), "MPLBACKEND": "Agg"}
    if (site / "matplotlib").is_dir():
        subprocess.run([sys.executable, "-I", "-S", "-c", warm], check=True, env=environment)
    if check(new, lock):
        return 1
    old = env.with_name(env.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if env.exists():
        env.rename(old)
    new.rename(env)
    shutil.rmtree(old, ignore_errors=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["build", "check"])
    parser.add_argument("env", type=Path)
    default_lock = Path(__file__).resolve().parent.parent / "requirements-sandbox.lock"
    parser.add_argument("--lock", type=Path, default=default_lock)
    args = parser.parse_args()
    return (build if args.action == "build" else check)(args.env.resolve(), args.lock)


if __name__ == "__main__":
    sys.exit(main())
