"""The supply of ready interpreters: a warm pool kept full in the background, one taken per run, and
every interpreter's end (kill, reap, close, delete) wherever it comes from.

An interpreter is ready once its bootstrap has applied the limits and said so on stdout; only then
may it get code. Each one is used once.
"""

from __future__ import annotations

import logging
import os
from collections import deque

import anyio

from runner.config import Config
from runner.errors import SpawnError
from runner.inrun.wire import parse_ready
from runner.logs import log_event
from runner.processes.child import REAP_TIMEOUT, STARTUP_TIMEOUT, Child
from runner.processes.limits import Limits
from runner.processes.source import InterpreterSource
from runner.processes.spawn import remove_tree

REFILL_DELAY = 0.01


class InterpreterSupply:
    """Hands out ready interpreters from `source`, keeping `config.pool_size` of them waiting."""

    def __init__(self, config: Config, limits: Limits, source: InterpreterSource, logger: logging.Logger) -> None:
        self._config = config
        self._limits = limits
        self._source = source
        self._log = logger
        self._ready: deque[Child] = deque()
        self._in_use: set[Child] = set()
        self._alive: set[Child] = set()  # every interpreter started and not yet destroyed
        self._wanted = anyio.Event()
        self._refused_reported: set[str] = set()

    @property
    def ready(self) -> int:
        """Interpreters started ahead, waiting for code."""
        return len(self._ready)

    @property
    def in_use(self) -> int:
        """Interpreters handed out and not yet destroyed: runs in progress."""
        return len(self._in_use)

    def holds(self, child: Child) -> bool:
        """Whether `child` came from this supply and is not destroyed yet."""
        return child in self._alive

    def known_pids(self) -> set[int]:
        """The server's children that are interpreters of ours or the source's own (not strays)."""
        pids = {child.pid for child in self._alive if child.server_is_parent and not child.reaped}
        if self._source.helper_pid is not None:
            pids.add(self._source.helper_pid)
        return pids

    async def take(self) -> Child:
        """A ready interpreter: a pooled one if there is one still alive, else a new one."""
        while self._ready:
            child = self._ready.popleft()
            self._wanted.set()
            if child.still_running():
                self._in_use.add(child)
                return child
            with anyio.CancelScope(shield=True):
                await self.destroy(child)  # it is no longer in the pool: nobody else would
        child = await self._start_ready()
        self._in_use.add(child)
        return child

    def release(self, child: Child) -> None:
        """What can go at once of a run that told its own end, before it is reaped: its pipes and its
        directory, if it left that empty (`destroy` does the rest, and deletes what is in it)."""
        child.close_streams()
        if child.workdir is not None:
            try:
                os.rmdir(child.workdir)
                child.workdir = None
            except OSError:
                pass

    async def destroy(self, child: Child) -> None:
        """Kill, reap, close and delete; safe to call more than once."""
        if not child.reaped:
            child.kill_group()
            with anyio.move_on_after(REAP_TIMEOUT):
                await child.wait_exit()
            if child.still_running():
                log_event(self._log, logging.ERROR, "process did not die after SIGKILL", pid=child.pid)
            else:
                child.reap()
        child.close_all()
        if child.workdir is not None:
            try:
                os.rmdir(child.workdir)  # most runs leave their directory empty: no thread needed
            except OSError:
                await anyio.to_thread.run_sync(remove_tree, child.workdir)
        if child.reaped or not child.server_is_parent:
            # One that did not die stays known: it is ours, not a stray, whatever the sweep sees.
            self._alive.discard(child)
        if child in self._in_use:
            self._in_use.discard(child)
            self._wanted.set()

    async def refill_forever(self) -> None:
        """Keep `pool_size` interpreters ready; back off while they cannot be started."""
        failures = 0
        while True:
            while len(self._ready) < self._config.pool_size:
                try:
                    child = await self._start_ready()
                except SpawnError as exc:
                    failures += 1
                    log_event(self._log, logging.ERROR, "pool refill failed", error=str(exc), failures=failures)
                    await anyio.sleep(min(30.0, 0.1 * 2**failures))
                    continue
                failures = 0
                self._ready.append(child)
            self._wanted = anyio.Event()
            await self._wanted.wait()
            if self._source.forks_delay_runs and self._ready and self._in_use:
                # Wait for a run to end, but not past REFILL_DELAY (a long run must not leave the
                # pool short for a burst).
                self._wanted = anyio.Event()
                with anyio.move_on_after(REFILL_DELAY):
                    await self._wanted.wait()

    async def shutdown(self) -> None:
        """Kill every interpreter in use (their runs reap them) and destroy every pooled one."""
        for child in self._in_use:
            child.kill_group()  # their own runs reap them; this makes sure they die now
        while self._ready:
            await self.destroy(self._ready.popleft())

    async def _start_ready(self) -> Child:
        """Start an interpreter and wait until its bootstrap has applied the limits."""
        child = await self._source.start()
        self._alive.add(child)
        try:
            with anyio.fail_after(STARTUP_TIMEOUT):
                line = await _read_line(child.stdout)
            refused = parse_ready(line)
            if refused is None:
                raise SpawnError(f"interpreter {self._config.python} did not start: {_pending(child.stderr)!r}")
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self.destroy(child)
            if isinstance(exc, TimeoutError):
                raise SpawnError(f"interpreter {self._config.python} not ready after {STARTUP_TIMEOUT:g}s") from exc
            raise
        child.find_interpreter()
        if child.sandbox_init_pid:
            # Before any code: the sandbox's init is within the run's reach, so within its limits too.
            try:
                self._limits.impose_on(child.sandbox_init_pid)
            except OSError as exc:
                with anyio.CancelScope(shield=True):
                    await self.destroy(child)
                raise SpawnError(f"cannot hold the sandbox's init to the run's limits: {exc}") from exc
        child.refused_limits = refused
        for name in set(child.refused_limits) - self._refused_reported:
            self._refused_reported.add(name)
            log_event(self._log, logging.WARNING, "limit not enforced on this platform", limit=name)
        return child


async def _read_line(fd: int) -> bytes:
    """Read the interpreter's ready line: up to and including the first newline.

    Nothing can follow it before the code is sent, and the bootstrap writes it with one write()
    of less than PIPE_BUF bytes, so it arrives whole: one read, not one per byte. A longer line
    (not ours) is read to its newline all the same, and nothing after the newline is kept.
    """
    line = bytearray()
    while b"\n" not in line:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            continue
        if not chunk:
            return bytes(line)
        line += chunk
    return bytes(line.partition(b"\n")[0]) + b"\n"


def _pending(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""
