"""The C library through ctypes, as the in-run code calls it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

PROBE = """
from runner.inrun import libc
def anon():
    for line in open('/proc/self/status'):
        if line.startswith('RssAnon:'):
            return int(line.split()[1]) // 1024
base = anon()
blobs = [bytes(1000) for _ in range(60_000)]
pinned = blobs[::100]
del blobs
freed = anon() - base
released = libc.trim_heap()
print(freed, anon() - base, released)
"""


def test_trim_heap_gives_back_the_pages_of_memory_freed_between_blocks_still_in_use() -> None:
    # In a process of its own: what the test process's heap holds is not this test's to change.
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60, cwd=REPO
    )
    freed, after, released = done.stdout.split()
    assert int(freed) >= 50, done.stdout  # free() leaves the holes between the kept blocks mapped
    assert int(after) < 15, done.stdout
    assert released == "True"
