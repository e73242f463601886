"""Cancels that found no request, kept for one not yet reachable (runner/transports/cancels.py)."""

from __future__ import annotations

from runner.transports.cancels import (
    EARLY_CANCEL_ID_CHARS,
    EARLY_CANCEL_SECONDS,
    EARLY_CANCELS,
    EARLY_CANCELS_PER_CALLER,
    EarlyCancels,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_kept_cancel_cancels_a_request_of_its_who_and_id_that_began_before_it_only() -> None:
    early = EarlyCancels(Clock())
    early.remember(("token:alice", 7), arrival=5)
    assert early.cancelled(("token:alice", 7), arrival=4)
    assert not early.cancelled(("token:alice", 7), arrival=6), "a request after the cancel is a new one"
    assert not early.cancelled(("token:bob", 7), arrival=4), "another caller's request"
    assert not early.cancelled(("token:alice", "7"), arrival=4), "another id"


def test_a_kept_cancel_is_forgotten_after_its_seconds() -> None:
    clock = Clock()
    early = EarlyCancels(clock)
    early.remember(("token:alice", 1), arrival=5)
    clock.now += EARLY_CANCEL_SECONDS - 0.01
    assert early.cancelled(("token:alice", 1), arrival=4)
    clock.now += 0.02
    assert not early.cancelled(("token:alice", 1), arrival=4)
    assert len(early) == 0


def test_one_caller_keeps_at_most_its_share_of_cancels_and_leaves_room_for_the_others() -> None:
    early = EarlyCancels(Clock())
    for n in range(EARLY_CANCELS_PER_CALLER * 10):
        early.remember(("token:alice", n), arrival=1_000)
    assert len(early) == EARLY_CANCELS_PER_CALLER
    early.remember(("token:bob", 1), arrival=1_000)
    assert early.cancelled(("token:bob", 1), arrival=1)


def test_all_callers_together_keep_at_most_the_bound_until_their_cancels_expire() -> None:
    clock = Clock()
    early = EarlyCancels(clock)
    for n in range(EARLY_CANCELS * 2):  # as many addresses as a loopback has
        early.remember((f"address:127.0.{n // 256}.{n % 256}", n), arrival=1_000)
    assert len(early) == EARLY_CANCELS
    clock.now += EARLY_CANCEL_SECONDS
    early.remember(("token:alice", 1), arrival=1_000)
    assert len(early) == 1
    assert early.cancelled(("token:alice", 1), arrival=1)


def test_a_cancel_of_an_id_longer_than_a_clients_is_not_kept() -> None:
    early = EarlyCancels(Clock())
    early.remember(("token:alice", "x" * (EARLY_CANCEL_ID_CHARS + 1)), arrival=1_000)
    early.remember(("token:alice", 2 ** (EARLY_CANCEL_ID_CHARS + 1)), arrival=1_000)
    assert len(early) == 0
    early.remember(("token:alice", "x" * EARLY_CANCEL_ID_CHARS), arrival=1_000)
    assert len(early) == 1
