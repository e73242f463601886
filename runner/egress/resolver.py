"""The proxy's name lookups: threads of its own (`Resolver`), and at most `LOOKUPS_PER_RUN` of one run's
in them at once (`RunLookups`).

Why: ``getaddrinfo`` blocks a thread until the system's resolver answers or gives up (`timeout:5
attempts:2` in resolv.conf: 20 s and more a name), and no one can take the thread back sooner. On
asyncio's default executor, the whole server's and 6 threads on 2 CPUs, 16 lookups of a name that
stalls, from one run, made another run's CONNECT wait 9.5 s instead of 4 ms (found by a review). A
lookup's place is held until its thread is done with it, not until its caller gives up: a run that
times its lookups out and asks again still has no more than its share of the threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
from collections.abc import Callable
from typing import Any, TypeAlias

import anyio

# A run's lookups in its threads at once: its 16 connections resolve a name each in a few ms, two at a
# time, and a run whose names stall holds no more than this of the pool.
LOOKUPS_PER_RUN = 2
# The pool's threads: with LOOKUPS_PER_RUN, 16 runs whose lookups all stall before another run waits
# for a thread (4 runs and 16 session calls at once by default). A thread is started only when a
# lookup finds none idle, and an idle one costs its stack.
LOOKUP_THREADS = 32

AddressInfo: TypeAlias = list[tuple[Any, ...]]
Lookup: TypeAlias = Callable[[str, int], AddressInfo]


def system_lookup(host: str, port: int) -> AddressInfo:
    """The system's resolver (as `anyio.getaddrinfo` asked it), looked up at each call: a test may put
    a resolver of its own in `socket.getaddrinfo`."""
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


class Resolver:
    """The threads every run's lookups share (`lookup`, by default the system's resolver)."""

    def __init__(self, lookup: Lookup = system_lookup, threads: int = LOOKUP_THREADS) -> None:
        self._lookup = lookup
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="egress-lookup")

    def for_run(self) -> RunLookups:
        return RunLookups(self)

    def submit(self, host: str, port: int) -> concurrent.futures.Future[AddressInfo]:
        return self._pool.submit(self._lookup, host, port)


class RunLookups:
    """One run's lookups: at most `LOOKUPS_PER_RUN` in the resolver's threads; one more waits its turn."""

    def __init__(self, resolver: Resolver) -> None:
        self._resolver = resolver
        self._places = anyio.Semaphore(LOOKUPS_PER_RUN)

    async def lookup(self, host: str, port: int) -> AddressInfo:
        """`host`'s addresses for `port` (an OSError as the resolver raises it)."""
        await self._places.acquire()
        try:
            done = self._resolver.submit(host, port)
        except BaseException:
            self._places.release()
            raise
        loop = asyncio.get_running_loop()

        def free(_: concurrent.futures.Future[AddressInfo]) -> None:
            # In the lookup's thread once it returns (or at once, a lookup cancelled before it began).
            with contextlib.suppress(RuntimeError):  # the loop is gone: so is the run
                loop.call_soon_threadsafe(self._places.release)

        done.add_done_callback(free)
        return await asyncio.wrap_future(done)
