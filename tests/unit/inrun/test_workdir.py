"""A run's work directory emptied in place, without processes: everything planted in it goes, no link
is followed, and an empty one keeps its mode."""

from __future__ import annotations

import os
from pathlib import Path

from runner.inrun.workdir import empty_directory


def test_emptying_a_directory_removes_everything_planted_in_it_and_follows_no_link(tmp_path: Path) -> None:
    top, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the run's")
    deep = top.joinpath(*["d"] * 300)  # deeper than the interpreter's recursion limit allows recursing
    deep.mkdir(parents=True)
    (deep / "planted.txt").write_text("x")
    locked = top / "locked"
    locked.mkdir()
    (locked / "planted.txt").write_text("x")
    (top / "link-to-outside").symlink_to(outside)
    os.mkfifo(top / "fifo")
    locked.chmod(0)
    top.chmod(0)
    try:
        empty_directory(str(top))
        assert os.listdir(top) == []
    finally:
        top.chmod(0o700)
    assert os.listdir(outside) == ["keep.txt"]


def test_an_empty_directory_is_left_as_it_is(tmp_path: Path) -> None:
    tmp_path.chmod(0o750)
    empty_directory(str(tmp_path))
    assert (os.listdir(tmp_path), tmp_path.stat().st_mode & 0o777) == ([], 0o750)
