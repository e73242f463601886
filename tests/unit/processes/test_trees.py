"""Removing a run's directory, whatever the run left in it: no depth, permission, link or special
file stops the removal, costs more than a few descriptors, or reaches outside the directory."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runner.processes.trees import MAX_HELD, remove_tree

NOBODY = 65534


def _deep(top: Path, levels: int) -> None:
    """`levels` nested directories under `top` and a file in the last, made by descriptor, as a run
    that goes on with ``chdir`` makes them (their paths pass PATH_MAX)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            deeper = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        leaf = os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
        os.close(leaf)
    finally:
        os.close(fd)


@pytest.fixture(autouse=True)
def removed_after(tmp_path: Path) -> Iterator[None]:
    """What a failed removal left is removed by rm: pytest's own removal of old temporary
    directories, shutil.rmtree, would fail on it in a later session."""
    yield
    subprocess.run(["rm", "-rf", "--", *map(str, tmp_path.iterdir())], check=True)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow  # 2,001 rmdirs: about 3 s on a disk whose journal syncs each, as rm -rf takes
def test_a_directory_two_thousand_levels_deep_is_removed_whole_with_a_few_descriptors(tmp_path: Path) -> None:
    # shutil.rmtree recursed once per level: RecursionError at about a thousand, in the server.
    run = tmp_path / "run"
    run.mkdir()
    _deep(run, 2_000)
    before = _open_fds()
    remove_tree(str(run))
    assert not run.exists()
    assert _open_fds() == before
    assert MAX_HELD <= 32


def test_deep_directories_beside_names_the_removal_uses_itself_are_removed_too(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / ".removed-0").write_text("a file where a moved directory would go")
    (run / ".removed-1").mkdir()
    (run / ".removed-1" / "full").write_text("a directory that is not empty")
    (run / ".removed-2").mkdir()
    _deep(run, 300)
    remove_tree(str(run))
    assert not run.exists()


def _as_a_user_permissions_stop(work: Callable[[], None]) -> int:
    """`work()` in a child process, as uid 65534 where this is root (root opens a directory of mode 0,
    so the removal's way back in, giving the permissions back, would never be taken: CI runs as root);
    the child's exit status, 0 if `work` returned."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            work()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.parametrize("refuses", [False, True], ids=["fchmodat", "fchmodat-cannot-refuse-to-follow"])
def test_directories_without_permissions_and_special_files_are_removed(refuses: bool) -> None:
    # Found by a review: where fchmodat cannot refuse to follow a link (glibc before 2.32, or a link
    # met there), chmod(dir_fd=..., follow_symlinks=False) raised ValueError, which ended the pool.
    home = Path(tempfile.mkdtemp(prefix="test-trees-", dir="/tmp"))  # a user's own, as tmp_path is not
    if os.geteuid() == 0:
        os.chown(home, NOBODY, NOBODY)
    run = home / "run"

    def make_and_remove() -> None:
        if refuses:
            chmod = os.chmod

            def chmod_as_glibc_before_2_32(path: str, mode: int, *, dir_fd: int | None = None, **kw: bool) -> None:
                if dir_fd is not None and not kw.get("follow_symlinks", True):
                    raise ValueError("chmod: cannot use dir_fd and follow_symlinks together")
                chmod(path, mode, dir_fd=dir_fd, **kw)

            os.chmod = chmod_as_glibc_before_2_32  # in this child only
        (run / "a" / "b" / "c").mkdir(parents=True)
        (run / "a" / "b" / "c" / "f").write_text("x")
        os.mkfifo(run / "a" / "fifo")
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(run / "a" / "sock"))
        for directory in (run / "a" / "b" / "c", run / "a" / "b", run / "a"):
            directory.chmod(0)
        run.chmod(stat.S_IRUSR | stat.S_IXUSR)
        remove_tree(str(run))
        assert not run.exists()

    try:
        assert _as_a_user_permissions_stop(make_and_remove) == 0
    finally:
        subprocess.run(["rm", "-rf", "--", str(home)], check=True)


def test_links_in_the_tree_or_in_its_place_are_removed_and_what_they_point_to_stays(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "kept.txt").write_text("not the run's")
    run = tmp_path / "run"
    run.mkdir()
    (run / "to-dir").symlink_to(outside)
    (run / "to-file").symlink_to(outside / "inner" / "kept.txt")
    os.link(outside / "inner" / "kept.txt", run / "hard")
    remove_tree(str(run))
    assert not run.exists()
    assert (outside / "inner" / "kept.txt").read_text() == "not the run's"

    (tmp_path / "moved").symlink_to(outside)
    remove_tree(str(tmp_path / "moved"))
    assert not (tmp_path / "moved").exists()
    assert (outside / "inner" / "kept.txt").exists()


def test_a_path_that_is_gone_is_no_error(tmp_path: Path) -> None:
    remove_tree(str(tmp_path / "never-made"))
