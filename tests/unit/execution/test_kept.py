"""The kept-output store and its spools, on a real directory, without runs."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from runner.config import Config
from runner.execution.kept import MIN_CHARGE, SPOOL_MEMORY, OutputStore, Spool
from runner.outcome import KeptOutput

MIB = 1024 * 1024


def store_in(tmp_path: Path, **limits: int) -> OutputStore:
    config = dataclasses.replace(Config.from_env({}), work_dir=str(tmp_path), **limits)
    return OutputStore.made(config.kept, config.pool.work_dir)


def spool_of(store: OutputStore, data: bytes, chunk: int = 4096) -> Spool:
    spool = store.spool()
    for start in range(0, len(data), chunk):
        spool.feed(data[start : start + chunk])
    return spool


def read(store: OutputStore, kept: KeptOutput, caller: str | None) -> bytes | None:
    opened = store.open(kept.uri, caller)
    if opened is None:
        return None
    _, fd = opened
    with os.fdopen(fd, "rb") as kept_file:
        return kept_file.read()


def test_a_stream_is_kept_byte_for_byte_whether_it_stayed_in_memory_or_went_to_a_file(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    small, large = b"tiny\n" * 10, os.urandom(3 * SPOOL_MEMORY + 17)
    kept_small = store.keep_stream("alice", "stdout", spool_of(store, small))
    kept_large = store.keep_stream("alice", "stderr", spool_of(store, large))
    assert kept_small is not None
    assert kept_large is not None
    assert (read(store, kept_small, "alice"), read(store, kept_large, "alice")) == (small, large)
    assert (kept_small.complete, kept_large.size, kept_large.stream) == (True, len(large), "stderr")
    assert kept_small.uri.startswith("runner://output/")
    assert kept_small.uri.endswith("/stdout")


def test_what_goes_past_the_per_call_cap_is_counted_not_kept(tmp_path: Path) -> None:
    store = store_in(tmp_path, max_kept_output_bytes=MIB)
    data = b"x" * (MIB + 5000)
    kept = store.keep_stream(None, "stdout", spool_of(store, data, chunk=7000))
    assert kept is not None
    assert (kept.size, kept.total, kept.complete) == (MIB, len(data), False)
    assert read(store, kept, None) == data[:MIB]


def test_another_caller_an_unknown_uri_and_an_expired_one_are_all_not_found(tmp_path: Path) -> None:
    store = store_in(tmp_path, kept_output_seconds=60)
    kept = store.keep_stream("alice", "stdout", spool_of(store, b"secret"), now=100.0)
    assert kept is not None
    assert store.open(kept.uri, "bob", now=101.0) is None
    assert store.open(kept.uri + "x", "alice", now=101.0) is None
    assert store.listed("bob", now=101.0) == []
    assert store.listed("alice", now=101.0) == [kept]
    assert store.open(kept.uri, "alice", now=160.0) is None, "expired"
    assert os.listdir(store.directory) == [], "its file went with it"


def test_the_oldest_of_a_caller_goes_first_when_a_new_one_would_not_fit_its_budget(tmp_path: Path) -> None:
    store = store_in(tmp_path, max_kept_caller_bytes=3 * MIB, max_kept_total_bytes=5 * MIB)
    one_mib = b"y" * MIB
    first, second, third = (store.keep_stream("alice", "stdout", spool_of(store, one_mib * 2)) for _ in range(3))
    other = store.keep_stream("bob", "stdout", spool_of(store, one_mib))
    assert first is not None
    assert second is not None
    assert third is not None
    assert other is not None
    assert store.listed("alice") == [third], "each 2 MiB: only the newest fits alice's 3 MiB"
    # Over the total (5 MiB): alice 2 + bob 1 + carol's new 3 evicts the oldest of anyone's, alice's.
    newest = store.keep_stream("carol", "stderr", spool_of(store, one_mib * 3))
    assert newest is not None
    assert (store.listed("alice"), store.listed("bob"), store.listed("carol")) == ([], [other], [newest])


def test_a_spool_not_kept_leaves_no_file_and_a_closed_store_no_directory(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    spool = spool_of(store, os.urandom(4 * SPOOL_MEMORY))
    spool.discard()
    assert os.listdir(store.directory) == []
    assert store.keep_stream(None, "stdout", spool_of(store, b"z" * 100)) is not None
    store.close()
    assert list(tmp_path.iterdir()) == []


def test_a_tiny_entry_counts_64_kib_so_that_a_flood_of_one_byte_files_holds_few_entries(tmp_path: Path) -> None:
    """Found by a review: budgets of bytes alone let a caller hold any number of 1-byte links."""
    store = store_in(tmp_path, max_kept_caller_bytes=4 * MIN_CHARGE, max_kept_total_bytes=6 * MIN_CHARGE)
    alices = [store.keep_file("alice", f"f{n}.txt", b"x", "text/plain", "over the budget") for n in range(10)]
    assert all(kept is not None for kept in alices)
    assert [k.stream for k in store.listed("alice")] == ["f6.txt", "f7.txt", "f8.txt", "f9.txt"]
    bobs = [store.keep_file("bob", f"g{n}.txt", b"y", "text/plain", "over the budget") for n in range(3)]
    assert all(kept is not None for kept in bobs)
    # Six entries in all: Bob's third makes the oldest of everyone's (Alice's f6) go.
    assert [k.stream for k in store.listed("alice")] == ["f7.txt", "f8.txt", "f9.txt"]
    assert len(os.listdir(store.directory)) == 6


def test_a_file_is_kept_as_it_is_with_its_type_and_why_under_a_uri_that_quotes_its_whole_name(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    data = bytes(range(256)) * 10
    kept = store.keep_file(None, "../sub/x y.bin", data, "application/octet-stream", "over the budget for files")
    assert kept is not None
    assert kept.is_file
    assert (kept.stream, kept.size, kept.mime_type, kept.reason) == (
        "../sub/x y.bin",
        len(data),
        "application/octet-stream",
        "over the budget for files",
    )
    assert kept.uri.endswith("/..%2Fsub%2Fx%20y.bin")
    assert read(store, kept, None) == data
    assert store.keep_file(None, "big", bytes(17 * MIB), "application/octet-stream", "over") is None  # per call


def test_an_entry_whose_file_cannot_be_unlinked_expires_all_the_same(tmp_path: Path) -> None:
    # Found by a review: the sweep that expires entries (now a task of the pool's) let any OSError but
    # "not found" out of the unlink, ending the pool (a directory made read-only, a file system so).
    store = store_in(tmp_path, kept_output_seconds=60)
    kept = store.keep_stream("alice", "stdout", spool_of(store, b"x" * (SPOOL_MEMORY + 1)), now=100.0)
    assert kept is not None
    [name] = os.listdir(store.directory)
    os.unlink(os.path.join(store.directory, name))
    os.mkdir(os.path.join(store.directory, name))  # unlink meets EISDIR, whoever the server runs as
    store.expire(200.0)
    assert store.listed("alice", now=200.0) == []
    assert store.open(kept.uri, "alice", now=200.0) is None
