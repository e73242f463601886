"""Several HTTP workers behind one port (RUNNER_HTTP_WORKERS above 1): one server process per core.

The supervisor binds the port and starts that many `python -m runner --transport http` workers,
which all accept on its socket, each with its own pool and zygotes. A worker that dies is started
again; five in a row that end within `QUICK_EXIT` of their start stop the whole server
(it would fail the same way forever). SIGTERM or SIGINT is passed on to every worker, which
finishes its calls in flight within RUNNER_SHUTDOWN_GRACE, and the supervisor exits once all have;
a second one is passed on too, and cuts the grace short.

Its exit status is 0 only if every worker it ever had ended well: with status 0, or killed by the very
signal the stop passed on to it (one still starting, before it could catch it, has started nothing).
Any other end, during the server's life (a worker replaced, whose replacement served on) or its stop,
makes it 1, and its last line names them: restarting a worker hides its death from an orchestrator
that would have seen a single server's, and the exit status is where it learns of it (docs/http.md).

Metrics: the workers share one PROMETHEUS_MULTIPROC_DIR, so that any worker's /metrics adds up all
of them; a worker's files are marked dead when it ends, and the directory is removed at the end.

The metrics directory and each worker's are held (`runner.execution.leftovers.HeldDirectory`): locked by
the supervisor, and by each worker through a copy of the lock's fd, for as long as any of them lives. A
supervisor killed with SIGKILL removes nothing (its workers, seeing it gone, finish their calls within
the grace and empty their own); whichever server starts next in RUNNER_WORK_DIR removes what they left
once the last of them is gone, as a single server's pool removes a dead server's. (Held by the supervisor
alone, a start during the workers' grace took their directories for a dead server's: it killed a live
worker's runs, found by a review.)
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from prometheus_client.multiprocess import mark_process_dead

from runner.config import HttpConfig
from runner.execution.leftovers import LEFTOVER_PREFIX, HeldDirectory, remove_dead
from runner.logs import get_logger, log_event
from runner.processes.trees import remove_tree
from runner.protocol.metrics import MULTIPROCESS_DIRECTORY
from runner.transports.http import reached_as, url_of

# A worker that ends within this many seconds of its start failed to start; five in a row stop the server.
QUICK_EXIT = 10.0
MAX_QUICK_EXITS = 5
# The workers that ended badly the last line names (pid and status), the last ones; all are counted.
NAMED_BAD_ENDS = 8
# Held directories in RUNNER_WORK_DIR (`{prefix}held-{random}`): the workers' metrics, and each worker's own.
METRICS_PREFIX = LEFTOVER_PREFIX + "metrics-"
WORKER_PREFIX = LEFTOVER_PREFIX + "worker-"


@dataclass
class Worker:
    """One worker process, when it started, and the work directory it was given (held by the supervisor)."""

    process: subprocess.Popen[bytes]
    started: float
    work_dir: HeldDirectory
    # The signals the supervisor passed on to it: killed by one of them, it ended as asked.
    sent: set[int] = field(default_factory=set)

    def ended_well(self, status: int) -> bool:
        """Whether its end (`status`, as `Popen.returncode` says it) is one the server meant: exit 0, or
        the stop's own signal, which kills a worker still starting before it can catch it."""
        return status == 0 or -status in self.sent


def supervise(http: HttpConfig, work_dir: str, sock: socket.socket, worker_args: list[str]) -> int:
    """Serve on `sock` with `http.workers` workers until a signal; return the exit status. Each worker,
    and the metrics they share, get a directory of their own under `work_dir` (RUNNER_WORK_DIR)."""
    logger = get_logger()
    removed, killed = remove_dead(work_dir)  # before the workers start: their pools look in their own only
    if removed:
        log_event(
            logger, logging.WARNING, "removed what a dead server left", directories=len(removed), processes=killed
        )
    metrics = HeldDirectory(METRICS_PREFIX, work_dir)
    metrics_dir = metrics.path
    env = {**os.environ, MULTIPROCESS_DIRECTORY: metrics_dir}
    workers: dict[int, Worker] = {}
    stopping: list[int] = []

    def pass_on(signum: int, *, again: bool = False) -> None:
        for worker in workers.values():
            if again or not worker.sent:
                worker.sent.add(signum)
                worker.process.send_signal(signum)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log_event(logger, logging.INFO, "signal received; stopping the workers", signal=signal.Signals(signum).name)
        stopping.append(signum)
        # Every signal, to every worker: a second one cuts a worker's grace short, as it does for one
        # server (found by a review: passed on once, the second did nothing and the grace ran out).
        pass_on(signum, again=True)

    argv = [
        *(sys.executable, "-m", "runner", "--transport", "http"),
        *("--listen-fd", str(sock.fileno()), "--supervisor-pid", str(os.getpid()), *worker_args),
    ]

    def start() -> None:
        if stopping:
            return
        # A directory of its own, removed when it ends: a worker that dies cannot clean up after itself.
        worker_dir = HeldDirectory(WORKER_PREFIX, work_dir)
        try:
            # A group of its own: a terminal's Ctrl-C reaches the supervisor only, which passes it on once.
            held = [fd for fd in (metrics.fd, worker_dir.fd) if fd >= 0]
            process = subprocess.Popen(
                [*argv, "--held-fds", ",".join(map(str, held))],
                env={**env, "RUNNER_WORK_DIR": worker_dir.path},
                pass_fds=[sock.fileno(), *held],
                stdin=subprocess.DEVNULL,
                process_group=0,
            )
        except BaseException:
            _remove_worker_directory(worker_dir)
            raise
        workers[process.pid] = Worker(process, time.monotonic(), worker_dir)
        if stopping:  # the signal came while this one was being started
            pass_on(stopping[0])

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for _ in range(http.workers):
            start()
        reached = reached_as(sock, http.allowed_hosts)
        log_event(logger, logging.INFO, "serving on HTTP", url=url_of(sock, http.path), workers=http.workers, **reached)
        return _watch(workers, stopping, start, metrics_dir, logger)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for worker in workers.values():  # only after a fault of the supervisor's own
            worker.process.kill()
            worker.process.wait()
            _remove_worker_directory(worker.work_dir)
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics.release()  # after: a released directory is a dead server's to whoever starts next


def _watch(
    workers: dict[int, Worker],
    stopping: list[int],
    start: Callable[[], None],
    metrics_dir: str,
    logger: logging.Logger,
) -> int:
    quick_exits = 0
    failed = False
    bad_ends = 0
    named: deque[str] = deque(maxlen=NAMED_BAD_ENDS)  # bounded: a server may run for months
    while workers:
        pid, status = os.wait()  # a signal's handler runs in between; the wait goes on (PEP 475)
        if pid not in workers:
            continue
        worker = workers.pop(pid)
        worker.process.returncode = code = os.waitstatus_to_exitcode(status)
        mark_process_dead(pid, metrics_dir)  # type: ignore[no-untyped-call]  # untyped in prometheus_client
        _remove_worker_directory(worker.work_dir)
        if not worker.ended_well(code):
            bad_ends += 1
            named.append(f"{pid}:{code}")
        if stopping or failed:
            if not worker.ended_well(code):
                log_event(logger, logging.ERROR, "worker ended badly while stopping", pid=pid, status=code)
            continue
        quick_exits = quick_exits + 1 if time.monotonic() - worker.started < QUICK_EXIT else 0
        log_event(logger, logging.ERROR, "worker ended; starting another", pid=pid, status=code)
        if quick_exits >= MAX_QUICK_EXITS:
            log_event(logger, logging.ERROR, "workers keep failing at start; stopping the server")
            failed = True
            for other in workers.values():
                other.sent.add(signal.SIGTERM)
                other.process.send_signal(signal.SIGTERM)
            continue
        start()
    if bad_ends:
        # Said last, where an operator looks when the exit status is not 0: which workers, how each ended.
        log_event(
            logger, logging.ERROR, "server stopped; workers had ended badly", count=bad_ends, ended=",".join(named)
        )
    return 1 if failed or bad_ends else 0


def _remove_worker_directory(work_dir: HeldDirectory) -> None:
    """A worker's RUNNER_WORK_DIR, once it has ended: first its plain runs' processes, which name its
    held directories (found by a review: a killed worker's runs lived on, nothing looking in its
    directory again), then the tree, of any depth; then its lock."""
    try:
        remove_dead(work_dir.path)
        remove_tree(work_dir.path)
    finally:
        work_dir.release()
