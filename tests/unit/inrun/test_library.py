"""The standard library a sealed process calls (`runner.inrun.library`): how a dictionary is told to hold
nothing but plain strings as keys, without running a key's code or touching each key where it can."""

from __future__ import annotations

import os
import sys

import pytest

from runner.inrun import library


class Other(str):
    __slots__ = ()


class Loud(type):
    """A key's type whose hash and equality are the state's: neither may run."""

    def __hash__(cls) -> int:
        raise AssertionError("the key type's __hash__ ran")

    def __eq__(cls, other: object) -> bool:
        raise AssertionError("the key type's __eq__ ran")


class LoudKey(str, metaclass=Loud):
    __slots__ = ()


SIZES = library._plain_sizes()


def test_this_interpreter_lets_a_plain_dictionary_be_told_by_its_size() -> None:
    # CPython 3.11's layout: were it not found, every key would be looked at (slower, as safe).
    assert SIZES
    assert library._plain({f"name{n}": n for n in range(3000)}, SIZES)


@pytest.mark.parametrize("count", [0, 1, 5, 6, 10, 11, 21, 22, 100, 1000, 5000])
def test_a_dictionary_of_plain_strings_is_plain_and_one_with_any_other_key_is_not(count: int) -> None:
    plain = {f"name{n}": n for n in range(count)}
    assert library._plain(plain, SIZES)
    for odd in (Other("planted"), 1, LoudKey("planted"), (1, 2)):
        planted: dict[object, int] = dict(plain)
        planted[odd] = 0
        assert not library._plain(planted, SIZES), odd


def test_a_key_taken_out_again_leaves_the_dictionary_plain_once_looked_at() -> None:
    planted: dict[object, int] = {f"name{n}": n for n in range(50)}
    planted[Other("planted")] = 0
    del planted[Other("planted")]
    assert library._plain(planted, SIZES)  # its size says it held one: each key is looked at


def test_the_dictionaries_a_sealed_process_calls_are_plain_as_loaded() -> None:
    assert library._plain(vars(os), SIZES)
    assert library._plain(vars(sys), SIZES)
    assert library._plain(sys.modules, SIZES)
