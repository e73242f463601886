"""Which host uids a root server's runs are lent: blocks of RUNNER_SANDBOX_UIDS, one per pool."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from runner.config import Config
from runner.errors import Unavailable
from runner.processes import identity
from runner.processes.identity import RunUids, UidLender, claimed_uids
from runner.processes.isolation import IsolationPlan

LENDING = IsolationPlan("namespaces", "a root server's", uid_per_run=True)


@pytest.fixture
def lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The lock's directory, not made yet (the first pool makes it), and where older servers' locks are."""
    monkeypatch.setattr(identity, "LOCK_DIR", str(tmp_path / "locks"))
    (tmp_path / "old").mkdir()
    monkeypatch.setattr(identity, "OLD_LOCK_DIR", str(tmp_path / "old"))
    return tmp_path / "locks"


def test_a_pool_of_the_default_configuration_needs_a_block_of_28_uids() -> None:
    # 2 x (RUNNER_POOL_SIZE 2 + RUNNER_MAX_CONCURRENT 4) + RUNNER_MAX_SESSIONS 16, for its one zygote;
    # twice that with a preloading one (bubblewrap has none).
    assert Config().uids_per_pool == 28
    assert Config(preload=("numpy",)).uids_per_pool == 56
    assert Config(preload=("numpy",), sandbox="bwrap").uids_per_pool == 28


def test_two_pools_open_at_once_hold_different_blocks_and_a_closed_pool_s_block_is_free_again(lock_dir: Path) -> None:
    config = Config(sandbox_uids="70000-70047", max_sessions=0)
    with claimed_uids(config, LENDING) as first, claimed_uids(config, LENDING) as second:
        assert (str(first), str(second)) == ("70000-70011", "70012-70023")
        assert [path.name for path in lock_dir.iterdir()] == ["uids.lock"]
        assert lock_dir.stat().st_mode & 0o777 == 0o700
    with claimed_uids(config, LENDING) as again:
        assert str(again) == "70000-70011"


def test_pools_of_different_block_sizes_never_lend_the_same_uid(lock_dir: Path) -> None:
    # Found by a first hour: a lock file per block, at multiples of each pool's own size, let a pool of
    # 2 uids a block take 60002-60003 beside one that held 60000-60055; both lent 60002.
    large = Config(sandbox_uids="70000-70099", max_sessions=0)  # 12 uids a block
    small = Config(sandbox_uids="70000-70099", max_sessions=0, pool_size=0, max_concurrent=1)  # 2
    with (
        claimed_uids(small, LENDING) as one,
        claimed_uids(large, LENDING) as two,
        claimed_uids(small, LENDING) as three,
    ):
        blocks = [block for block in (one, two, three) if block is not None]
        assert [str(block) for block in blocks] == ["70000-70001", "70002-70013", "70014-70015"]
    lent = [uid for block in blocks for uid in block.uids()]
    assert len(lent) == len(set(lent)) == 16


def test_a_lock_directory_others_may_write_or_a_lock_that_is_a_symlink_stops_the_pool_in_one_line(
    lock_dir: Path, tmp_path: Path
) -> None:
    # Found by a review: the lock was in /run/lock, which every user may write; a symlink planted there
    # ended the start in a traceback.
    lock_dir.mkdir(mode=0o700)
    (lock_dir / "uids.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(Unavailable, match=r"cannot open .*uids\.lock"), claimed_uids(Config(), LENDING):
        pass
    (lock_dir / "uids.lock").unlink()
    lock_dir.chmod(0o777)
    with pytest.raises(Unavailable, match="is not this server's user's alone"), claimed_uids(Config(), LENDING):
        pass


def test_a_server_of_before_this_lock_holding_a_block_in_the_range_stops_the_pool(lock_dir: Path) -> None:
    # Found by a review: an older server (a lock file per block) and this one lent the same uids.
    old = lock_dir.parent / "old" / ".python-runner-uids-70000.lock"
    old.touch()
    config = Config(sandbox_uids="70000-70047", max_sessions=0)
    with claimed_uids(config, LENDING) as block:  # a stale file (nobody holds it) is let be
        assert str(block) == "70000-70011"
    fd = os.open(old, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with (
            pytest.raises(Unavailable, match="an older python-runner-mcp lends uids from 70000"),
            claimed_uids(config, LENDING),
        ):
            pass
        with claimed_uids(Config(sandbox_uids="60000-60047", max_sessions=0), LENDING) as below:
            assert str(below) == "60000-60011", "a range that ends before its block starts is apart from it"
    finally:
        os.close(fd)


def test_a_range_whose_every_block_is_held_stops_the_pool_naming_the_variable(lock_dir: Path) -> None:
    config = Config(sandbox_uids="70000-70020", max_sessions=0)
    with (
        claimed_uids(config, LENDING),
        pytest.raises(Unavailable, match="RUNNER_SANDBOX_UIDS: every block of 12"),
        claimed_uids(config, LENDING),
    ):
        pass


def test_runs_that_keep_the_server_s_uid_claim_no_block(lock_dir: Path) -> None:
    with claimed_uids(Config(), IsolationPlan("namespaces", "a non-root server's")) as block:
        assert block is None
    assert not lock_dir.exists()


def test_a_pool_s_uids_are_held_against_another_process_until_it_closes(lock_dir: Path) -> None:
    config = Config(sandbox_uids="70000-70023", max_sessions=0)
    with claimed_uids(config, LENDING):
        child = os.fork()
        if child == 0:  # another server: the first block is held, the second is its
            try:
                with claimed_uids(config, LENDING) as block:
                    os._exit(0 if str(block) == "70012-70023" else 1)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def test_a_block_is_split_evenly_between_the_zygotes_that_lend_it() -> None:
    lean, preloading = RunUids(60000, 32).split(2)
    assert (str(lean), str(preloading)) == ("60000-60015", "60016-60031")
    assert lean.token() == "uids=60000-60015"


def test_a_spawning_source_lends_each_uid_once_until_it_is_given_back() -> None:
    lender = UidLender(RunUids(60000, 2))
    first, second = lender.lend(), lender.lend()
    assert {first, second} == {60000, 60001}
    with pytest.raises(OSError, match="every uid of this pool's block is lent"):
        lender.lend()
    lender.give_back(first)
    assert lender.lend() == first


def test_a_lock_the_kernel_refuses_stops_the_pool_in_one_line(lock_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A kernel without open file description locks (before 3.15) answers EINVAL: one line, not a traceback.
    def refused(fd: int, command: int, argument: bytes) -> bytes:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(identity.fcntl, "fcntl", refused)
    with pytest.raises(Unavailable, match="cannot lock its uids: Invalid argument"), claimed_uids(Config(), LENDING):
        pass
