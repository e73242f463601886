"""The server's event loop (`runner.eventloop`): it polls before it sleeps only for what tool calls
granted it, at most a spin a sleep, never past a timer that is due, and stops when preempted. Each test
watches the loop's epoll waits (their timeouts) rather than the clock; where the spin's length matters,
the module's clock is one that steps a fixed amount at each reading."""

from __future__ import annotations

import asyncio
import math
import os
import select
import selectors
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner import eventloop
from runner.eventloop import CALM, FORWARD_SPINS, MOST_SPINS, PollingLoop, RunPolling, backend_options, usable_cpus

SPIN = 0.000_150


class Steps:
    """A monotonic clock that moves `step` seconds at each reading."""

    def __init__(self, step: float) -> None:
        self.step, self.now = step, 0.0

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


class Waits:
    """The loop's epoll waits, each written down with the timeout of the selector's wait it was made in
    (the loop's own turns wait 0 too: a poll of the spin is a wait of 0 within a wait that may sleep)."""

    def __init__(self, loop: PollingLoop) -> None:
        selector = loop._polling
        self._epoll: select.epoll = selector._selector  # type: ignore[attr-defined]
        self._select = selector.select
        self._within: float | None = 0.0
        self.timeouts: list[tuple[float | None, float]] = []  # (the selector's timeout, epoll's)
        self.on_poll: Any = None  # before each of the spin's polls, called with their count so far (it included)
        selector._selector = self  # type: ignore[attr-defined]
        selector.select = self._selecting  # type: ignore[method-assign]

    def _selecting(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self._within = timeout
        try:
            return self._select(timeout)
        finally:
            self._within = 0.0

    def poll(self, timeout: float = -1, maxevents: int = -1) -> list[tuple[int, int]]:
        self.timeouts.append((self._within, timeout))
        if self.on_poll is not None and timeout == 0 and self._within != 0:
            self.on_poll(self.polls())
        return self._epoll.poll(timeout, maxevents)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._epoll, name)

    def polls(self) -> int:
        """The spin's polls: waits of 0 where the loop would have slept."""
        return sum(1 for within, timeout in self.timeouts if timeout == 0 and within != 0)

    def sleeps(self) -> list[float]:
        return [timeout for _, timeout in self.timeouts if timeout != 0]


def counted(loop: PollingLoop, path: Path, running: int, cpus: int = 2) -> None:
    """Have `loop` read `running` processes that could run on `cpus` CPUs where it reads /proc/loadavg,
    as of now (not a reading from before)."""
    path.write_text(f"0.50 0.40 0.30 {running}/345 12345\n")
    polling = loop._polling
    os.close(polling._loadavg)  # type: ignore[attr-defined]
    polling._loadavg = os.open(path, os.O_RDONLY)  # type: ignore[attr-defined]
    polling._cpus, polling._counted = cpus, -math.inf  # type: ignore[attr-defined]


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[PollingLoop]:
    """A polling loop on a host of two CPUs where only it could run (whatever this machine's load)."""
    made = PollingLoop(SPIN)
    try:
        counted(made, tmp_path / "loadavg", running=1)
        yield made
    finally:
        made.close()


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Steps:
    """The module's clock, 10 us a reading: a spin of 150 us is 15 polls."""
    clock = Steps(0.000_010)
    monkeypatch.setattr(eventloop, "time", clock)
    return clock


def sleep_in(loop: PollingLoop, seconds: float) -> Waits:
    """One sleep of `seconds` on `loop`, its waits written down (and not those before it)."""

    async def sleeping() -> None:
        await asyncio.sleep(0)  # the loop's own start-up turns are not counted
        waits.timeouts.clear()
        await asyncio.sleep(seconds)

    waits = Waits(loop)
    loop.run_until_complete(sleeping())
    return waits


def test_a_loop_granted_no_polling_sleeps_at_once(loop: PollingLoop) -> None:
    waits = sleep_in(loop, 0.02)
    assert waits.polls() == 0
    assert waits.sleeps(), "it slept"


def test_a_spin_granted_is_spent_polling_at_the_next_sleep_and_then_the_loop_sleeps_at_once(
    loop: PollingLoop, steps: Steps
) -> None:
    loop.grant(1)
    waits = sleep_in(loop, 0.02)
    assert waits.polls() == 15
    assert waits.sleeps()
    assert all(0 < timeout <= 0.02 for timeout in waits.sleeps())
    assert loop._polling.budget == pytest.approx(0, abs=1e-12)
    assert sleep_in(loop, 0.02).polls() == 0, "spent: it sleeps at once again"


def test_a_sleep_polls_for_one_spin_at_most_and_what_is_left_waits_for_the_next(
    loop: PollingLoop, steps: Steps
) -> None:
    loop.grant(3)
    assert sleep_in(loop, 0.02).polls() == 15
    assert loop._polling.budget == pytest.approx(2 * SPIN)


def test_no_more_than_four_spins_are_banked_however_many_calls_grant_them(loop: PollingLoop) -> None:
    for _ in range(10):
        loop.grant(FORWARD_SPINS)
    assert loop._polling.budget == pytest.approx(MOST_SPINS * SPIN)


def test_a_poll_that_finds_itself_preempted_stops_and_sleeps(
    loop: PollingLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Polls 100 us apart: someone else had the CPU between them, and a busy CPU has no halt to spare.
    monkeypatch.setattr(eventloop, "time", Steps(0.000_100))
    loop.grant(MOST_SPINS)
    waits = sleep_in(loop, 0.02)
    assert waits.polls() == 1
    assert waits.sleeps()


def test_a_timer_due_within_the_spin_is_not_made_late(tmp_path: Path) -> None:
    # A spin of 10 s granted: the 10 ms sleep still ends at its time, the spin cut to it.
    loop = PollingLoop(10.0)
    try:
        counted(loop, tmp_path / "loadavg", running=1)
        loop.grant(1)

        async def sleeping() -> float:
            start = loop.time()
            await asyncio.sleep(0.01)
            return loop.time() - start

        took = loop.run_until_complete(asyncio.wait_for(sleeping(), 5))
        assert took < 5
    finally:
        loop.close()


def test_an_event_that_comes_during_the_poll_is_handled_without_a_sleep(loop: PollingLoop, steps: Steps) -> None:
    ours, theirs = socket.socketpair()
    try:
        ours.setblocking(False)
        got = loop.create_future()
        loop.add_reader(ours.fileno(), lambda: got.done() or got.set_result(ours.recv(10)))
        waits = Waits(loop)
        waits.on_poll = lambda polls: polls == 3 and theirs.send(b"x")  # sent while the loop polls
        loop.grant(1)
        assert loop.run_until_complete(asyncio.wait_for(got, 5)) == b"x"
        assert waits.polls() == 3, "the poll it was sent before found it"
        assert not waits.sleeps()
    finally:
        loop.remove_reader(ours.fileno())
        ours.close()
        theirs.close()


def test_a_call_sent_downstream_grants_two_spins_and_an_answer_one_only_to_a_run_that_calls_tool_after_tool(
    loop: PollingLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    granted: list[float] = []
    monkeypatch.setattr(loop, "grant", granted.append)
    now = [100.0]
    monkeypatch.setattr(loop, "time", lambda: now[0])
    polling = RunPolling(loop)
    polling.taken()  # the run's first call
    polling.forwarding()
    polling.answered()
    assert granted == [FORWARD_SPINS], "no call came within a spin of an answer yet"
    now[0] += SPIN / 2
    polling.taken()  # its next, soon after the answer
    polling.answered()
    assert granted == [FORWARD_SPINS, 1]
    now[0] += 1.0
    polling.taken()  # a call after a second of work
    polling.answered()
    assert granted == [FORWARD_SPINS, 1]


def test_with_more_processes_that_could_run_than_cpus_the_loop_sleeps_at_once_and_looks_again_after_a_while(
    loop: PollingLoop, tmp_path: Path, steps: Steps
) -> None:
    # One of them waits for a CPU, and a poll would take one it wants (a review: with two CPU-bound
    # processes beside the server, a chain of refused calls took p90 246 us polling, 102-116 sleeping).
    counted(loop, tmp_path / "loadavg", running=3)
    loop.grant(1)
    assert sleep_in(loop, 0.02).polls() == 0
    counted(loop, tmp_path / "loadavg", running=2)  # two could run, on two CPUs: none waits
    assert sleep_in(loop, 0.02).polls() == 15


def test_after_a_poll_was_preempted_the_loop_polls_no_more_for_a_while(
    loop: PollingLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Steps(0.000_100)
    monkeypatch.setattr(eventloop, "time", clock)
    loop.grant(MOST_SPINS)
    assert sleep_in(loop, 0.02).polls() == 1
    clock.step = 0.000_010
    assert sleep_in(loop, 0.02).polls() == 0, "calm: its CPU is wanted"
    clock.now += CALM
    assert sleep_in(loop, 0.02).polls() > 0


def test_a_run_s_calls_leave_any_other_loop_as_it_is() -> None:
    other = asyncio.new_event_loop()
    try:
        polling = RunPolling(other)
        polling.taken()
        polling.forwarding()
        polling.answered()
    finally:
        other.close()


def test_a_server_with_a_spin_and_two_cpus_makes_a_polling_loop_and_otherwise_the_stock_one() -> None:
    assert backend_options(0, cpus=8) == {}
    assert backend_options(150, cpus=1) == {}, "one CPU: its poll could only hold back those it waits for"
    assert backend_options(150, cpus=1.5) == {}
    made = backend_options(150, cpus=2)["loop_factory"]()
    try:
        assert isinstance(made, PollingLoop)
        assert made.spin == pytest.approx(SPIN)
    finally:
        made.close()
    assert 0 < usable_cpus() < math.inf
