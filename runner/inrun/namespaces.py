"""Linux namespaces for forked runs: the system calls the namespaced fork server needs. Stdlib only.

Loaded by the zygote (``zygote.py``) under ``-I -S``; the server imports it for its constants only.
Python 3.11 has no ``os.unshare`` or ``os.setns``, and no Python has ``mount``, ``mount_setattr``,
``sethostname`` or a ``clone`` with namespace flags, so they are called through libc (`libc`);
``os.unshare`` and ``os.setns`` are used where the interpreter has them (3.12+).

Who calls what (see zygote.py): the zygote enters a user namespace once, if it lacks
CAP_SYS_ADMIN, makes the part of the view that runs share in a mount namespace of its own
(`prepare_shared_view`) and the PID namespace that runs' are made in (pidspaces.py). For
each run it lends a kept PID namespace and forks the run into it; the run enters the network
namespace lent with it (networks.py), makes its own mount, IPC and UTS namespaces (`unshare` of
`Isolation.unshared`), and calls `name_host` and `make_private_view`, all before its code can arrive.
"""

from __future__ import annotations

import ctypes
import os
import signal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from runner.inrun import libc
elif __package__:  # the server's import, as runner.inrun.namespaces (for its constants)
    from runner.inrun import libc
else:  # in the zygote: from this directory (`bootstrap.load_siblings`)
    import libc

CLONE_PARENT = 0x00008000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

# mount_setattr(2): Linux 5.12+, the same number on every architecture but alpha.
SYS_MOUNT_SETATTR = 442
MOUNT_ATTR_RDONLY = 0x1
AT_FDCWD = -100
AT_RECURSIVE = 0x8000

CAP_SYS_ADMIN = 21

HOSTNAME = b"sandbox"
# The run's private, size-limited file systems: its working directory (and HOME, TMPDIR) is /tmp.
# /dev/shm is made in the run's own /dev, which holds only these devices (as bubblewrap's --dev):
# a root run must not find the host's disks there.
PRIVATE_DIRECTORIES = ("/tmp", "/run")
# /run holds sockets and pid files, if anything: a small tmpfs, so that a run cannot pin three times
# RUNNER_SANDBOX_TMP_MB of memory that no limit of its own counts. bubblewrap's runs get the same (sandbox.py).
RUN_BYTES = 1 << 20
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEVICE_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)
WORKDIR = "/tmp"
# A run's /proc is read-only whole: much of it is not per-namespace (/proc/sys, /proc/sysrq-trigger,
# /proc/pressure, ...), and a root run could write the host's kernel settings through it. What it would
# show of the host, these are covered by an empty file (/dev/null): the kernel's keyrings (whose calls
# no run may make, seccomp.py) list every key the reader could view, with owners and descriptions.
# The same for bubblewrap (sandbox.bwrap_argv).
PROC_COVERED = ("keys", "key-users")
# Marks a file to hide among the zygote's KEEP arguments (which are absolute paths, so never start so).
HIDE_PREFIX = "!"
# Marks a host path the view holds, bound read-only at the same place (a link is made again instead).
BIND_PREFIX = "+"
# Names the block of host uids runs are lent (`Isolation.uids`).
UIDS_OPTION = "uids="
# Names how many kept PID namespaces the zygote may have at once (`Isolation.spaces`).
SPACES_OPTION = "spaces="
# Names the port of the server's egress proxy on each run's loopback (`Isolation.egress_port`).
EGRESS_OPTION = "egress="
# Names the probe's parent, the server, right after ``--probe`` (zygote.py): the probe dies with it.
PARENT_OPTION = "parent="
# Where the zygote builds the view's root before it pivots into it: a tmpfs over this directory of
# its own mount namespace (what is bound from under it was opened first).
NEW_ROOT = "/tmp"
# The view's own directories: mount points, and /sys empty (the host's is not the run's to read).
VIEW_DIRECTORIES = ("/dev", "/proc", "/run", "/sys", "/tmp")
# pivot_root(2) by number; umount2's flag that detaches the old root at once.
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine, -1)
MNT_DETACH = 0x2


class Isolation:
    """What each run gets, from the zygote's arguments ``TMP_BYTES NETWORK KEEP...``."""

    __slots__ = (
        "binds",
        "bound_back",
        "cgroup_args",
        "cgroups",
        "egress_port",
        "hide",
        "mounts",
        "network",
        "proc_covers",
        "spaces",
        "tmp_bytes",
        "tmpfs",
        "uids",
        "unshared",
    )

    def __init__(self, args: list[str]) -> None:
        self.tmp_bytes = int(args[0])  # the size of each private tmpfs
        # The namespaces a run makes for itself.
        self.unshared = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS
        # Unless NETWORK is "shared", a network namespace that is not the host's: the one its kept PID
        # namespace's init made, lent again only while nothing of an earlier run can be found in it
        # (networks.py). One made for each run cost about 1 ms of the machine's CPU (docs/performance.md).
        self.network = args[1] == "isolated"
        self.bound_back = [arg for arg in args[2:] if arg.startswith("/")]  # see make_private_view
        # What of the host the view holds (prepare_shared_view): nothing else of it is there. What is
        # bound back must be in the view to begin with.
        self.binds = [arg[len(BIND_PREFIX) :] for arg in args[2:] if arg.startswith(BIND_PREFIX)]
        self.binds += [path for path in self.bound_back if not any(within(path, held) for held in self.binds)]
        # What of the server's no run may read (the HTTP tokens): a file covered by an empty one, a
        # directory by an empty tmpfs.
        self.hide = [arg[len(HIDE_PREFIX) :] for arg in args[2:] if arg.startswith(HIDE_PREFIX)]
        # ``uids=FIRST-LAST``: the host uids a root server's runs are lent, one each (pidspaces.py); none:
        # runs keep the zygote's.
        self.uids: list[int] = []
        # ``spaces=N``: the kept PID namespaces the zygote may have at once (pidspaces.py); one if untold.
        self.spaces = 1
        # ``egress=PORT`` (RUNNER_EGRESS_ALLOW, an isolated network only): each kept network namespace's init
        # listens on its loopback's PORT, and each run hands the server's proxy a copy before its code
        # (`wire.hand_over_listener`); 0: none.
        self.egress_port = 0
        for arg in args[2:]:
            if arg.startswith(UIDS_OPTION):
                first, last = (int(part) for part in arg[len(UIDS_OPTION) :].split("-"))
                self.uids = list(range(first, last + 1))
            elif arg.startswith(SPACES_OPTION):
                self.spaces = int(arg[len(SPACES_OPTION) :])
            elif arg.startswith(EGRESS_OPTION) and self.network:
                self.egress_port = int(arg[len(EGRESS_OPTION) :])
        # Each run's own cgroup (cgroups.py): the parents and limits (``cgroup=`` tokens), and the parents
        # opened by the zygote before it pivots into a view without /sys. A run placed in its cgroup
        # makes a cgroup namespace of its own too, so that /proc/self/cgroup shows it at "/".
        self.cgroup_args = [arg for arg in args[2:] if arg.startswith("cgroup")]
        self.cgroups: Any = None
        if self.cgroup_args:
            self.unshared |= CLONE_NEWCGROUP
        # mount(2)'s arguments for each of a run's tmpfs mounts, encoded once, and their paths
        # (prepare_shared_view).
        self.mounts: list[tuple[bytes, bytes, bytes, int, bytes]] = []
        self.tmpfs: tuple[str, ...] = ()
        # What of a run's /proc is covered by /dev/null (prepare_shared_view).
        self.proc_covers: list[bytes] = []


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


# libc's handles, loaded once in the zygote (`libc.py`).
_LIBC: Any = libc.LIBC
_PYLIBC: Any = libc.PYLIBC
# clone(2) by number: the flags come first on both, and every other argument here is 0.
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine, -1)

_checked = libc.checked


# Looked up once: on 3.11, getattr(os, "setns", None) raises and catches an AttributeError inside, whose
# making writes to pages of the zygote's that each run (and the zygote, twice per fork) then copies.
_NATIVE_SETNS: Any = getattr(os, "setns", None)
_NATIVE_UNSHARE: Any = getattr(os, "unshare", None)


def setns(fd: int, kind: int) -> None:
    """setns(2): os.setns where the interpreter has it, libc's otherwise."""
    if _NATIVE_SETNS is not None:
        _NATIVE_SETNS(fd, kind)
    else:
        _checked(_LIBC.setns(fd, kind), "setns")


def unshare(flags: int) -> None:
    """unshare(2): os.unshare where the interpreter has it, libc's otherwise."""
    if _NATIVE_UNSHARE is not None:
        _NATIVE_UNSHARE(flags)
    else:
        _checked(_LIBC.unshare(flags), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2); OSError naming the target if it fails."""
    _checked(
        _LIBC.mount(
            None if source is None else source.encode(),
            target.encode(),
            None if fstype is None else fstype.encode(),
            ctypes.c_ulong(flags),
            None if data is None else data.encode(),
        ),
        f"mount {target}",
    )


def make_read_only(path: str, *, recursive: bool = True) -> None:
    """The mount at `path` read-only, and every mount below it unless not `recursive`, in one call
    (mount_setattr, Linux 5.12+).

    Only adds the flag: the flags a user namespace may not clear (nosuid, nodev, noexec of the
    host's mounts) stay as they are.
    """
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    _checked(
        _LIBC.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr), ctypes.sizeof(attr)),
        f"mount_setattr {path}",
    )


def has_cap_sys_admin() -> bool:
    """Whether this process may create namespaces and mount without a user namespace of its own."""
    with open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith(b"CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    return False


def require_no_privileges() -> None:
    """OSError unless this process holds no capability, has no_new_privs set and is under a seccomp
    filter (seccomp.py's, inherited from the zygote): what a namespaced run must hold
    before its code may come (the zygote's capabilities were every one over the namespaces).

    Read with os.read and looked up by name, not through a file object and a dict of every line: on
    each run's path, where that cost 0.35 ms of a freshly forked interpreter's CPU against 0.18 ms."""
    fd = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
    try:
        status = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    held = [
        name.decode() for name in (b"CapPrm", b"CapEff", b"CapBnd", b"CapAmb") if int(_field(status, name, b"1"), 16)
    ]
    if held or _field(status, b"NoNewPrivs", b"0") != b"1":
        raise OSError(f"capabilities not dropped: {held or 'no_new_privs unset'}")
    if _field(status, b"Seccomp", b"0") != b"2":
        raise OSError("no seccomp filter: the system calls no run may make are open")


def _field(status: bytes, name: bytes, missing: bytes) -> bytes:
    """The value of field `name` in the text of /proc/PID/status, stripped; `missing` if it has none."""
    at = status.find(b"\n" + name + b":")
    if at < 0:
        return missing
    start = at + len(name) + 2
    end = status.find(b"\n", start)
    return status[start : end if end >= 0 else len(status)].strip() or missing


def enter_user_namespace() -> None:
    """Become the owner of a new user namespace, keeping the same uid and gid inside.

    Gives this process (and what it forks) every capability over the namespaces it creates from
    now on, and none over anything else. Called before the process makes itself non-dumpable:
    the maps are written through its own /proc entries, which then belong to root.
    """
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as proc_file:
            proc_file.write(text)


def clone(namespaces: int) -> int:
    """clone(2) with these CLONE_NEW* flags, as fork: 0 in the child, its pid in the parent.

    The raw system call skips glibc's and CPython's fork handlers (0.2-0.3 ms of a child's CPU): the
    caller must be single-threaded (the zygote is), and the child must not use what they would have
    reset (the thread id glibc caches for raise() and recursive locks). Its children here are a kept
    PID namespace's maker and init (pidspaces.py): the init sets signal dispositions and rlimits, drops
    its capabilities (ctypes), sends its pid and namespace, then only reads, writes, kills and sleeps;
    a run is forked with os.fork, complete. PyDLL keeps the GIL held across the call.
    """
    pid = _PYLIBC.syscall(_SYS_CLONE, namespaces | signal.SIGCHLD, None, None, None, None)
    if pid < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"clone: {os.strerror(code)}")
    return int(pid)


def name_host() -> None:
    """The UTS namespace's host name: the run's own, not the server's."""
    _checked(_LIBC.sethostname(HOSTNAME, len(HOSTNAME)), "sethostname")


def prepare_shared_view(isolation: Isolation) -> None:
    """Once, in the zygote: the part of every run's view that runs can share, in a mount namespace of
    the zygote's own that each run's is then copied from.

    Default-deny: the root is a new tmpfs that holds only `isolation.binds` (the interpreter, the
    libraries, the package environment, as the server worked them out), bound read-only at their own
    paths, an /etc made for runs (`etc_files`), the host's
    /proc for the zygote's own use (each run mounts its own over it), an empty /sys, and a read-only
    /dev of a few harmless devices. Nothing of /home, /root, /var, /srv, /opt or the rest of /etc.
    Everything read-only, nothing propagating to the host or back. What must be a run's alone (its
    tmpfs mounts, a /proc of its PID namespace) `make_private_view` adds in the copy. The zygote
    writes nothing to the host's file system in this mode.
    """
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Looked up on the host's /proc: what this kernel lacks, no run's /proc has.
    isolation.proc_covers = [b"/proc/" + name.encode() for name in PROC_COVERED if os.path.exists("/proc/" + name)]
    sources = _open_binds(isolation.binds)
    links = [(path, os.readlink(path)) for path, _ in sources if os.path.islink(path)]
    proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    devices = _open_devices()
    try:
        mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=1048576,mode=755,nr_inodes=4096")
        for directory in VIEW_DIRECTORIES:
            os.makedirs(NEW_ROOT + directory, 0o755, exist_ok=True)
        for path, target in links:
            os.makedirs(os.path.dirname(NEW_ROOT + path), 0o755, exist_ok=True)
            os.symlink(target, NEW_ROOT + path)
        linked = {path for path, _ in links}
        for path, fd in sources:
            if path not in linked:
                try:
                    _bind_into(NEW_ROOT + path, fd)
                except OSError as exc:  # the start-up probe says this, and the server refuses to start
                    raise OSError(exc.errno, f"the runs' view cannot hold {path}: {exc.strerror}") from exc
        _bind_into(NEW_ROOT + "/proc", proc)
        _write_etc(NEW_ROOT + "/etc", isolation.uids)
        _make_dev(NEW_ROOT + "/dev", devices)
    finally:
        for _, fd in (*sources, *devices, ("/proc", proc)):
            os.close(fd)
    _pivot_into(NEW_ROOT)
    for path in isolation.hide:  # what of the server a bind holds after all
        if os.path.isdir(path):
            flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
            mount("tmpfs", path, "tmpfs", flags, "size=4096,mode=755,nr_inodes=4")
        elif os.path.exists(path):
            mount("/dev/null", path, None, MS_BIND)
    # Read-only, each mount of the view: the root (and its /etc), every bind with what is below it,
    # /proc, and /dev itself; its devices (and each run's /dev/shm) stay usable.
    make_read_only("/", recursive=False)
    for path in (*(path for path, _ in sources if path not in linked), "/proc"):
        make_read_only(path)
    make_read_only("/dev", recursive=False)
    flags = MS_NOSUID | MS_NODEV
    for directory in (*PRIVATE_DIRECTORIES, "/dev/shm"):
        size = RUN_BYTES if directory == "/run" else isolation.tmp_bytes
        isolation.mounts.append((b"tmpfs", directory.encode(), b"tmpfs", flags, _tmpfs_options(size).encode()))
    isolation.tmpfs = tuple(target.decode() for _, target, *_ in isolation.mounts)


def etc_files(runs: list[tuple[int, int]]) -> dict[str, str]:
    """The view's /etc: a user database that names root, nobody and the runs' user, `sandbox`, at each
    of `runs`' (uid, gid) (the server's, which its runs keep, or every uid a root server's runs are
    lent), localhost, and name lookups in these files, then DNS."""
    users = ["root:x:0:0:root:/root:/usr/sbin/nologin", "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"]
    groups = ["root:x:0:", "nogroup:x:65534:"]
    for uid, gid in runs:
        if uid not in (0, 65534):
            users.append(f"sandbox:x:{uid}:{gid}:sandbox:/tmp:/usr/sbin/nologin")
        if gid not in (0, 65534):
            groups.append(f"sandbox:x:{gid}:")
    return {
        "passwd": "\n".join(users) + "\n",
        "group": "\n".join(groups) + "\n",
        "hosts": "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        # dns: where runs keep the server's network (and its resolv.conf); with none it finds nothing.
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    }


def _write_etc(etc: str, uids: list[int]) -> None:
    os.makedirs(etc, 0o755, exist_ok=True)
    runs = [(uid, uid) for uid in uids] or [(os.getuid(), os.getgid())]
    for name, text in etc_files(runs).items():
        path = os.path.join(etc, name)
        if not os.path.lexists(path):  # a bind of the host's (ld.so.cache, localtime) is kept
            with open(path, "w", encoding="utf-8") as etc_file:
                etc_file.write(text)


def _open_binds(paths: list[str]) -> list[tuple[str, int]]:
    """Each path to bind, opened (O_PATH, a link itself), but those this zygote may not reach: what it
    cannot open, neither could it nor its runs read (a pyenv under a /root of mode 0700, for a zygote
    of another uid, which then runs on the system's standard library). A path that is not there is an
    error: the server found it at start."""
    opened = []
    for path in paths:
        try:
            opened.append((path, os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)))
        except PermissionError:
            continue
    return opened


def within(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or below it (both absolute, normalised)."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _bind_into(target: str, fd: int) -> None:
    """Bind what `fd` (O_PATH) names at `target` in the view being built, making its mount point."""
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(target, 0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
    mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)


def _pivot_into(root: str) -> None:
    """Make `root` this mount namespace's root, and the old one gone from it."""
    old = root + "/.old-root"
    os.mkdir(old, 0o700)
    _checked(_LIBC.syscall(_SYS_PIVOT_ROOT, root.encode(), old.encode()), "pivot_root")
    os.chdir("/")
    _checked(_LIBC.umount2(b"/.old-root", MNT_DETACH), "umount2 /.old-root")
    os.rmdir("/.old-root")


def make_private_view(isolation: Isolation) -> None:
    """In a run's copy of the zygote's mount namespace: a private tmpfs on each of PRIVATE_DIRECTORIES
    and /dev/shm, a /proc of the run's PID namespace. Called by the run, before its code can arrive.

    `isolation.bound_back`: directories under a private one that must stay visible (an interpreter
    installed under /tmp), bound back read-only from the view underneath.
    """
    kept = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)) for path in isolation.bound_back]
    try:
        for source, target, fstype, flags, options in isolation.mounts:
            _checked(_LIBC.mount(source, target, fstype, flags, options), f"mount {target.decode()}")
        for path, fd in kept:
            os.makedirs(path, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            make_read_only(path)
    finally:
        for _, fd in kept:
            os.close(fd)
    mount("proc", "/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for cover in isolation.proc_covers:
        _checked(_LIBC.mount(b"/dev/null", cover, None, MS_BIND, None), f"mount {cover.decode()}")


def _tmpfs_options(size: int) -> str:
    # Inodes bounded too: they take kernel memory that the size does not count.
    return f"size={size},mode=1777,nr_inodes={max(size // 4096, 64)}"


def _open_devices() -> list[tuple[str, int]]:
    """The host's harmless devices, opened (O_PATH) to be bound into the view's /dev."""
    return [
        (name, os.open("/dev/" + name, os.O_PATH | os.O_CLOEXEC)) for name in DEVICES if os.path.exists("/dev/" + name)
    ]


def _make_dev(dev: str, devices: list[tuple[str, int]]) -> None:
    """At `dev`, the view's /dev: a tmpfs of the few harmless `devices` (O_PATH, bound from the
    host's), the usual links, and a directory for each run's /dev/shm."""
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=65536,mode=755,nr_inodes=64")
    for name, fd in devices:
        os.close(os.open(os.path.join(dev, name), os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o666))
        mount(f"/proc/self/fd/{fd}", os.path.join(dev, name), None, MS_BIND)
    for name, target in DEVICE_LINKS:
        os.symlink(target, os.path.join(dev, name))
    os.mkdir(os.path.join(dev, "shm"), 0o1777)
