"""Make a stand-in for the image's base, python:3.11-slim-bookworm, where no image registry is reachable.

    python scripts/standin_base.py [--engine podman] [--image localhost/python-runner-base:bookworm] [--force]

Debian bookworm made with debootstrap (minbase, with Debian's python3 3.11, venv and the CA
certificates), the interpreter linked where the official image has it (/usr/local/bin/python3.11),
then imported into the engine with the official image's PATH and LANG. Does nothing if the engine has
the image already (--force: make it again). About 90 s and 230 MB. How it differs from the official
image: docs/docker.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MIRROR = "http://deb.debian.org/debian"
PACKAGES = "python3,python3-venv,ca-certificates,netbase,tzdata"


def exists(engine: str, image: str) -> bool:
    # `image inspect`, not podman's `image exists`: Docker has no such command.
    inspected = subprocess.run(
        [engine, "image", "inspect", image], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return inspected.returncode == 0


def build(engine: str, image: str, mirror: str) -> None:
    # Not under /tmp: a run's sandbox hides /tmp, and tests here may clean it.
    with tempfile.TemporaryDirectory(prefix="standin-base-", dir="/var/tmp") as scratch:
        root = Path(scratch) / "root"
        debootstrap, tar_command = shutil.which("debootstrap"), shutil.which("tar")
        if debootstrap is None or tar_command is None:
            raise SystemExit("needs debootstrap and tar")
        subprocess.run(
            [debootstrap, "--variant=minbase", f"--include={PACKAGES}", "bookworm", str(root), mirror],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for name in ("python3.11", "python3", "python"):
            link = root / "usr/local/bin" / name
            link.unlink(missing_ok=True)
            link.symlink_to("/usr/bin/python3.11")
        (root / "etc/resolv.conf").write_text("")  # the host's resolver is no business of the image's
        shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
        (root / "var/lib/apt/lists/partial").mkdir(parents=True)
        tar = subprocess.Popen([tar_command, "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            [
                engine,
                "import",
                "--change",
                "ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--change",
                "ENV LANG=C.UTF-8",
                "-",
                image,
            ],
            stdin=tar.stdout,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0:
            raise SystemExit(f"tar of {root} failed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", default="podman")
    parser.add_argument("--image", default="localhost/python-runner-base:bookworm")
    parser.add_argument("--mirror", default=os.environ.get("DEBIAN_MIRROR", MIRROR))
    parser.add_argument("--force", action="store_true", help="make it even if the engine has it")
    args = parser.parse_args(argv)
    if exists(args.engine, args.image) and not args.force:
        sys.stdout.write(f"{args.image}: already there\n")
        return 0
    if shutil.which("debootstrap") is None:
        raise SystemExit("debootstrap is not installed (make container-engine installs it as root)")
    sys.stdout.write(f"{args.image}: making it with debootstrap (about 90 s)\n")
    build(args.engine, args.image, args.mirror)
    return 0


if __name__ == "__main__":
    sys.exit(main())
