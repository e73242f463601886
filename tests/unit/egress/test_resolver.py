"""The proxy's name lookups: a run's share of the resolver's threads, held until each lookup's thread is
done with it, and what an ended run left in them counted against its caller. A resolver of the test's
own stands in for the system's: names that stall until the test lets them go, and names that answer at
once."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from runner.egress.resolver import (
    LEFT_PER_CALLER,
    LOOKUP_THREADS,
    LOOKUPS_PER_RUN,
    AddressInfo,
    Resolver,
    system_lookup,
)

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


async def short_runs_that_stall(resolver: Resolver, caller: str, runs: int) -> None:
    """`runs` runs of `caller`'s, one after another, each asking for LOOKUPS_PER_RUN names that stall
    and ending (its lookups given up) once every one of them is in a thread or waiting for one."""
    for n in range(runs):
        run = resolver.for_run(caller)
        async with anyio.create_task_group() as tg:
            for m in range(LOOKUPS_PER_RUN):
                tg.start_soon(run.lookup, f"r{n}-{m}.slow.test", 443)
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
        run.end()


async def test_short_runs_whose_lookups_stall_leave_the_threads_to_the_other_callers(stalling: Stalling) -> None:
    # Found by a review: an ended run's stalled lookups held their threads until the resolver gave up,
    # so 16 short runs, one after another, held all 32 and every other run's lookups waited.
    resolver = Resolver(stalling)
    await short_runs_that_stall(resolver, "hostile", LOOKUP_THREADS // LOOKUPS_PER_RUN)
    assert stalling.stalled == LEFT_PER_CALLER  # the first run's; the next ones' waited theirs and ended
    assert resolver.left_by("hostile") == LEFT_PER_CALLER
    with anyio.fail_after(10):
        [(_, _, _, _, address)] = await resolver.for_run("other").lookup("victim.test", 443)
    assert address == ("192.0.2.1", 443)


async def test_a_callers_run_waits_for_what_its_ended_runs_left_stalled_and_goes_on_once_it_is_done(
    stalling: Stalling,
) -> None:
    resolver = Resolver(stalling)
    await short_runs_that_stall(resolver, "hostile", 1)
    following = resolver.for_run("hostile")
    with anyio.move_on_after(0.3) as waited:
        await following.lookup("fast.test", 443)
    assert waited.cancelled_caught
    stalling.released.set()
    await until(lambda: resolver.left_by("hostile") == 0)
    with anyio.fail_after(10):
        assert await following.lookup("fast.test", 443)


def test_a_name_is_looked_up_in_the_hosts_file_then_as_absolute_and_as_written_only_where_there_is_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Found by a review: a listed name was looked up through resolv.conf's search list (Kubernetes'
    # ndots:5: `pypi.org.<namespace>.svc.cluster.local` first). By a second look: /etc/hosts names were
    # asked of DNS first (glibc's files know no `localhost.`), 5 s each where DNS was unreachable.
    asked: list[str] = []
    known = {"pypi.org.": "203.0.113.80", "svc": "10.0.0.9"}

    def getaddrinfo(host: str, port: int, *args: object, **kwargs: object) -> AddressInfo:
        asked.append(host)
        if host == "stalls.":
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if host not in known:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (known[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    hosts = tmp_path / "hosts"
    hosts.write_text("# comment\n10.0.0.5 db.internal DB  # the database\nfd00::5 db.internal\n")
    assert [info[4] for info in system_lookup("db.internal", 5432, str(hosts))] == [
        ("10.0.0.5", 5432),
        ("fd00::5", 5432, 0, 0),
    ]
    assert system_lookup("db", 5432, str(hosts))[0][4] == ("10.0.0.5", 5432)
    assert system_lookup("pypi.org", 443, str(hosts))[0][4] == ("203.0.113.80", 443)
    assert system_lookup("svc", 80, str(hosts))[0][4] == ("10.0.0.9", 80)  # the search list: no such name
    with pytest.raises(socket.gaierror):
        system_lookup("stalls", 80, str(hosts))  # not asked again as written: it may exist
    assert asked == ["pypi.org.", "svc.", "svc", "stalls."]
