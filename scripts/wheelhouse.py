"""The vetted wheelhouse (issue 27): the wheels of requirements-wheelhouse.lock that the package
environment (requirements-sandbox.lock) does not already have, downloaded once and checked against
their hashes.

    python scripts/wheelhouse.py download DIR [--lock requirements-wheelhouse.lock] [--base requirements-sandbox.lock]
    python scripts/wheelhouse.py check DIR [--lock ...] [--base ...]

The wheelhouse lock is compiled against the package environment's lock (`-c requirements-sandbox.lock`
in requirements-wheelhouse.in), so what both pin, they pin alike; `download` and `check` refuse a lock
that disagrees. Wheels only (`--only-binary=:all:`: no package's own build ever runs), one per
distribution, for the interpreter running this script (run it with the one runs use). `download` fills
a new directory next to DIR and swaps it in once it checks, so a failed download leaves the old one
whole; it says how large the wheelhouse is and how long it took. The lock is copied in beside the
wheels (`requirements.lock`): the server reads what it offers from there (RUNNER_WHEELHOUSE). `check`
exits 1, naming each difference, when DIR is not exactly the lock's wheels with the lock's hashes and
that lock.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lockfiles  # scripts/ is on sys.path: this file is run as a script

locks = lockfiles.load()
normalized = locks.normalized
# The lock the wheels were downloaded by, kept with them: the server reads it (RUNNER_WHEELHOUSE).
LOCK_NAME = "requirements.lock"


def pins(lock: Path) -> dict[str, Any]:
    """Every pinned distribution of a pip-compile lock, with its hashes (`locks.Pin`s)."""
    found: dict[str, Any] = locks.parse_lock(lock.read_text())
    return found


def requirement(pin: Any) -> str:
    """A pin as a line of a requirements file pip checks the hashes of."""
    return f"{pin.name}=={pin.version} " + " ".join(f"--hash=sha256:{h}" for h in sorted(pin.hashes)) + "\n"


def extras(lock: Path, base: Path) -> tuple[dict[str, Any], list[str]]:
    """What the wheelhouse holds: the lock's distributions the base lock does not pin; and where the
    two locks pin one distribution differently (they must not)."""
    wanted, already = pins(lock), pins(base)
    clashes = [
        f"{name} is {pin.version} in {lock.name} but {already[name].version} in {base.name}"
        for name, pin in sorted(wanted.items())
        if name in already and already[name].version != pin.version
    ]
    return {name: pin for name, pin in wanted.items() if name not in already}, clashes


def wheel_name(path: Path) -> tuple[str, str]:
    """(normalized name, version) from a wheel's file name (PEP 427)."""
    parts = path.name[: -len(".whl")].split("-")
    return normalized(parts[0]), parts[1]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def problems(directory: Path, wanted: dict[str, Any]) -> list[str]:
    """How `directory` differs from exactly one hash-checked wheel of each of `wanted`."""
    if not directory.is_dir():
        return [f"{directory} does not exist"]
    found: list[str] = []
    seen: dict[str, Path] = {}
    for path in sorted(directory.iterdir()):
        if (path.name.startswith(".") or path.name == LOCK_NAME) and path.is_file():
            continue  # the download's own note (.manifest) and the lock it kept
        if path.suffix != ".whl" or not path.is_file():
            found.append(f"{path.name} is not a wheel")
            continue
        name, version = wheel_name(path)
        pin = wanted.get(name)
        if pin is None:
            found.append(f"{path.name} is not in the lock")
        elif name in seen:
            found.append(f"{path.name} and {seen[name].name} are both {name}")
        elif version != pin.version:
            found.append(f"{path.name} is {version}; the lock pins {name}=={pin.version}")
        elif sha256(path) not in pin.hashes:
            found.append(f"{path.name} does not have any of the lock's hashes for {name}=={pin.version}")
        seen.setdefault(name, path)
    found += [
        f"{name}=={pin.version} is locked but has no wheel" for name, pin in sorted(wanted.items()) if name not in seen
    ]
    return found


def check(directory: Path, lock: Path, base: Path) -> int:
    wanted, clashes = extras(lock, base)
    issues = clashes + problems(directory, wanted)
    kept = directory / LOCK_NAME
    if directory.is_dir() and (not kept.is_file() or kept.read_bytes() != lock.read_bytes()):
        issues.append(f"{LOCK_NAME} is not {lock}, which the server would then not read")
    for issue in issues:
        sys.stderr.write(f"{directory}: {issue}; download it again with `make wheelhouse`\n")
    return 1 if issues else 0


def download(directory: Path, lock: Path, base: Path) -> int:
    wanted, clashes = extras(lock, base)
    if clashes:
        for clash in clashes:
            sys.stderr.write(f"{lock}: {clash}; compile it with `make lock`\n")
        return 1
    new = directory.with_name(directory.name + ".new")
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    started = time.monotonic()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="wheelhouse-") as requirements:
        requirements.write("".join(requirement(pin) for pin in wanted.values()))
        requirements.flush()
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
        pip += ["--require-hashes", "--only-binary=:all:", "--no-deps", "--dest", str(new), "-r", requirements.name]
        subprocess.run(pip, check=True)
    seconds = time.monotonic() - started
    issues = problems(new, wanted)
    if issues:
        for issue in issues:
            sys.stderr.write(f"{new}: {issue}\n")
        return 1
    size = sum(path.stat().st_size for path in new.iterdir())
    note = f"{len(wanted)} wheels, {size / 2**20:.1f} MiB, downloaded in {seconds:.1f} s\n"
    shutil.copyfile(lock, new / LOCK_NAME)
    (new / ".manifest").write_text(note)
    old = directory.with_name(directory.name + ".old")
    if directory.exists():
        directory.rename(old)
    new.rename(directory)
    shutil.rmtree(old, ignore_errors=True)
    sys.stdout.write(f"{directory}: {note}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("download", "check"))
    parser.add_argument("directory", type=Path)
    parser.add_argument("--lock", type=Path, default=Path("requirements-wheelhouse.lock"))
    parser.add_argument("--base", type=Path, default=Path("requirements-sandbox.lock"))
    args = parser.parse_args()
    act = download if args.command == "download" else check
    return act(args.directory, args.lock, args.base)


if __name__ == "__main__":
    sys.exit(main())
