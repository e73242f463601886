"""Removing a directory a run made or wrote into: hostile input, whatever it holds.

A run may leave a tree of any depth (a loop of ``mkdir``/``chdir`` makes 2,000 levels in half a
second), directories without permissions, links, FIFOs and sockets. The removal is iterative, walks
by directory descriptors (``openat``/``unlinkat``: no path grows with the depth, no link is
followed) and holds at most `MAX_HELD` directories open: deeper ones are moved up into the top
directory first. Found by a review: ``shutil.rmtree`` recurses once per level, so a run's directory
of about a thousand levels raised RecursionError in the server's teardown, which ended the pool.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat

# Directories open at once while a tree is removed: a deeper one is moved up into the top directory
# (a rename within the tree) and removed from there, so no depth costs more descriptors than this.
MAX_HELD = 16
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def remove_tree(path: str) -> None:
    """Delete a run's directory, even if the run took away its own permissions; never raises OSError.

    A link in its place is removed, never what it points to. What cannot be removed (another process
    still writing, a file system that refuses) is left, as ``shutil.rmtree(ignore_errors=True)``
    would leave it.
    """
    try:
        info = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(info.st_mode):
        # The run replaced its directory by a link (or a file): remove that, never what it points to.
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    parent, name = os.path.split(os.path.abspath(path))
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        top = _open_directory(parent_fd, name)
        if top is None:
            return
        try:
            _empty(top)
        finally:
            os.close(top)
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=parent_fd)
    finally:
        os.close(parent_fd)


def _open_directory(parent_fd: int, name: str) -> int | None:
    """`name` in `parent_fd`, opened as a directory without following a link, and made ours to empty
    (0700: the run may have taken its permissions away); None when it is not a directory any more."""
    try:
        fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent_fd)
    except PermissionError:
        # Without read or search permission (a server that is not root): given them back first.
        try:
            _give_back(parent_fd, name)
            fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent_fd)
        except OSError:
            return None
    except OSError:
        return None
    with contextlib.suppress(OSError):
        os.fchmod(fd, stat.S_IRWXU)  # writable, so that what is in it can be unlinked
    return fd


def _give_back(parent_fd: int, name: str) -> None:
    """chmod 0700 the directory `name` in `parent_fd`, never what a link there points to: through a
    descriptor that can only be that directory (``O_PATH``), by its /proc link. (Found by a review:
    ``chmod(dir_fd=..., follow_symlinks=False)`` raises ValueError where fchmodat cannot refuse to
    follow, glibc before 2.32 or a link met there, and that ended the pool from its teardown.)"""
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent_fd)
    try:
        os.chmod(f"/proc/self/fd/{fd}", stat.S_IRWXU)
    finally:
        os.close(fd)


def _empty(top: int) -> None:
    """Remove everything in the directory open as `top`, at any depth, with at most `MAX_HELD`
    directories open. Each directory is listed once: what is not a directory unlinked, its
    subdirectories entered one after the other, and it is removed from its parent once they are gone.
    A subdirectory below `MAX_HELD` levels is renamed into `top` instead, and entered from there.
    Every directory is listed once, so a process still writing into the tree cannot keep it going."""
    serial = itertools.count()
    # The directories open, from `top` down: (descriptor, name in the one above, subdirectories left).
    held: list[tuple[int, str, list[str]]] = [(top, "", _unlink_files(top))]
    try:
        while True:
            fd, _, left = held[-1]
            if left:
                name = left.pop()
                if len(held) >= MAX_HELD:
                    moved = _move_up(fd, name, top, serial)
                    if moved is not None:
                        held[0][2].append(moved)
                    continue
                child = _open_directory(fd, name)
                if child is None:  # gone, or no directory any more: a last try as a file
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=fd)
                    continue
                held.append((child, name, _unlink_files(child)))
                continue
            if len(held) == 1:
                return
            _, name, _ = held.pop()
            os.close(fd)
            with contextlib.suppress(OSError):  # not empty: what could not be removed stays
                os.rmdir(name, dir_fd=held[-1][0])
    finally:
        for fd, _, _ in held[1:]:
            os.close(fd)


def _unlink_files(fd: int) -> list[str]:
    """Unlink every entry of the directory `fd` that is not a directory; the names of those that are."""
    try:
        with os.scandir(fd) as listing:
            entries = list(listing)
    except OSError:
        return []
    directories = []
    for entry in entries:
        try:
            is_directory = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_directory = False
        if is_directory:
            directories.append(entry.name)
            continue
        with contextlib.suppress(OSError):  # refused: left, as rmtree's ignore_errors leaves it
            os.unlink(entry.name, dir_fd=fd)
    return directories


def _move_up(fd: int, name: str, top: int, serial: itertools.count[int]) -> str | None:
    """Rename the directory `name` in `fd` into `top` under a name of its own: that name, or None
    when it could not be moved (it is then left)."""
    for _ in range(64):
        new = f".removed-{next(serial)}"
        try:
            os.rename(name, new, src_dir_fd=fd, dst_dir_fd=top)
            return new
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                return None
            # the name is the run's own entry's: another is tried
    return None
