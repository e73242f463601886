"""`npm ci` once per lock: the Node packages the client and conformance tests run, each directory with its
package-lock.json and a stamp of the lock it was last installed from."""

from __future__ import annotations

import fcntl
import hashlib
import re
import subprocess
from pathlib import Path

import pytest

STAMP = ".installed-lock.sha256"  # in node_modules/
# npm's codes for a registry it cannot reach.
UNREACHABLE = re.compile(
    r"\b(ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|ERR_SOCKET_TIMEOUT)\b"
    r"|network request to \S+ failed"
)


def npm_ci_once(npm: str, directory: Path, timeout: float, *, skip_if_unreachable: bool) -> None:
    """`npm ci` in `directory` unless its node_modules was installed from the current package-lock.json.

    A failure fails the test, but for a registry out of reach where `skip_if_unreachable` says so. Another
    pytest session on this checkout waits (npm ci starts by removing node_modules): an advisory lock on the
    lock file, which no one writes.
    """
    lock = directory / "package-lock.json"
    stamp = directory / "node_modules" / STAMP
    name = directory.relative_to(directory.parent.parent)
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    with open(lock, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == digest:
            return
        try:
            install = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=directory,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"npm ci in {name} took more than {timeout:g} s", pytrace=False)
        output = f"{install.stdout[-3000:]}\n{install.stderr[-3000:]}"
        unreachable = UNREACHABLE.search(output)
        if install.returncode != 0 and unreachable and skip_if_unreachable:
            pytest.skip(f"npm ci in {name} cannot reach the npm registry ({unreachable[0]}):\n{output[-1500:]}")
        if install.returncode != 0:
            pytest.fail(f"npm ci in {name} failed with exit status {install.returncode}:\n{output}", pytrace=False)
        stamp.write_text(digest)
