"""The sessions' memory as the pool measures it for /metrics: in a worker thread, one measurement at a
time, at most once per interval, whatever number of scrapes asks for it."""

from __future__ import annotations

import threading

import anyio
import pytest

from runner.execution.pool import SessionMemory

pytestmark = pytest.mark.anyio


class Measurements:
    """A stand-in for `tree_pss_bytes`: each pid's bytes, and the thread of every call; held at
    `gate` until the test opens it."""

    def __init__(self, sizes: dict[int, int]) -> None:
        self.sizes = sizes
        self.threads: list[int] = []
        self.started = threading.Event()
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, pid: int) -> int:
        self.threads.append(threading.get_ident())
        self.started.set()
        assert self.gate.wait(30), "the test never let the measurement end"
        return self.sizes[pid]


async def test_many_scrapes_at_once_start_one_measurement_in_a_worker_thread_and_all_get_its_figure() -> None:
    measure = Measurements({10: 3 * 2**20, 20: 2**20})
    measure.gate.clear()
    memory = SessionMemory(lambda: (10, 20), measure)
    got: list[int] = []

    async def scrape() -> None:
        got.append(await memory.refresh())

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(scrape)
        # The measurement is held in its thread: the event loop still runs this test meanwhile.
        assert await anyio.to_thread.run_sync(measure.started.wait, 30)
        assert got == []
        measure.gate.set()
    assert got == [4 * 2**20] * 8
    assert len(measure.threads) == 2, "one measurement, one read per session"
    assert threading.get_ident() not in measure.threads, "never read on the event loop's thread"


async def test_the_figure_is_kept_for_the_interval_and_measured_again_after_it() -> None:
    measure = Measurements({10: 2**20})
    kept = SessionMemory(lambda: (10,), measure, interval=3600)
    assert await kept.refresh() == 2**20
    measure.sizes[10] = 5 * 2**20
    assert [await kept.refresh() for _ in range(5)] == [2**20] * 5
    assert len(measure.threads) == 1
    every_time = SessionMemory(lambda: (10,), measure, interval=0)
    assert [await every_time.refresh() for _ in range(2)] == [5 * 2**20] * 2
    assert len(measure.threads) == 3


async def test_no_open_session_reads_nothing_and_is_zero_and_the_first_one_is_measured_at_once() -> None:
    measure = Measurements({10: 2**20})
    pids: tuple[int, ...] = (10,)
    memory = SessionMemory(lambda: pids, measure, interval=3600)
    assert await memory.refresh() == 2**20
    pids = ()
    assert (await memory.refresh(), memory.bytes) == (0, 0), "a session gone is not counted for the interval"
    assert len(measure.threads) == 1
    pids = (10,)
    assert await memory.refresh() == 2**20, "within the interval, yet measured: nothing was"
    assert len(measure.threads) == 2
