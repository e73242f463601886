"""A run's work directory around a mount, in a mount namespace of its own (as root): emptying it leaves
the mount and its mode, and the scan of what a run made does not walk into it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.processes.isolation import BOOTSTRAP

EMPTY_AROUND_A_MOUNT = """
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from workdir import empty_directory
top = sys.argv[2]
os.makedirs(top + "/mounted")
os.makedirs(top + "/on/the/way/to")
os.system("mount -t tmpfs tmpfs " + top + "/mounted")
os.system("mount -t tmpfs tmpfs " + top + "/on/the/way/to")
open(top + "/mounted/kept.txt", "w").write("the sandbox's")
open(top + "/on/the/planted.txt", "w").write("a run's")
open(top + "/planted.txt", "w").write("a run's")
os.chmod(top, 0o1777)
empty_directory(top)
mode = oct(os.stat(top).st_mode & 0o7777)
print(sorted(os.listdir(top)), mode, os.listdir(top + "/mounted"), os.listdir(top + "/on/the"))
"""


def test_emptying_a_directory_leaves_a_mount_in_it_and_its_mode(tmp_path: Path) -> None:
    # The sandbox's /tmp (mode 1777) holds an interpreter installed under /tmp, bound back read-only:
    # removing it failed (EROFS) and the run refused to start.
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount in a mount namespace of its own")
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            sys.executable,
            "-I",
            "-c",
            EMPTY_AROUND_A_MOUNT,
            BOOTSTRAP,
            str(tmp_path / "top"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout.strip() == "['mounted', 'on'] 0o1777 ['kept.txt'] ['way']"


WALK_AROUND_A_MOUNT = """
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from workdir import walk
top = sys.argv[2]
os.makedirs(top + "/opt/env")
os.system("mount -t tmpfs tmpfs " + top + "/opt/env")
open(top + "/opt/env/image.png", "w").write("the sandbox's")
open(top + "/made.txt", "w").write("the run's")
info = os.stat(top)
print(sorted(path for path, _ in walk(top, (info.st_dev, info.st_ino))))
"""


def test_the_scan_of_a_runs_directory_does_not_walk_into_a_mount_in_it(tmp_path: Path) -> None:
    # A package environment (or interpreter) under /tmp is bound back into a sandboxed run's /tmp: its
    # files came back as files the run had made (the image's sample PNGs, as images).
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount in a mount namespace of its own")
    script = [sys.executable, "-I", "-c", WALK_AROUND_A_MOUNT, BOOTSTRAP, str(tmp_path / "top")]
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", *script],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout.strip() == "['made.txt']"
