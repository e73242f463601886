"""The supply of ready interpreters: the warm pools kept full in the background, one interpreter
taken per run, and which pool a call's code goes to.

Every plan has the lean supply; where runs are forked and RUNNER_PRELOAD names modules, a second
one comes from the zygote that preloaded them (`Supplies`). Each supply keeps its own interpreters
ready (`InterpreterSupply`), and the pool sees them as one. An interpreter is ready once its
bootstrap has applied the limits and said so on stdout; only then may it get code. Each one is used
once, and ended by `teardown.end_interpreter` wherever it comes from.

Which zygote a call goes to is pure, over the code's text (`wants_preloaded`): a call whose code
imports a preloaded module, or anything outside the standard library (a package of RUNNER_PACKAGES,
which most likely builds on numpy), goes to the preloading zygote, where those are already loaded;
every other call keeps the lean one, so that a trivial call never pays for forking a process of a
hundred megabytes. A scan of import statements, not a parse: the code is not compiled in the server,
and a miss costs time, never correctness (a lean run imports what it needs itself, under the same
limits).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections import deque
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import anyio
import anyio.abc

from runner.config import Config, PoolConfig
from runner.errors import SpawnError
from runner.execution.teardown import end_interpreter
from runner.inrun.wire import parse_ready
from runner.logs import log_event
from runner.processes.child import STARTUP_TIMEOUT, Child
from runner.processes.isolation import IsolationPlan
from runner.processes.limits import Limits
from runner.processes.source import InterpreterSource, opened_sources

REFILL_DELAY = 0.01

# `import a.b as c, d` and `from a.b import c` at any indentation; __import__("a") and
# importlib.import_module("a.b"). A pattern, not `ast`: measured on a 53-line data script, 25 us against
# ast.parse's 1.5 ms (61x; 33x on `print(1)`), CPU every call would pay; what it misses (an import the
# pattern cannot see) goes by name in `packages`, and routing to the lean zygote only costs an import.
_STATEMENT = re.compile(r"^[ \t]*(?:import[ \t]+([^#\n;]+)|from[ \t]+([\w.]+)[ \t]+import\b)", re.MULTILINE)
_CALL = re.compile(r"""(?:__import__|import_module)\(\s*['"]([\w.]+)['"]""")
# What a run imports that no package environment holds: the standard library, and `mcp_tools` (code
# mode's module, which the server sends): code that imports only these is better off in the lean zygote.
_STDLIB = frozenset(sys.stdlib_module_names) | {"__future__", "mcp_tools"}


def imported_packages(code: str) -> frozenset[str]:
    """The top-level names of every module the code imports by a statement or a literal call: scanned
    once per call (`Pool`), for the route and the packages alike."""
    found: set[str] = set()
    for plain, origin in _STATEMENT.findall(code):
        if origin:
            found.add(origin.split(".")[0])
        for clause in plain.split(","):
            name = clause.strip().split(" ")[0].strip("()\\")
            if name:
                found.add(name.split(".")[0])
    found.update(name.split(".")[0] for name in _CALL.findall(code))
    found.discard("")  # a relative import's "." part
    return frozenset(found)


def wants_preloaded(imports: Iterable[str], preloaded: Iterable[str]) -> bool:
    """Whether code that imports `imports` (top-level names) is better run by the zygote that preloaded
    `preloaded` (module names)."""
    tops = {name.split(".")[0] for name in preloaded}
    if not tops:
        return False
    return any(name in tops or name not in _STDLIB for name in imports)


class InterpreterSupply:
    """Hands out ready interpreters from `source`, keeping `config.pool_size` of them waiting."""

    def __init__(
        self,
        config: PoolConfig,
        limits: Limits,
        source: InterpreterSource,
        logger: logging.Logger,
        *,
        egress: bool = False,
    ) -> None:
        self._config = config
        self._egress = egress  # each interpreter hands over its egress proxy's listener (`Child.receive_listener`)
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

    def mark_anchor(self, child: Child) -> None:
        """`child`, taken, is a session's anchor from now on (`InterpreterSource.mark_anchor`)."""
        self._source.mark_anchor(child)

    async def oom_told(self, child: Child) -> None:
        """`InterpreterSource.oom_told`."""
        await self._source.oom_told(child)

    async def destroy(self, child: Child) -> None:
        """End `child` (`end_interpreter`) and forget it; safe to call more than once."""
        await end_interpreter(child, self._log)
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
        child.said_ready(refused)
        if self._egress:
            try:
                child.receive_listener()
            except OSError as exc:
                with anyio.CancelScope(shield=True):
                    await self.destroy(child)
                raise SpawnError(f"interpreter {self._config.python}: {exc}") from exc
        if child.sandbox_init_pid:
            # Before any code: the sandbox's init is within the run's reach, so within its limits too.
            try:
                self._limits.impose_on(child.sandbox_init_pid)
            except OSError as exc:
                with anyio.CancelScope(shield=True):
                    await self.destroy(child)
                raise SpawnError(f"cannot hold the sandbox's init to the run's limits: {exc}") from exc
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


class Supplies:
    """The lean supply, and the preloading one if the plan has it; `for_code` picks one per call."""

    def __init__(
        self,
        supplies: list[tuple[InterpreterSupply, InterpreterSource]],
        preload: tuple[str, ...],
        logger: logging.Logger,
    ) -> None:
        self._supplies = supplies  # lean first
        self._preload = preload
        self._log = logger

    @classmethod
    @asynccontextmanager
    async def opened(
        cls, config: Config, plan: IsolationPlan, base_dir: str, limits: Limits, logger: logging.Logger
    ) -> AsyncIterator[Supplies]:
        """The plan's sources opened (a zygote each, where runs are forked); on exit they are gone, and
        every interpreter of theirs before them: one a refill made after the pool's own shutdown
        (`Pool.open`) must not outlive its source's cgroup parent."""
        async with opened_sources(config, plan, base_dir, limits, logger) as sources:
            supplies = cls(
                [
                    (InterpreterSupply(config.pool, limits, source, logger, egress=bool(plan.egress_port)), source)
                    for source in sources
                ],
                plan.preload,
                logger,
            )
            try:
                yield supplies
            finally:
                with anyio.CancelScope(shield=True):
                    await supplies.shutdown()

    @property
    def all(self) -> list[InterpreterSupply]:
        """Every supply, lean first."""
        return [supply for supply, _ in self._supplies]

    @property
    def routes(self) -> bool:
        """Whether a call's imports choose its supply (there is a preloading one besides the lean)."""
        return len(self._supplies) > 1

    def for_imports(self, imports: frozenset[str]) -> InterpreterSupply:
        """The preloading supply for code that imports what it preloaded (or any package), else the lean one."""
        if self.routes and wants_preloaded(imports, self._preload):
            return self._supplies[1][0]
        return self._supplies[0][0]

    def known_pids(self) -> set[int]:
        """Every supply's interpreters and zygotes (`InterpreterSupply.known_pids`)."""
        return set().union(*(supply.known_pids() for supply in self.all))

    @property
    def ready(self) -> int:
        """Interpreters started ahead, in all supplies."""
        return sum(supply.ready for supply in self.all)

    @property
    def in_use(self) -> int:
        """Runs in progress, in all supplies."""
        return sum(supply.in_use for supply in self.all)

    @property
    def restarts(self) -> int:
        """Zygotes started again, in all sources."""
        return sum(source.restarts for _, source in self._supplies)

    def start_refilling(self, tg: anyio.abc.TaskGroup) -> None:
        """Keep every supply's interpreters ready, in the background."""
        for supply in self.all:
            tg.start_soon(supply.refill_forever)

    async def destroy(self, child: Child) -> None:
        """End `child` and forget it, in whichever supply it came from."""
        for supply in self.all:
            if supply.holds(child):
                await supply.destroy(child)
                return
        await end_interpreter(child, self._log)  # forgotten already: ended before, this is a no-op

    async def unresponsive(self, child: Child) -> None:
        """`child` did not end after SIGKILL: its source deals with it."""
        for supply, source in self._supplies:
            if supply.holds(child):
                await source.unresponsive(child)
                return
        await self._supplies[0][1].unresponsive(child)

    async def shutdown(self) -> None:
        """Every supply's interpreters gone (`InterpreterSupply.shutdown`)."""
        for supply in self.all:
            await supply.shutdown()
