"""The HTTP transport's bearer check without a server: which refusals get a log line."""

from __future__ import annotations

from runner.transports.auth import RefusalLog


def test_refusals_are_logged_first_then_at_most_once_an_interval_counting_those_held() -> None:
    now = [100.0]
    log = RefusalLog(interval=10.0, clock=lambda: now[0])
    assert log.note() == 1, "the first refusal is logged at once"
    assert [log.note() for _ in range(5)] == [0] * 5, "a burst is held"
    now[0] += 10.0
    assert log.note() == 6, "the next line stands for the five held and itself"
    now[0] += 9.9
    assert log.note() == 0
    now[0] += 0.1
    assert log.note() == 2
