"""The server's event loop (`runner.eventloop`): it polls before it sleeps only while a tool call is held
in flight or a run was just answered, never past a timer that is due, and yields the CPU between polls.
Each test watches the loop's epoll waits (their timeouts) rather than the clock."""

from __future__ import annotations

import asyncio
import select
import selectors
import socket
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from runner import eventloop
from runner.eventloop import PollingLoop, backend_options, held, linger

SPIN = 0.000_150


class Waits:
    """The loop's epoll waits, each written down with the timeout of the selector's wait it was made in
    (the loop's own turns wait 0 too: a poll of the spin is a wait of 0 within a wait that may sleep)."""

    def __init__(self, loop: PollingLoop) -> None:
        selector = loop._polling
        self._epoll: select.epoll = selector._selector  # type: ignore[attr-defined]
        self._select = selector.select
        self._within: float | None = 0.0
        self.timeouts: list[tuple[float | None, float]] = []  # (the selector's timeout, epoll's)
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
        return self._epoll.poll(timeout, maxevents)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._epoll, name)

    def polls(self) -> int:
        """The spin's polls: waits of 0 where the loop would have slept."""
        return sum(1 for within, timeout in self.timeouts if timeout == 0 and within != 0)

    def sleeps(self) -> list[float]:
        return [timeout for _, timeout in self.timeouts if timeout != 0]


@pytest.fixture
def loop() -> Iterator[PollingLoop]:
    made = PollingLoop(SPIN)
    try:
        yield made
    finally:
        made.close()


def sleep_in(loop: PollingLoop, seconds: float) -> Waits:
    """One sleep of `seconds` on `loop`, its waits written down (and not those before it)."""

    async def sleeping() -> None:
        await asyncio.sleep(0)  # the loop's own start-up turns are not counted
        waits.timeouts.clear()
        await asyncio.sleep(seconds)

    waits = Waits(loop)
    loop.run_until_complete(sleeping())
    return waits


def test_a_loop_with_no_tool_call_in_flight_sleeps_without_polling(loop: PollingLoop) -> None:
    waits = sleep_in(loop, 0.02)
    assert waits.polls() == 0
    assert waits.sleeps(), "it slept"


def test_while_a_tool_call_is_held_each_sleep_polls_first_then_sleeps_for_what_is_left(loop: PollingLoop) -> None:
    loop.hold()
    waits = sleep_in(loop, 0.05)
    assert waits.polls() >= 1
    assert waits.sleeps()
    assert all(0 < timeout <= 0.05 for timeout in waits.sleeps())
    loop.release()
    assert sleep_in(loop, 0.02).polls() == 0, "released: it sleeps at once again"


def test_after_a_run_is_answered_the_loop_polls_for_one_spin_and_then_no_more(loop: PollingLoop) -> None:
    loop.linger()
    assert sleep_in(loop, 0.02).polls() >= 1
    assert sleep_in(loop, 0.02).polls() == 0, "the spin after the answer is long over"


def test_a_timer_due_within_the_spin_is_not_made_late() -> None:
    # A spin of 10 s while a call is held: the 10 ms sleep still ends at its time, the spin cut to it.
    loop = PollingLoop(10.0)
    try:
        loop.hold()

        async def sleeping() -> float:
            start = loop.time()
            await asyncio.sleep(0.01)
            return loop.time() - start

        took = loop.run_until_complete(asyncio.wait_for(sleeping(), 5))
        assert took < 5
    finally:
        loop.close()


def test_the_poll_yields_the_cpu_between_its_waits(loop: PollingLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    # On one CPU, a poll that did not yield held back the downstream server it waited for (1.75x a
    # direct call -> 2.02x).
    yields = []
    monkeypatch.setattr(eventloop.os, "sched_yield", lambda: yields.append(1))
    loop.hold()
    waits = sleep_in(loop, 0.02)
    assert len(yields) == waits.polls() >= 1, "one yield after each poll that found nothing"


def test_an_event_that_comes_during_the_poll_is_handled_without_a_sleep(loop: PollingLoop) -> None:
    ours, theirs = socket.socketpair()
    try:
        ours.setblocking(False)
        got = loop.create_future()
        loop.add_reader(ours.fileno(), lambda: got.done() or got.set_result(ours.recv(10)))
        loop.hold()
        theirs.send(b"x")
        waits = Waits(loop)
        assert loop.run_until_complete(asyncio.wait_for(got, 5)) == b"x"
        assert not waits.sleeps()
    finally:
        loop.remove_reader(ours.fileno())
        ours.close()
        theirs.close()


def test_held_lets_go_of_the_loop_when_its_call_is_cancelled(loop: PollingLoop) -> None:
    async def cancelled() -> None:
        with anyio.move_on_after(0.01), held(asyncio.get_running_loop()):
            assert loop._polling.holds == 1
            await anyio.sleep(10)

    loop.run_until_complete(cancelled())
    assert loop._polling.holds == 0


def test_held_and_linger_leave_any_other_loop_as_it_is() -> None:
    other = asyncio.new_event_loop()
    try:
        with held(other):
            linger(other)
    finally:
        other.close()


def test_a_server_without_a_spin_makes_the_stock_loop_and_one_with_a_spin_a_polling_one() -> None:
    assert backend_options(0) == {}
    made = backend_options(150)["loop_factory"]()
    try:
        assert isinstance(made, PollingLoop)
        assert made._polling.spin == pytest.approx(SPIN)
    finally:
        made.close()
