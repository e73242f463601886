"""The token buckets (`runner.rates`) for what a downstream or a run's egress sends, on a clock the test gives."""

from __future__ import annotations

from runner.rates import Pace


def test_a_stream_is_read_at_its_rate_after_its_burst_and_waits_what_it_owes() -> None:
    rate = Pace(burst=100, per_second=10, now=0.0)
    assert rate.spend(100, now=0.0) == 0.0
    assert rate.spend(20, now=0.0) == 2.0  # 20 bytes owed at 10 a second
    assert rate.spend(0, now=2.0) == 0.0
    assert rate.spend(0, now=20.0) == 0.0  # back to its burst, never past it
    assert rate.spend(110, now=20.0) == 1.0


def test_a_pace_counts_what_it_took_and_how_many_reads_it_held_back() -> None:
    rate = Pace(burst=100, per_second=10, now=0.0)
    rate.spend(60, now=0.0)
    rate.spend(60, now=0.0)  # 20 owed: held
    rate.spend(5, now=10.0)
    assert (rate.taken, rate.held) == (125, 1)
