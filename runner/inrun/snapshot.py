"""A session's directory as its last kept call left it, held by the session's anchor (`keeper.py`):
what a call that is rolled back changed is put back from it. Standard library only.

In a sandbox, the run's own /dev/shm and /run are taken and put back with it: found by a review, a
rolled-back call's files there stayed, seen by the next call and held against the sessions' memory
budget (45 MiB of them after a failed call, its session's count 8 KiB before it).
"""

from __future__ import annotations

import errno
import os
import stat
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from runner.inrun import workdir
else:  # from this file's directory (`bootstrap.load_siblings`): never imported by the server
    import workdir

# What the snapshot holds at most: past this a call is rolled back.
MAX_SNAPSHOT_ENTRIES = 10_000
# The kernel stamps a file's times from a clock that moves a tick (1-10 ms) at a time: a file changed
# within this long of when it was read may change again with the same ctime, so its bytes are compared.
COARSE_NS = 20_000_000


class TooManyEntries(OSError):
    """The session's files hold more than MAX_SNAPSHOT_ENTRIES entries."""


class Snapshot:
    """The session's directory as the last kept call left it, in the anchor's memory: what a call
    that is rolled back changed is put back from it. Regular files, directories and symbolic links,
    with their modes and times; other kinds (FIFOs, sockets) are not kept. Nothing is followed, and
    nothing that is not the session's (another file system, another owner) is kept or put back.

    `beside`: the session's own tmpfs mounts outside its directory (a sandbox's /dev/shm and /run),
    kept and put back the same way; their entries are named by absolute paths (`os.path.join` of the
    directory and one is that path), the directory's by paths relative to it."""

    def __init__(self, home: str, beside: tuple[str, ...] = ()) -> None:
        self.home = home
        self.beside = beside
        self.entries: dict[str, tuple[object, ...]] = {}
        self.take()

    def _scan(self, opening: bool = False) -> dict[str, os.stat_result]:
        found: dict[str, os.stat_result] = {}
        top = os.lstat(self.home)
        if opening and top.st_mode & 0o700 != 0o700:
            os.chmod(self.home, 0o700)
        self._scan_tree("", top.st_dev, top.st_uid, found, opening)
        for root in self.beside:
            # Shared by every uid (mode 1777) and the sandbox's: the session's are what its uid made.
            self._scan_tree(root, os.lstat(root).st_dev, os.getuid(), found, opening)
        return found

    def _scan_tree(
        self, key: str, device: int, owner: int, found: dict[str, os.stat_result], opening: bool = False
    ) -> None:
        """Add to `found` every entry under `key` (the directory's '', or a tmpfs beside it) on
        `device` owned by `owner`; `opening` (for a roll-back): each directory of the session's made
        one its owner may list, enter and write in, whatever mode a call left it (found by a second
        look: a call's chmod 500 or 600 of a kept directory ended its session), its mode put back from
        the snapshot afterwards."""
        pending = [key]
        while pending:
            relative = pending.pop()
            path = os.path.join(self.home, relative) if relative else self.home
            try:
                names = sorted(os.listdir(path))
            except PermissionError:
                os.chmod(path, 0o700)
                names = sorted(os.listdir(path))
            for name in names:
                entry = os.path.join(relative, name) if relative else name
                info = os.lstat(os.path.join(self.home, entry))
                if info.st_dev != device or info.st_uid != owner:
                    # A mount point, or what the sandbox made to hold one (a path of the server's
                    # under /tmp, bound into the run's /tmp; the bootstrap's under /run): never the
                    # session's, nor its to change.
                    continue
                found[entry] = info
                if len(found) > MAX_SNAPSHOT_ENTRIES:
                    raise TooManyEntries(f"more than {MAX_SNAPSHOT_ENTRIES:,} entries in the session's files")
                if stat.S_ISDIR(info.st_mode):
                    if opening and info.st_mode & 0o700 != 0o700:
                        os.chmod(os.path.join(self.home, entry), 0o700)
                    pending.append(entry)

    def look(self, *also: dict[str, tuple[object, ...]]) -> tuple[dict[str, tuple[object, ...]], str]:
        """The directory as it is now, re-reading only files changed since it was taken (or since
        `also`, an earlier look): (entries, ''), or ({}, why not). Nothing is taken yet."""
        try:
            entries: dict[str, tuple[object, ...]] = {}
            for path, info in self._scan().items():
                key = _key(info)
                if stat.S_ISDIR(info.st_mode):
                    entries[path] = ("d", info.st_mode, info.st_mtime_ns)
                elif stat.S_ISLNK(info.st_mode):
                    entries[path] = ("l", os.readlink(os.path.join(self.home, path)))
                elif stat.S_ISREG(info.st_mode):
                    full = os.path.join(self.home, path)
                    known = [old for old in (d.get(path) for d in (self.entries, *also)) if old is not None]
                    same = next((old for old in known if old[0] == "f" and _unchanged(old, info, full)), None)
                    # Read now, or found the same: either way known as of now (a file its bytes were
                    # compared for is trusted by its key from the next look on).
                    data = same[2] if same is not None else _read(full, info)
                    entries[path] = ("f", key, data, time.time_ns())
            return entries, ""
        except (OSError, MemoryError) as exc:
            return {}, f"the session's files could not be kept: {exc}"

    def take(self, *also: dict[str, tuple[object, ...]]) -> str:
        """Take the directory as it is now (`look`); why not, or ''."""
        entries, failure = self.look(*also)
        if not failure:
            self.entries = entries
        return failure

    def _moved_back(self, now: dict[str, os.stat_result]) -> bool:
        """Put each kept file a call moved (renamed, or its directory renamed) back under its own name:
        the same inode, which the state may hold open (found by a third look: a moved kept file was put
        back as a new one, the state's open file left with no name, and the session ended). Whether any
        was; one that cannot be is left to the rest of `restore`."""
        where = {info.st_ino: path for path, info in now.items() if stat.S_ISREG(info.st_mode)}
        moved = False
        for path, entry in self.entries.items():
            if entry[0] != "f":
                continue
            inode, here = entry[1][0], now.get(path)  # type: ignore[index]
            there = where.get(inode)
            if there is None or there in self.entries or (here is not None and here.st_ino == inode):
                continue  # not moved, gone, or a name the state has too (a hard link of its own)
            full = os.path.join(self.home, path)
            try:
                if here is not None and stat.S_ISDIR(here.st_mode):
                    continue
                os.makedirs(os.path.dirname(full), 0o700, exist_ok=True)
                if os.path.lexists(full):
                    os.unlink(full)
                os.rename(os.path.join(self.home, there), full)
                moved = True
            except OSError:
                continue  # another file system, or a file where a directory was: put back anew below
        return moved

    def restore(self) -> str:
        """Put the directory back as it was taken; why not, or ''. Where the call left more entries
        than a scan takes, or paths longer than the system's (found by a review: a call that unpacked
        10,001 files, or nested 30 directories of 200 characters, ended its session, the roll-back
        failing on the very tree it had to remove), the directory is emptied by directory descriptors,
        whatever its size and depth (`workdir.empty_directory`), and the state written back anew."""
        try:
            return self._restore()
        except (OSError, MemoryError) as exc:
            if not isinstance(exc, TooManyEntries) and getattr(exc, "errno", None) != errno.ENAMETOOLONG:
                return str(exc)
        try:
            workdir.empty_directory(self.home)
            return self._restore()
        except (OSError, MemoryError) as exc:
            return str(exc)

    def _restore(self) -> str:
        now = self._scan(opening=True)
        if self._moved_back(now):
            now = self._scan(opening=True)
        rewrite: list[tuple[str, tuple[object, ...]]] = []
        for path in sorted(now, key=lambda p: p.count("/"), reverse=True):
            info = now[path]
            old = self.entries.get(path)
            full = os.path.join(self.home, path)
            if old is not None and _same(old, info, full):
                continue
            if old is not None and old[0] == "f" and stat.S_ISREG(info.st_mode) and info.st_ino == old[1][0]:  # type: ignore[index]
                # The file the state knew, changed: written back in place, where a file the state
                # holds open sees it (found by a review: put back as a new file, the state's open
                # one kept what the rolled-back call wrote through it); once what the call made
                # is gone, whose room it may need (found by a second look: a call that filled the
                # tmpfs ended its session).
                rewrite.append((path, old))
                continue
            if stat.S_ISDIR(info.st_mode):
                os.chmod(full, 0o700)
                os.rmdir(full)  # deepest first: what was in it is gone already
            else:
                os.unlink(full)
        for path, old in rewrite:
            full = os.path.join(self.home, path)
            self.entries[path] = ("f", _rewrite(full, old[1], old[2]), old[2], time.time_ns())  # type: ignore[arg-type]
        for path in sorted(self.entries, key=lambda p: p.count("/")):
            entry = self.entries[path]
            full = os.path.join(self.home, path)
            if os.path.lexists(full):
                continue
            if entry[0] == "d":
                os.mkdir(full, 0o700)  # its mode last, as each directory's
            elif entry[0] == "l":
                os.symlink(entry[1], full)  # type: ignore[arg-type]
            else:
                key, data = entry[1], entry[2]
                self.entries[path] = ("f", _write(full, key, data), data, time.time_ns())  # type: ignore[arg-type]
        # Modes and times last, deepest first: writing into a directory changes its time, and a mode a
        # state kept (or a call left) may shut what is in it.
        for path in sorted(self.entries, key=lambda p: p.count("/"), reverse=True):
            entry = self.entries[path]
            if entry[0] == "d":
                full = os.path.join(self.home, path)
                os.chmod(full, entry[1] & 0o7777)  # type: ignore[operator]
                os.utime(full, ns=(entry[2], entry[2]), follow_symlinks=False)  # type: ignore[arg-type]
        return ""


def _key(info: os.stat_result) -> tuple[int, int, int, int, int]:
    """What says a regular file is unchanged: its inode, size, times and mode. The change time too,
    which no call can set: a file rewritten in place, its size kept and its mtime put back with
    os.utime, still has a new ctime."""
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_mode, info.st_ctime_ns)


def _unchanged(entry: tuple[object, ...], info: os.stat_result, path: str) -> bool:
    """Whether the regular file at `path` (`info`) is still what `entry` (``("f", key, bytes, read at)``)
    holds: its key, and where its ctime is too close to when it was read to tell (`COARSE_NS`), its
    bytes."""
    if entry[1] != _key(info):
        return False
    if info.st_ctime_ns < entry[3] - COARSE_NS:  # type: ignore[operator]
        return True
    try:
        return _read(path, info) == entry[2]
    except OSError:
        return False


def _same(entry: tuple[object, ...], info: os.stat_result, path: str) -> bool:
    if entry[0] == "f":
        return stat.S_ISREG(info.st_mode) and _unchanged(entry, info, path)
    if entry[0] == "d":
        return stat.S_ISDIR(info.st_mode)
    try:  # a link: the same target too (a call may point it elsewhere)
        return stat.S_ISLNK(info.st_mode) and os.readlink(path) == entry[1]
    except OSError:
        return False


def _read(path: str, info: os.stat_result) -> bytes:
    data = workdir.read_regular(path, info, info.st_size)
    if data is None:
        raise OSError(f"{path!r} changed while it was read")
    return data


def _rewrite(path: str, key: tuple[int, int, int, int, int], data: bytes) -> tuple[int, int, int, int, int]:
    """Write a file back as it was over what a call made of it, the same inode; its new key (a new ctime)."""
    return _key(workdir.rewrite_file(path, data, key[3] & 0o7777, key[2]))


def _write(path: str, key: tuple[int, int, int, int, int], data: bytes) -> tuple[int, int, int, int, int]:
    """Write a file back as it was (content, mode, time); its new key (a new inode, a new ctime)."""
    info = workdir.create_file(path, data, key[3] & 0o7777, key[2])
    return _key(info)
