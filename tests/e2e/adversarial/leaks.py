"""What a run may leave behind, and how to see it: processes that outlive it, files it changed.

Processes: every run's HOME and TMPDIR are inside the pool's base directory, and the bootstrap's
command line names the run's directory, so a process of a run (or of anything it forked or exec'd
without clearing its environment) carries the base directory in /proc/<pid>/environ or cmdline.
Root reads any environ; an unprivileged user cannot read a non-dumpable run's environ, but can
still read its cmdline. A process that clears its environment and execs something else is found
through the pids the snippet printed and through the test process's own children (with the
subreaper sweep, orphans of a run are re-parented to the server, i.e. to this process).

Files: (path, kind, size, mtime) of the trees a run must not touch, compared before and after.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import stat
import subprocess
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import alive, children_of

# Directory names skipped in the repository walk: the environment, VCS data, caches, and vendored
# node packages of the client tests (10,000 files; walking them costs ~130 ms per snapshot).
SKIPPED_DIRS = frozenset(
    {".venv", ".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", "node_modules"}
)

# This copy of the suite: the names its runs write at the top level of /tmp start with
# `adversarial-<SUITE_ID>`. Other copies running on the same machine write `adversarial-*` names of their own.
SUITE_ID = uuid.uuid4().hex[:8]

# Top-level /tmp entries that other processes on a shared machine create and delete at any moment
# (tempfile and mktemp defaults, pip, pytest, other runner pools, the job runner of this machine, and
# other copies of this suite: their decoys and escaped writes, test_isolation's and bench/soak.py's
# directories). A run's own writes in this suite use names that match none of these but `adversarial-*`,
# and those are told apart by OWN_TMP_ENTRIES.
NOISY_TMP_ENTRIES = (
    "tmp*",
    "pip-*",
    "pytest-of-*",
    "python-runner-*",
    "bash_jobs.*",
    "bash_tool_*",
    "adversarial-*",
    "runner-isolation-*",
    "runner-soak-*",
)
OWN_TMP_ENTRIES = (f"adversarial-{SUITE_ID}*",)

Entry = tuple[str, int, int]  # kind, size, mtime_ns (0, 0 for directories: their content is walked)


@dataclass(frozen=True)
class Tree:
    """One place to watch: `root`, walked fully or only its top level, minus `exclude` paths.

    With `contents=False` only which entries exist (and their kind) is compared: for the top level
    of a shared /tmp, where other processes keep appending to their own files.
    """

    root: Path
    recursive: bool = True
    exclude: tuple[Path, ...] = ()
    noise: tuple[str, ...] = ()
    own: tuple[str, ...] = ()  # names that are watched even though they match `noise`
    contents: bool = True


def _entry(st: os.stat_result, contents: bool) -> Entry:
    if stat.S_ISDIR(st.st_mode):
        return ("dir", 0, 0)
    kind = "link" if stat.S_ISLNK(st.st_mode) else "file"
    return (kind, st.st_size, st.st_mtime_ns) if contents else (kind, 0, 0)


@dataclass(frozen=True)
class Checkout:
    """The repository as git sees it: its files (tracked, and untracked but not ignored) and the
    directories holding them. Ignored output (caches, the venv, benchmark results) is left out."""

    files: tuple[Path, ...]
    directories: tuple[Path, ...]

    @classmethod
    def of(cls, root: Path) -> Checkout | None:
        """None where git cannot list the checkout (then walk it as a plain tree)."""
        try:
            listed = subprocess.run(
                ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                capture_output=True,
                check=True,
                timeout=30,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        files = sorted({root / name for name in listed.decode().split("\0") if name})
        directories = sorted({root} | {parent for path in files for parent in path.parents if root in parent.parents})
        return cls(tuple(files), tuple(directories))

    def snapshot(self) -> dict[str, Entry]:
        """Every listed file in full; every other entry of their directories by kind only."""
        seen: dict[str, Entry] = {}
        for directory in self.directories:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                for entry in os.scandir(directory):
                    if entry.name not in SKIPPED_DIRS:
                        with contextlib.suppress(FileNotFoundError):
                            seen[entry.path] = _entry(entry.stat(follow_symlinks=False), contents=False)
        for path in self.files:
            with contextlib.suppress(FileNotFoundError):
                seen[str(path)] = _entry(path.lstat(), contents=True)
        return seen


def snapshot(trees: Iterable[Tree], files: Iterable[Path] = ()) -> dict[str, Entry]:
    """Path -> (kind, size, mtime) for everything under the watched trees and for single `files`
    (symlinks not followed)."""
    seen: dict[str, Entry] = {}
    for path in files:
        with contextlib.suppress(FileNotFoundError):
            seen[str(path)] = _entry(path.lstat(), contents=True)
    for tree in trees:
        excluded = {str(path) for path in tree.exclude}
        pending = [str(tree.root)]
        while pending:
            directory = pending.pop()
            try:
                entries = list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            for entry in entries:
                if entry.path in excluded or (
                    tree.noise and _noisy(entry.name, tree.noise) and not _noisy(entry.name, tree.own)
                ):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                seen[entry.path] = _entry(st, tree.contents)
                if tree.recursive and stat.S_ISDIR(st.st_mode) and entry.name not in SKIPPED_DIRS:
                    pending.append(entry.path)
    return seen


def _noisy(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def file_changes(before: Mapping[str, Entry], after: Mapping[str, Entry]) -> list[str]:
    """Human-readable differences between two snapshots, sorted: `created PATH`, `removed PATH`,
    `changed PATH (before) -> (after)`."""
    changes = [f"created {path}" for path in after.keys() - before.keys()]
    changes += [f"removed {path}" for path in before.keys() - after.keys()]
    changes += [
        f"changed {path} {before[path]} -> {after[path]}"
        for path in before.keys() & after.keys()
        if before[path] != after[path]
    ]
    return sorted(changes)


_RANDOM_TAIL = re.compile(r"(?<=[-_.])[A-Za-z0-9_]{6,}$")


def change_kind(change: str) -> tuple[str, str]:
    """What a change did and to which name, with a random-looking tail of the name (a temporary
    name's suffix) wildcarded: the same snippet run twice makes changes of the same kind."""
    verb, path = change.split(" ", 2)[:2]
    directory, name = os.path.split(path)
    return verb, os.path.join(directory, _RANDOM_TAIL.sub("*", name))


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # gone, or not ours to read
        return b""


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot: with the pid, it names one process."""
    stat = _read(f"/proc/{pid}/stat")
    try:
        return int(stat.rsplit(b")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def processes_marked(markers: Iterable[str]) -> set[tuple[int, int]]:
    """(pid, start time) of live processes (zombies excluded) whose environment or command line
    mentions a marker."""
    wanted = [marker.encode() for marker in markers]
    me = os.getpid()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        text = _read(f"/proc/{pid}/environ") + b"\0" + _read(f"/proc/{pid}/cmdline")
        if any(marker in text for marker in wanted) and alive(pid):
            started = _start_time(pid)
            if started is not None:
                found.add((pid, started))
    return found


def describe(pid: int) -> str:
    """`pid (command line)` for a failure message."""
    command = _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
    return f"{pid} ({command[:120] or '?'})"


def children() -> list[int]:
    """Children of this process, zombies included."""
    return children_of(os.getpid())


def new_children(before: set[int]) -> list[int]:
    """Children of this process (zombies included) that were not there before."""
    return sorted(set(children_of(os.getpid())) - before)


def open_fds() -> list[int]:
    """The file descriptors this process holds."""
    return sorted(int(fd) for fd in os.listdir("/proc/self/fd"))


def reported_survivors(pids: Iterable[int]) -> list[int]:
    """The pids a snippet printed that are still alive."""
    return sorted(pid for pid in set(pids) if alive(pid))
