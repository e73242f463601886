"""The proxy's name lookups: a run's share of the resolver's threads, held until each lookup's thread is
done with it. A resolver of the test's own stands in for the system's: names that stall until the test
lets them go, and names that answer at once."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import anyio
import pytest

from runner.egress.resolver import LOOKUPS_PER_RUN, AddressInfo, Resolver

pytestmark = pytest.mark.anyio


class Stalling:
    """A resolver whose `*.slow.test` names stall until `release`; others answer 192.0.2.1 at once."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.lock = threading.Lock()
        self.stalled = 0
        self.most = 0

    def __call__(self, host: str, port: int) -> AddressInfo:
        if not host.endswith(".slow.test"):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.1", port))]
        with self.lock:
            self.stalled += 1
            self.most = max(self.most, self.stalled)
        try:
            self.released.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        finally:
            with self.lock:
                self.stalled -= 1


@pytest.fixture
def stalling() -> Iterator[Stalling]:
    resolver = Stalling()
    yield resolver
    resolver.released.set()  # the pool's threads end with the test


async def until(probe: Callable[[], bool], seconds: float = 10) -> None:
    """Wait (at most `seconds`) until `probe()` is true."""
    with anyio.fail_after(seconds):
        while not probe():
            await anyio.sleep(0.01)


async def test_a_run_has_at_most_its_share_of_lookups_in_threads_and_another_run_is_answered_meanwhile(
    stalling: Stalling,
) -> None:
    resolver = Resolver(stalling)
    hostile, other = resolver.for_run(), resolver.for_run()
    failed: list[str] = []

    async def stall(n: int) -> None:
        try:
            await hostile.lookup(f"a{n}.slow.test", 443)
        except OSError as exc:
            failed.append(str(exc))

    async with anyio.create_task_group() as tg:
        for n in range(16):
            tg.start_soon(stall, n)
        await until(lambda: stalling.stalled == LOOKUPS_PER_RUN)
        with anyio.fail_after(10):
            [(_, _, _, _, address)] = await other.lookup("victim.test", 443)
        assert address == ("192.0.2.1", 443)
        assert stalling.stalled == LOOKUPS_PER_RUN  # the rest of the 16 wait their turn, not in threads
        stalling.released.set()
    assert len(failed) == 16  # each looked up in its turn, and each failed as the resolver said
    assert stalling.most == LOOKUPS_PER_RUN


async def test_a_lookup_given_up_keeps_its_place_until_its_thread_is_done(stalling: Stalling) -> None:
    resolver = Resolver(stalling)
    run = resolver.for_run()
    for n in range(LOOKUPS_PER_RUN):
        with anyio.move_on_after(0.1):
            await run.lookup(f"a{n}.slow.test", 443)
    await until(lambda: stalling.stalled == LOOKUPS_PER_RUN)
    # The run gave both up; their threads are still in the lookups: its next waits for one of them.
    with anyio.move_on_after(0.3) as waited:
        await run.lookup("fast.test", 443)
    assert waited.cancelled_caught
    stalling.released.set()
    await until(lambda: stalling.stalled == 0)
    with anyio.fail_after(10):
        assert await run.lookup("fast.test", 80)
