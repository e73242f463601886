"""A run's working directory, from inside the run: emptied, filled with the call's files, and read
back for what the code made. Standard library only: it runs in the run interpreter, loaded by the
bootstrap (`bootstrap.load_siblings`), under the run's limits.

Nothing here follows a symbolic link: the code may have replaced any file or directory by a link
to somewhere else (`/etc/passwd`, the server's files), and what comes back must be only what is in
the directory itself.
"""

from __future__ import annotations

import os
import stat
import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

# How much of a directory the scan looks at: a run that makes a million files must not make its
# answer wait for a walk over all of them.
MAX_SCANNED = 10_000
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
# Never returned: bytecode of the run's own modules, and matplotlib's cache where the run has no
# other place for it (`figures.private_config`).
SKIPPED_NAMES = frozenset({"__pycache__", ".matplotlib"})


def empty_directory(top: str) -> None:
    """Make `top` empty, whatever is in it and whatever its permissions, but for mount points.

    The pool makes a run's directory before its code arrives, and in plain mode every run has the
    same uid: another run may have written into this one (or taken its permissions away) while it
    waited. Called when the code has arrived, after the pool made sure no earlier run's process is
    left, so the run starts with nothing but what it makes itself. An empty directory costs one
    listdir. A mount point (another device) is the sandbox's own, never a run's (no run can mount):
    an interpreter installed under /tmp, bound back into the sandbox's /tmp, stays, and so do the
    directories on the way to it.

    The walk goes by directory descriptors, one open at a time (down with ``openat``, up with
    ``..``, checked to be the directory it came from), so no depth of nesting can stop it: found by
    a review, a run that planted 2,100 nested directories in a waiting sibling's directory failed
    the next two runs with 'File name too long' when they were walked by path.
    """
    try:
        names = os.listdir(top)
    except PermissionError:
        names = None
    if names == []:
        return
    top_info = os.stat(top)
    if names is None and top_info.st_uid == os.getuid():
        os.chmod(top, 0o700)  # taken away by an earlier run: listable again
    fd = os.open(top, _DIRECTORY_FLAGS)
    try:
        _empty_from(fd, top_info.st_dev)
    finally:
        os.close(fd)
    if top_info.st_uid == os.getuid():
        os.chmod(top, stat.S_IMODE(top_info.st_mode) | 0o700)  # the sandbox's /tmp stays 1777


_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _empty_from(fd: int, device: int) -> None:
    """Empty the directory open as `fd` (the top: never closed here) of all but mount points and the
    directories on the way to them. Each directory is listed once, when entered (`_unlink_files`);
    what each level entered keeps: its name, its parent's identity, the parent's subdirectories still
    to enter, and whether something in the parent stays. (Found by a second look: listed again after
    each subdirectory, 10,000 subdirectories took 34 s against 1 s walked by path.)"""
    uid = os.getuid()
    top = fd
    levels: list[tuple[str, tuple[int, int], list[str], bool]] = []
    _make_ours(fd, uid)
    left, stays = _unlink_files(fd, device)
    while True:
        if left:
            name = left.pop()
            here = os.fstat(fd)
            child = _open_directory(fd, name)
            if fd != top:
                os.close(fd)
            levels.append((name, (here.st_dev, here.st_ino), left, stays))
            fd = child
            _make_ours(fd, uid)
            left, stays = _unlink_files(fd, device)
            continue
        if not levels:
            return
        name, parent_identity, parent_left, parent_stays = levels.pop()
        parent = top if not levels else os.open("..", _DIRECTORY_FLAGS, dir_fd=fd)
        os.close(fd)
        fd = parent
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != parent_identity:
            raise OSError(f"a directory was moved while it was emptied: {name!r}")
        if not stays:
            os.rmdir(name, dir_fd=fd)
        left, stays = parent_left, parent_stays or stays


def _unlink_files(fd: int, device: int) -> tuple[list[str], bool]:
    """Unlink what in the directory `fd` is not a directory: (the subdirectories to enter, whether
    something in it stays: a mount point, another device's, is the sandbox's own, never a run's)."""
    directories: list[str] = []
    stays = False
    for entry in list(os.scandir(fd)):
        info = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
        if info.st_dev != device:
            stays = True
        elif stat.S_ISDIR(info.st_mode):
            directories.append(entry.name)
        else:
            os.unlink(entry.name, dir_fd=fd)
    return directories, stays


def _open_directory(fd: int, name: str) -> int:
    try:
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=fd)
    except PermissionError:  # an earlier run took its permissions away (no run has CAP_DAC_OVERRIDE)
        os.chmod(name, 0o700, dir_fd=fd)  # lstat said a directory, and no earlier run's process is left
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=fd)


def _make_ours(fd: int, uid: int) -> None:
    if os.fstat(fd).st_uid == uid:
        os.fchmod(fd, 0o700)  # ours (the same uid made it): listable and writable again
    # else the sandbox's, made before the run was lent a uid of its own: on the way to a kept path


def write_inputs(files: list[tuple[str, bytes]]) -> dict[str, tuple[int, int, int, int]]:
    """Write the call's files under the current directory; return what each is, to tell later whether
    the code changed it: path -> (inode, size, mtime in ns, CRC-32 of the content).

    The server checked every path (relative, no `..`, no empty part), and the directory was emptied
    just before: nothing of another run is in it. O_EXCL and O_NOFOLLOW keep the last part of a path
    from being an existing file or a link; directories on the way are made here.
    """
    written = {}
    for path, data in files:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, mode=0o700, exist_ok=True)
        info = create_file(path, data)
        written[path] = (info.st_ino, info.st_size, info.st_mtime_ns, zlib.crc32(data))
    return written


def create_file(path: str, data: bytes, mode: int = 0o600, mtime_ns: int | None = None) -> os.stat_result:
    """Write `data` to a new file at `path` (O_EXCL, O_NOFOLLOW: never an existing file or a link),
    with `mode` and, if given, its modification time; what it is then."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    return _filled(fd, data, mode, mtime_ns)


def rewrite_file(path: str, data: bytes, mode: int, mtime_ns: int) -> os.stat_result:
    """Write `data` over the regular file at `path` in place, the same inode (never a link: O_NOFOLLOW),
    with `mode` and its modification time; what it is then. Its mode is made writable first: a call
    may have taken the owner's write bit away."""
    os.chmod(path, 0o600)
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    return _filled(fd, data, mode, mtime_ns)


def _filled(fd: int, data: bytes, mode: int, mtime_ns: int | None) -> os.stat_result:
    """`fd` with `data` written, its mode and time set; closed, what it is then."""
    try:
        view = memoryview(data)
        done = 0
        while done < len(data):
            done += os.write(fd, view[done:])
        if mode != 0o600:
            os.fchmod(fd, mode)
        if mtime_ns is not None:
            os.utime(fd, ns=(mtime_ns, mtime_ns))
        return os.fstat(fd)
    finally:
        os.close(fd)


def walk(top: str, identity: tuple[int, int]) -> Iterator[tuple[str, os.stat_result | None]]:
    """Every entry under `top` but directories, as (path relative to `top`, lstat); links not followed.

    `top` must still be the directory `identity` (st_dev, st_ino) names: a run that moved its
    directory away and put a link or another directory in its place gets nothing scanned. What is
    mounted inside it is the sandbox's (an interpreter or package environment that lives under /tmp,
    bound back read-only), never something the run made: it is not walked into. At most
    MAX_SCANNED entries; then ("", None) says the rest was not looked at. Whatever the scan reads,
    the run could have read itself: it runs with the run's rights, in the run.
    """
    try:
        info = os.lstat(top)
    except OSError:
        return
    if not stat.S_ISDIR(info.st_mode) or (info.st_dev, info.st_ino) != identity:
        return
    device = info.st_dev
    pending = [""]
    seen = 0
    while pending:
        relative = pending.pop()
        try:
            entries = sorted(os.scandir(os.path.join(top, relative)), key=lambda e: e.name)
        except OSError:
            continue  # taken away by the code (no permission, or gone): nothing to return from it
        subdirectories = []
        for entry in entries:
            seen += 1
            if seen > MAX_SCANNED:
                yield "", None
                return
            if entry.name in SKIPPED_NAMES:
                continue
            path = os.path.join(relative, entry.name) if relative else entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if info.st_dev == device:  # not a mount point: the sandbox's, never the run's
                    subdirectories.append(path)
            else:
                yield path, info
        pending.extend(reversed(subdirectories))  # depth first, in name order


def read_regular(path: str, info: os.stat_result, limit: int) -> bytes | None:
    """Up to `limit` bytes of the regular file at `path`, if it is still the file `info` describes.

    Opened without following a link and without blocking (a FIFO put in its place cannot stall the
    run's end); a file another process still writes is read as far as it was when looked at.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            return None
        chunks = []
        left = min(limit, now.st_size)
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
