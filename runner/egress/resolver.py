"""The proxy's name lookups: threads of its own (`Resolver`), at most `LOOKUPS_PER_RUN` of one run's in
them at once (`RunLookups`), and at most `LEFT_PER_CALLER` of a caller's ended runs'.

Why: ``getaddrinfo`` blocks a thread until the system's resolver answers or gives up (`timeout:5
attempts:2` in resolv.conf: 20 s and more a name), and no one can take the thread back sooner. On
asyncio's default executor, the whole server's and 6 threads on 2 CPUs, 16 lookups of a name that
stalls, from one run, made another run's CONNECT wait 9.5 s instead of 4 ms (found by a review). A
lookup's place is held until its thread is done with it, not until its caller gives up: a run that
times its lookups out and asks again still has no more than its share of the threads. A run that ends
leaves its lookups in their threads; they then count against its caller until they are done, so that
a caller's short runs, one after another, cannot take the threads from everyone else (found by a
review: 16 runs within one resolver timeout held all 32).

Each lookup has a daemon thread of its own: the server's exit does not wait for a lookup that stalls
(`concurrent.futures`' threads are joined at exit, found by a review: the server outlived its end by
the resolver's timeout), and starting one (and joining it) costs some 80 us here, beside a lookup's milliseconds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ipaddress
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeAlias

import anyio

# A run's lookups in threads at once: its 16 connections resolve a name each in a few ms, two at a
# time, and a run whose names stall holds no more than this of the threads.
LOOKUPS_PER_RUN = 2
# A caller's lookups left in threads by its ended runs: past this, its runs' next lookups wait until
# one is done. A lookup left behind by a run that answered is done within milliseconds; one that stalls
# is the caller's to wait for, not the other callers'.
LEFT_PER_CALLER = LOOKUPS_PER_RUN
# The threads at once: with LOOKUPS_PER_RUN, 16 runs whose lookups all stall before another run waits
# for a thread (4 runs and 16 session calls at once by default).
LOOKUP_THREADS = 32

# Names the system knows without DNS (nsswitch's `files`), looked in before DNS is asked.
HOSTS_FILE = "/etc/hosts"

AddressInfo: TypeAlias = list[tuple[Any, ...]]
Lookup: TypeAlias = Callable[[str, int], AddressInfo]


def system_lookup(host: str, port: int, hosts_file: str = HOSTS_FILE) -> AddressInfo:
    """The system's answer for the name `host` (as `anyio.getaddrinfo` asked it), looked up at each
    call: a test may put a resolver of its own in `socket.getaddrinfo`. `/etc/hosts` first, then DNS
    with the name made absolute (found by a review: a listed `pypi.org` was looked up through
    resolv.conf's search list, under Kubernetes' ndots:5 first as `pypi.org.<namespace>.svc.cluster.local`,
    which a cluster's own service may answer), and as written (the search list: a single-label name
    of the cluster's) only where DNS says there is no such name; a name /etc/hosts knows is not asked of
    DNS at all (found by a second look: glibc's files do not know `localhost.`, and with DNS unreachable
    each such lookup waited out its timeout, 5 s)."""
    if known := _hosts_entries(host, port, hosts_file):
        return known
    try:
        return socket.getaddrinfo(host + ".", port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno != socket.EAI_NONAME:
            raise
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


def _hosts_entries(host: str, port: int, hosts_file: str) -> AddressInfo:
    """`host`'s addresses in the hosts file (as getaddrinfo gives them), or none."""
    found: AddressInfo = []
    wanted = host.lower()
    try:
        with open(hosts_file, encoding="utf-8", errors="replace") as hosts:
            for line in hosts:
                address, *names = line.partition("#")[0].split() or [""]
                if wanted not in (name.lower().rstrip(".") for name in names):
                    continue
                with contextlib.suppress(ValueError):
                    if ipaddress.ip_address(address.partition("%")[0]).version == 6:
                        found.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0)))
                    else:
                        found.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)))
    except OSError:
        return []
    return found


class Resolver:
    """The threads every run's lookups share (`lookup`, by default the system's resolver), and who holds
    them: each run its own (`RunLookups`), and each caller what its ended runs left. Counted on the
    event loop's thread alone (a lookup's thread hands its end back to the loop)."""

    def __init__(self, lookup: Lookup = system_lookup, threads: int = LOOKUP_THREADS) -> None:
        self._lookup = lookup
        self._threads = threads
        self._busy = 0  # lookups in threads
        self._left: dict[str | None, int] = {}  # by caller, its ended runs' lookups still in threads
        self._freed: anyio.Event | None = None  # set when a thread is done, for the lookups waiting

    def for_run(self, caller: str | None = None) -> RunLookups:
        """The lookups of one run of `caller`'s (a token's name; None where no transport says)."""
        return RunLookups(self, caller)

    def left_by(self, caller: str | None) -> int:
        """The lookups `caller`'s ended runs have in threads still."""
        return self._left.get(caller, 0)

    async def take(self, run: RunLookups) -> None:
        """A thread's place for one lookup of `run`'s, once its run, its caller and the threads have one."""
        while (
            run.in_threads >= LOOKUPS_PER_RUN
            or self._busy >= self._threads
            or self.left_by(run.caller) >= LEFT_PER_CALLER
        ):
            if self._freed is None:
                self._freed = anyio.Event()
            await self._freed.wait()
        run.in_threads += 1
        self._busy += 1

    def start(self, run: RunLookups, host: str, port: int) -> concurrent.futures.Future[AddressInfo]:
        """`host` looked up in a thread of its own, whose place (`take`) is given back when it is done."""
        loop = asyncio.get_running_loop()
        done: concurrent.futures.Future[AddressInfo] = concurrent.futures.Future()

        def work() -> None:
            try:
                if done.set_running_or_notify_cancel():  # else: given up before it began
                    try:
                        done.set_result(self._lookup(host, port))
                    except BaseException as exc:  # the caller's to raise, in its task
                        done.set_exception(exc)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop is gone: so is the run
                    loop.call_soon_threadsafe(self._free, run)

        try:
            threading.Thread(target=work, name="egress-lookup", daemon=True).start()
        except BaseException:
            self._free(run)
            raise
        return done

    def end(self, run: RunLookups) -> None:
        """`run` is over: what it has in threads counts against its caller until each is done."""
        if not run.ended:
            run.ended = True
            if run.in_threads:
                self._left[run.caller] = self.left_by(run.caller) + run.in_threads

    def _free(self, run: RunLookups) -> None:
        run.in_threads -= 1
        self._busy -= 1
        if run.ended:
            left = self.left_by(run.caller) - 1
            if left:
                self._left[run.caller] = left
            else:
                self._left.pop(run.caller, None)
        freed, self._freed = self._freed, None
        if freed is not None:
            freed.set()


class RunLookups:
    """One run's lookups: at most `LOOKUPS_PER_RUN` in the resolver's threads; one more waits its turn."""

    __slots__ = ("_resolver", "caller", "ended", "in_threads")

    def __init__(self, resolver: Resolver, caller: str | None) -> None:
        self._resolver = resolver
        self.caller = caller
        self.in_threads = 0
        self.ended = False

    async def lookup(self, host: str, port: int) -> AddressInfo:
        """`host`'s addresses for `port` (an OSError as the resolver raises it)."""
        await self._resolver.take(self)
        return await asyncio.wrap_future(self._resolver.start(self, host, port))

    def end(self) -> None:
        """The run is over: its lookups still in threads count against its caller until they are done."""
        self._resolver.end(self)
