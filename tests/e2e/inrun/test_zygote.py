"""The zygote's own steps, in an interpreter of their own: a fork request that fails leaves nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runner.processes.isolation import BOOTSTRAP

FORK_FAILS = """
import os, resource, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import zygote
base = sys.argv[2]
before = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
# Room for three more fds: the directory and one pipe get made, the second pipe fails (EMFILE).
resource.setrlimit(resource.RLIMIT_NOFILE, (max(before) + 4, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
runs = {}
reply, fds = zygote._fork_run(base, [10, 1 << 28, 64, 1 << 20], runs)
after = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
print(reply.decode(), fds, runs, os.listdir(base), before == after, sep="|")
"""


def test_a_fork_request_that_fails_answers_an_error_and_leaves_nothing(tmp_path: Path) -> None:
    done = subprocess.run(  # the limit must not touch the test process
        [sys.executable, "-I", "-c", FORK_FAILS, BOOTSTRAP, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    reply, fds, runs, listing, same_fds = done.stdout.strip().split("|")
    assert reply.startswith("E [Errno 24] Too many open files")
    assert (fds, runs, listing, same_fds) == ("[]", "{}", "[]", "True")
