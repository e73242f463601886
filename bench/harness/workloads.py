"""What the benchmark runs and how much of it: the code snippets of each scenario with the output
they must produce, the concurrency levels and the server settings of the call scenarios, the
scenario sizes (QUICK for --quick, FULL otherwise), and the targets of issue 5 the report checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CALL_TIMEOUT = 30.0  # the tool's own `timeout` argument, the same for every server
TRIVIAL_CODE = "print(1)"
CPU_N = 3_000_000  # ~0.2 s of CPU on the machine this was written on
CPU_CODE = f"print(sum(i * i for i in range({CPU_N})))"
CPU_EXPECTED = str(sum(i * i for i in range(CPU_N)))
FLOOD_TOTAL = 1 << 30
FLOOD_RECORD = 4096  # = PIPE_BUF: each os.write of a record is atomic and complete on a blocking pipe
# Every 4 KiB record starts with "\n@<CLOCK_MONOTONIC ns> <bytes written before it>@": the output
# itself says when each part of it was written, on the clock the server's durations use too.


def flood_code(total: int) -> str:
    """A run that writes `total` bytes to stdout in time-stamped 4 KiB records."""
    return f"""\
import os, time
pad = b"x" * {FLOOD_RECORD}
now = time.monotonic_ns
n = 0
while n < {total}:
    head = b"\\n@%d %d@" % (now(), n)
    n += os.write(1, head + pad[: {FLOOD_RECORD} - len(head)])
"""


FLOOD_CODE = flood_code(FLOOD_TOTAL)
FLOOD_MARK = re.compile(r"@(\d{6,}) (\d+)@")
CONCURRENCY_LEVELS = (1, 4, 8, 16)
# Paced calls: each this long after the previous answer, as an LLM client's come (seconds apart, in
# fact). What a call leaves to do after its answer (the pool's refill, the run's teardown) is done by
# then, so the call has the machine to itself; back-to-back calls share it with that work.
PACE = 0.02
THROUGHPUT_ENV = {"RUNNER_MAX_CONCURRENT": "8"}
BARE_IMPORT = "bare import mcp.server.lowlevel"
BARE_IMPORT_EXIT = "bare import mcp.server.lowlevel, to process exit"
BARE_IMPORT_CODE = "import mcp.server.lowlevel, sys; sys.stdout.write('imported\\n'); sys.stdout.flush()"


TARGETS = {
    "trivial_vs_ping": "trivial call p50 <= 2x the ping round trip",
    "trivial_vs_naive": "trivial call p50 >= 10x faster than the naive baseline",
    "throughput_c8": "throughput at concurrency 8 >= 5x the naive baseline",
    "flood_rss": "server RSS growth during a 1 GiB flood <= 10 MiB",
    "flood_kill": "run killed within 100 ms of crossing the output budget",
    "startup": "start-up to initialize response <= 1.15x bare `import mcp.server.lowlevel`",
    "namespaced_vs_plain": "namespaced fork server: trivial call p50 <= 1.3x the plain fork server's",
    "namespaced_throughput": "namespaced fork server: throughput at concurrency 8 >= 3x the naive baseline",
}


@dataclass(frozen=True)
class Params:
    """How much of each scenario to run."""

    warmup: int
    trivial_calls: int
    batch: int
    cpu_calls: int
    throughput_calls: int
    throughput_rounds: int
    flood_reps: int
    startup_reps: int
    memory_reps: int
    naive_flood_mib: int
    paced_calls: int = 30
    modes: tuple[str, ...] = ("raw", "client")


QUICK = Params(
    warmup=8,
    trivial_calls=60,
    batch=10,
    cpu_calls=4,
    throughput_calls=48,
    throughput_rounds=2,
    flood_reps=1,
    startup_reps=3,
    memory_reps=1,
    naive_flood_mib=128,
)
FULL = Params(
    warmup=20,
    trivial_calls=300,
    batch=20,
    cpu_calls=16,
    throughput_calls=192,
    throughput_rounds=4,
    flood_reps=3,
    startup_reps=10,
    memory_reps=2,
    naive_flood_mib=1024,
    paced_calls=150,
)
