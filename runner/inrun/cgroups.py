"""Whole-run limits through cgroups, the run's side (runner/processes/cgroups.py is the server's). Stdlib only.

The server imports this (as runner.inrun.cgroups) to find the layout (`detect`, pure over the text of
/proc/self/cgroup and /proc/self/mountinfo, with a small look at the control files) and to make a
bubblewrap run's cgroup; the namespaced zygote loads it (`bootstrap.load_siblings`) to make the
cgroups its runs are lent.

Two layouts are supported:

- cgroup v2, where the unified hierarchy offers `memory` and `pids` to the server's own cgroup (a
  delegated subtree: systemd's Delegate=yes, a container with a writable cgroup namespace, or the
  root). Per run: ``pids.max``, ``memory.max``, ``memory.swap.max=0`` and ``memory.oom.group=1``.
- cgroup v1, with writable `memory` and `pids` hierarchies (a hybrid layout's, as on Debian 12 without
  systemd). Per run: ``pids.max``, ``memory.limit_in_bytes`` and, where swap is accounted,
  ``memory.memsw.limit_in_bytes`` (the same: no swap). v1 has no oom.group: the zygote (or the server,
  for bubblewrap) is told of the cgroup's OOM kill through ``cgroup.event_control`` and ends the run.

Every process of a run is in its cgroup from before its code arrives; tmpfs, memfd and shared
memory pages are charged to the cgroup of the process that first touched them, so a run's /tmp,
/dev/shm and memfds count against its memory limit.

The namespaced zygote keeps one cgroup with each kept PID namespace (`RunCgroups.lent`), made with it
and removed once it is ended, as it keeps the namespace: a run is lent a cgroup only once every process
of the earlier run in it is gone (its init said so), so none is left in it; its OOM kills are counted
from where the earlier run's ended (`RunCgroup.oom_kills`). What an earlier run left charged is page
cache of files it read and the kernel's caches, reclaimed first when the run needs the memory: its tmpfs
went with its mount namespace. Made and removed per run, a cgroup cost the zygote 0.35 ms of CPU per run
(docs/performance.md). Bubblewrap's runs each get a cgroup of their own (`RunCgroups.make`).

A run's cgroup is made with directory fds of the per-server parent (opened once, before the zygote
pivots into a view without /sys), so nothing here needs the path once it is open.
"""

from __future__ import annotations

import errno
import os
import select
import time

# The per-server parent in each hierarchy, under the server's own cgroup: "python-runner-<pid>-<n>",
# n counting the server's sources (a zygote or bubblewrap's spawner each).
PARENT_PREFIX = "python-runner-"
# A v2 server whose own cgroup must hand controllers down moves itself here first (no internal processes).
LEAF_NAME = "python-runner-server"
RUN_PREFIX = "run-"
WANTED = ("memory", "pids")
# What the zygote is told of each hierarchy's parent: ``cgroup=<path>``; and the limits every run's
# cgroup gets, in order: ``cgroup-limits=<file>=<value>,...`` (a file is written where it exists).
PATH_MARK = "cgroup="
LIMITS_MARK = "cgroup-limits="


class Layout:
    """What `detect` found: `version` 1 or 2 (0: none), the directory of the server's own cgroup for
    each wanted controller that holds (v2: the same one for both), whether a v2 server must move into a
    leaf first (`leaf`), and why what does not hold does not (`reason`)."""

    __slots__ = ("dirs", "leaf", "reason", "version")

    def __init__(self, version: int, dirs: dict[str, str], reason: str, leaf: bool = False) -> None:
        self.version = version
        self.dirs = dirs
        self.reason = reason
        self.leaf = leaf

    def __repr__(self) -> str:
        return f"Layout({self.version}, {self.dirs!r}, {self.reason!r}, leaf={self.leaf})"


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/self/cgroup as {controller: path}; the unified hierarchy's line (``0::/path``) as "" ."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            found[""] = path
        for controller in controllers.split(","):
            if controller:
                found[controller] = path
    return found


def parse_mountinfo(text: str) -> list[tuple[str, str, str, bool, set[str]]]:
    """The cgroup mounts of /proc/self/mountinfo: (mount point, root within the hierarchy, fstype,
    read-only, super options); fstype ``cgroup`` (v1, the options name its controllers) or ``cgroup2``."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 7:
            continue
        dash = fields.index("-")
        fstype, options = fields[dash + 1], fields[dash + 3] if len(fields) > dash + 3 else ""
        if fstype not in ("cgroup", "cgroup2"):
            continue
        read_only = "ro" in fields[5].split(",") or "ro" in options.split(",")
        point = fields[4].replace("\\040", " ")
        mounts.append((point, fields[3], fstype, read_only, set(options.split(","))))
    return mounts


def _below(mount_root: str, path: str) -> str | None:
    """`path` (a cgroup's, from /proc/self/cgroup) relative to a mount of the hierarchy at `mount_root`."""
    if mount_root == "/":
        return path
    if path == mount_root or path.startswith(mount_root.rstrip("/") + "/"):
        return path[len(mount_root) :] or "/"
    return None


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as control:
        return control.read()


def detect(
    proc_cgroup: str,
    mountinfo: str,
    *,
    root: bool,
    read: object = None,
    writable: object = None,
) -> Layout:
    """The layout for whole-run limits, decided from the text of /proc/self/cgroup and
    /proc/self/mountinfo and a look at the control files (`read`, `writable`: for tests, else the
    file system's). `root`: whether the server is uid 0 (v1 hierarchies are then writable to it).

    v2 first, where the unified hierarchy offers memory and pids to the server's cgroup; else v1's
    memory and pids hierarchies (each where writable); else none, with why."""
    read_file = read if callable(read) else _read
    can_write = writable if callable(writable) else (lambda path: os.access(path, os.W_OK))
    cgroups = parse_proc_cgroup(proc_cgroup)
    mounts = parse_mountinfo(mountinfo)
    why: list[str] = []
    unified = next((m for m in mounts if m[2] == "cgroup2"), None)
    if unified is not None and "" in cgroups:
        point, mount_root, _, read_only, _ = unified
        relative = _below(mount_root, cgroups[""])
        if relative is None:
            why.append(f"v2: the server's cgroup {cgroups['']} is outside the mount at {point}")
        else:
            directory = os.path.normpath(point + "/" + relative)
            found = _v2(directory, read_only, relative == "/", read_file, can_write)
            if isinstance(found, Layout):
                return found
            why.append(found)
    dirs: dict[str, str] = {}
    for controller in WANTED:
        mount = next((m for m in mounts if m[2] == "cgroup" and controller in m[4]), None)
        if mount is None or controller not in cgroups:
            why.append(f"v1: no {controller} hierarchy")
            continue
        point, mount_root, _, read_only, _ = mount
        relative = _below(mount_root, cgroups[controller])
        directory = os.path.normpath(point + "/" + (relative or "/"))
        if relative is None:
            why.append(f"v1: the server's {controller} cgroup is outside the mount at {point}")
        elif read_only:
            why.append(f"{point} is read-only")
        elif not can_write(directory):
            why.append(f"{directory} is not writable" + ("" if root else " (the server is not root)"))
        else:
            dirs[controller] = directory
    if dirs:
        return Layout(1, dirs, "; ".join(["v1", *why]))
    return Layout(0, {}, "; ".join(why) or "no cgroup hierarchy")


def _v2(directory: str, read_only: bool, at_root: bool, read_file: object, can_write: object) -> Layout | str:
    """The v2 layout at `directory` (the server's own cgroup), or why there is none."""
    assert callable(read_file)
    assert callable(can_write)
    if read_only:
        return f"v2: {directory} is read-only"
    try:
        available = read_file(directory + "/cgroup.controllers").split()
        enabled = read_file(directory + "/cgroup.subtree_control").split()
    except OSError as exc:
        return f"v2: cannot read {directory}: {exc.strerror}"
    lacking = [c for c in WANTED if c not in available]
    if lacking:
        return f"v2: no {', '.join(lacking)} controller at {directory} (it offers {' '.join(available) or 'none'})"
    if not can_write(directory) or not can_write(directory + "/cgroup.subtree_control"):
        return f"v2: {directory} is not writable (not delegated to the server)"
    where = "root" if at_root else "delegated"
    if all(c in enabled for c in WANTED) or at_root:
        # The root cgroup may hold processes and hand controllers down; a delegated one that already
        # hands them down holds none of its own (the kernel's "no internal processes" rule).
        return Layout(2, {c: directory for c in WANTED}, f"v2 {where}")
    # The server's own cgroup must pass memory and pids to its children, and may then hold no
    # process itself: the server moves into a leaf child first (as isolate-cg-keeper and nsjail do).
    return Layout(2, {c: directory for c in WANTED}, f"v2 {where}, the server moved into {LEAF_NAME}", leaf=True)


def limit_writes(version: int, pids_max: int, memory_bytes: int) -> list[tuple[str, str]]:
    """What every run's cgroup gets, in the order written (v1's memsw only after the memory limit it
    may not be below). A file that is not there is skipped (`RunCgroups.make`): v1's memsw exists only
    where swap is accounted, and on a machine with no swap there is none to account."""
    if version == 2:
        return [
            ("pids.max", str(pids_max)),
            ("memory.max", str(memory_bytes)),
            ("memory.swap.max", "0"),
            ("memory.oom.group", "1"),
        ]
    # v1 counts a socket's TCP buffers only where its cgroup has a TCP limit (v2 counts them in memory.max):
    # buffers that grow by themselves to megabytes, where a run has TCP (egress, a shared network).
    return [
        ("pids.max", str(pids_max)),
        ("memory.limit_in_bytes", str(memory_bytes)),
        ("memory.memsw.limit_in_bytes", str(memory_bytes)),
        ("memory.kmem.tcp.limit_in_bytes", str(memory_bytes)),
    ]


# The files that hold a run's memory budget, in either version.
MEMORY_LIMITS = (
    "memory.max",
    "memory.limit_in_bytes",
    "memory.memsw.limit_in_bytes",
    "memory.kmem.tcp.limit_in_bytes",
)


def memory_grown(writes: list[tuple[str, str]], extra: int) -> list[tuple[str, str]]:
    """`writes` with the memory budget `extra` bytes larger (a preloading zygote's runs: `zygote.serve`)."""
    if extra <= 0:
        return writes
    return [(name, str(int(value) + extra) if name in MEMORY_LIMITS else value) for name, value in writes]


def tokens(parents: list[str], writes: list[tuple[str, str]]) -> list[str]:
    """The zygote's namespace arguments that tell it the parents and the limits (`parse_tokens`)."""
    limits = ",".join(f"{name}={value}" for name, value in writes)
    return [PATH_MARK + path for path in parents] + ([LIMITS_MARK + limits] if parents else [])


def parse_tokens(args: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The parents' paths and the limits among the zygote's namespace arguments (`tokens`)."""
    parents = [arg[len(PATH_MARK) :] for arg in args if arg.startswith(PATH_MARK)]
    writes: list[tuple[str, str]] = []
    for arg in args:
        if arg.startswith(LIMITS_MARK):
            for item in arg[len(LIMITS_MARK) :].split(","):
                name, _, value = item.partition("=")
                if name:
                    writes.append((name, value))
    return parents, writes


def parse_counter(text: str, key: str) -> int:
    """The value of `key` in a flat keyed file (memory.events, memory.oom_control); 0 if absent."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _write_at(directory: int, name: str, value: str) -> bool:
    """Write `value` to the control file `name` of the cgroup open at `directory`; False if it is not there."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=directory)
    except FileNotFoundError:
        return False
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)
    return True


def _read_at(directory: int, name: str) -> str:
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory)
    try:
        return os.read(fd, 4096).decode("ascii", "replace")
    finally:
        os.close(fd)


def _open_mover(directory: int) -> int:
    """The file a run's first process writes ``0`` to, to move into the cgroup: v1's ``tasks``, which
    moves the writing thread alone (the run is single-threaded then), and for that the kernel takes
    no global lock (Linux 6.1+); ``cgroup.procs`` takes the lock every fork and exit of the host
    shares, whose first taker after a quiet spell waits out an RCU grace period: 5-13 ms here, on the
    way to every run's ready line. v2 has no ``tasks``: there, ``cgroup.procs``."""
    try:
        return os.open("tasks", os.O_WRONLY | os.O_CLOEXEC, dir_fd=directory)
    except FileNotFoundError:
        return os.open("cgroup.procs", os.O_WRONLY | os.O_CLOEXEC, dir_fd=directory)


class RunCgroup:
    """One run's cgroup, in each hierarchy: its directory fds, and fds of its cgroup.procs for the run
    to write ``0`` to (it moves itself: the kernel checks the opener's credentials, the maker's)."""

    __slots__ = ("dirs", "event", "name", "oom_counted", "oom_seen", "procs")

    def __init__(self, name: str) -> None:
        self.name = name
        self.dirs: list[tuple[int, int]] = []  # (the parent's fd, this cgroup's) in each hierarchy
        self.procs: list[int] = []
        self.event = -1  # v1: an eventfd told of the cgroup's OOM kills (cgroup.event_control)
        self.oom_seen = False
        self.oom_counted = 0  # the kernel's count of OOM kills here that earlier runs' reports took

    def lend(self) -> None:
        """A kept cgroup, to its next run (no process of the earlier one is left in it): an OOM the
        kernel told of late is the earlier run's, and counted as theirs."""
        if self.event >= 0 and self.out_of_memory():
            self.oom_counted = self._oom_counter()
        self.oom_seen = False

    def place_self(self) -> None:
        """In the run's first process, before anything else: move into the cgroup, close the fds."""
        for fd in self.procs:
            os.write(fd, b"0")
        self.close_procs()

    def out_of_memory(self) -> bool:
        """v1: whether the kernel signalled an OOM in the cgroup (`event` was readable). The run is
        then ended by whoever watches it, possibly before the OOM killer picked a process: so it counts
        as one kill at least (`oom_kills`).

        Looked at before it is read: the error a read of an eventfd with nothing to say raises would
        cost the zygote some 20 pages copied at every run's start and end (it is asked at both)."""
        event = self.event  # read once: `remove` may close it, from another thread, and make it -1
        if event < 0:
            return self.oom_seen
        try:
            poll = select.poll()
            poll.register(event, select.POLLIN)
            if not poll.poll(0):
                return self.oom_seen
            os.read(event, 8)
        except (OSError, ValueError):
            return self.oom_seen
        self.oom_seen = True
        return True

    def close_procs(self) -> None:
        for fd in self.procs:
            os.close(fd)
        self.procs = []

    def oom_kills(self) -> int:
        """OOM kills in the cgroup since the last call (or since it was made): v2 memory.events (a group
        kill counts once at least), v1 memory.oom_control's oom_kill (kernel 4.13+). Where the kernel
        tells of OOMs on an eventfd (v1) and has told of none, none: no file is read (0.08 ms of every
        run's end)."""
        if self.event >= 0 and not self.out_of_memory():
            return 0
        counter = self._oom_counter()
        kills = max(int(self.oom_seen), counter - self.oom_counted)
        self.oom_counted = counter
        return kills

    def _oom_counter(self) -> int:
        """The kernel's count of OOM kills in the cgroup since it was made; 0 if it has none."""
        for _, directory in self.dirs:
            for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
                try:
                    text = _read_at(directory, name)
                except OSError:
                    continue
                return max(parse_counter(text, key), parse_counter(text, "oom_group_kill"))
        return 0

    def peak(self) -> int:
        """The most memory the run's cgroup held at once (v2 memory.peak, v1 max_usage_in_bytes); 0 if unknown."""
        for _, directory in self.dirs:
            for name in ("memory.peak", "memory.max_usage_in_bytes"):
                try:
                    return int(_read_at(directory, name).split()[0])
                except (OSError, ValueError, IndexError):
                    continue
        return 0

    def remove(self, patience: float = 0.0) -> bool:
        """rmdir in each hierarchy; True once it is gone from all. EBUSY (a process still exiting)
        is tried again for `patience` seconds, then left for a later call: never forgotten."""
        deadline = time.monotonic() + patience
        self.close_procs()
        if self.event >= 0:
            os.close(self.event)
            self.event = -1
        while True:
            left = []
            for parent, directory in self.dirs:
                try:
                    os.rmdir(self.name, dir_fd=parent)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        raise
                    left.append((parent, directory))
                    continue
                if directory >= 0:
                    os.close(directory)
                os.close(parent)
            self.dirs = left
            if not left:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)


class RunCgroups:
    """The per-server parent's directories (opened once), and every run cgroup made under them."""

    __slots__ = ("count", "doomed", "kept", "parents", "writes")

    def __init__(self, paths: list[str], writes: list[tuple[str, str]]) -> None:
        # Run cgroups still waiting for their last process to go (a bubblewrap run's, a kept namespace's
        # once it ended), tried again on every wake-up (`remove_doomed`): never waited for where the
        # zygote's one thread forks and reports every run.
        self.doomed: list[RunCgroup] = []
        # The namespaced zygote's: one with each kept PID namespace, by the fd its init answers on (`lent`).
        self.kept: dict[int, RunCgroup] = {}
        self.parents: list[int] = []
        try:
            for path in paths:
                self.parents.append(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        except OSError:
            self.close()
            raise
        self.writes = writes
        self.count = 0

    def make(self, name: str | None = None) -> RunCgroup:
        """A new run cgroup with its limits, and its cgroup.procs open for the run to move into.
        OSError leaves nothing behind."""
        self.count += 1
        run = RunCgroup(name or f"{RUN_PREFIX}{os.getpid()}-{self.count}")
        try:
            for parent in self.parents:
                # Its own fd of the parent: the run's cgroup may outlive the parents' (a source that
                # stopped before an interpreter it made was destroyed), and must never remove by an fd
                # closed, or reused for something else, meanwhile.
                held = os.dup(parent)
                try:
                    os.mkdir(run.name, 0o755, dir_fd=held)
                except OSError:
                    os.close(held)
                    raise
                run.dirs.append((held, -1))
                directory = os.open(run.name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=held)
                run.dirs[-1] = (held, directory)
                for file, value in self.writes:
                    _write_at(directory, file, value)
                run.procs.append(_open_mover(directory))
        except OSError:
            run.remove()
            raise
        self._watch_oom(run)
        return run

    def _watch_oom(self, run: RunCgroup) -> None:
        """v1: an eventfd that the kernel signals at the run's OOM kill (there is no oom.group: whoever
        reads it ends the run). v2 needs none (memory.oom.group kills the whole run)."""
        for _, directory in run.dirs:
            try:
                control = os.open("memory.oom_control", os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory)
            except FileNotFoundError:
                continue
            try:
                event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
                try:
                    _write_at(directory, "cgroup.event_control", f"{event} {control}")
                except OSError:
                    os.close(event)
                    return
                run.event = event
            finally:
                os.close(control)
            return

    def lent(self, replies: int) -> None:
        """The kept PID namespace whose init answers on `replies` is being lent to a run: so is its
        cgroup (`kept`), made now if it has none yet. OSError leaves nothing behind."""
        run = self.kept.get(replies)
        if run is None:
            self.kept[replies] = self.make()
        else:
            run.lend()

    def lost(self, replies: int) -> None:
        """The init answering on `replies` died (its namespace ended, and every process in it): the
        namespace's cgroup goes, at the zygote's next wake-up (`remove_doomed`)."""
        run = self.kept.pop(replies, None)
        if run is not None:
            self.doomed.append(run)

    def remove_doomed(self, patience: float = 0.0) -> None:
        """Try again to remove what is still waiting for its last process (for `patience` seconds)."""
        self.doomed = [run for run in self.doomed if not run.remove(patience)]

    def end(self, left: list[RunCgroup], patience: float) -> None:
        """When the zygote stops: every run cgroup, `left` of its runs too, once its processes are gone
        with their namespaces (what is still left then, the server removes with the parent)."""
        for run in [*left, *self.kept.values()]:
            if run not in self.doomed:
                self.doomed.append(run)
        self.kept.clear()
        self.remove_doomed(patience)

    def close(self) -> None:
        """Close the parents' fds (the zygote's end; the server removes the parents)."""
        for fd in self.parents:
            os.close(fd)
        self.parents = []
