"""The C library through ctypes: the one handle every process of ours calls it with (runs, zygotes,
PID namespaces' inits, and the server's process controls, `runner.processes.procctl`).

Loaded once per process. In a zygote that is before its first fork: every forked run and init
inherits the handle and the functions resolved on it, where a handle made per call cost each of
them a dlopen and new function objects (and the pages these dirty, copied from the zygote). Where
there is no such function (not Linux), calls say so by returning False or raising OSError.
"""

from __future__ import annotations

import _imp  # always loaded (the import system's own); bound here, as a keeper forks no import runs
import ctypes
import errno
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

LINUX = sys.platform.startswith("linux")
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
PR_SET_NO_NEW_PRIVS = 38
CAP_KILL = 5
LINUX_CAPABILITY_VERSION_3 = 0x20080522
# What the in-run code calls: resolved now, not in every fork that calls it.
FUNCTIONS = (
    "capset",
    "malloc_trim",
    "mmap",
    "mount",
    "mprotect",
    "prctl",
    "sethostname",
    "sigaction",
    "setns",
    "syscall",
    "unshare",
)
PROT_READ, PROT_WRITE = 1, 2
MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS = 0x02, 0x10, 0x20


def _opened(kind: type[ctypes.CDLL], functions: tuple[str, ...]) -> ctypes.CDLL | None:
    try:
        lib = kind(None, use_errno=True)
    except OSError:
        return None
    for name in functions:
        try:
            getattr(lib, name)
        except AttributeError:
            continue  # not this platform's
    if "prctl" in functions and hasattr(lib, "prctl"):
        lib.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if "mmap" in functions and hasattr(lib, "mmap"):
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    if "mprotect" in functions and hasattr(lib, "mprotect"):
        lib.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if "mount" in functions and hasattr(lib, "mount"):
        lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return lib


LIBC = _opened(ctypes.CDLL, FUNCTIONS)
# For calls that must hold the GIL throughout (clone by system call: `namespaces.clone`; fork and
# CPython's own after-fork reinitialisation: `fork_bare`, `after_fork_child`).
PYLIBC = _opened(ctypes.PyDLL, ("syscall", "fork", "PyOS_AfterFork_Child"))


def checked(result: int, what: str) -> None:
    """OSError naming `what` with errno's reason unless `result` is 0."""
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> bool:
    """prctl(2); whether it succeeded (False where there is no prctl)."""
    if not LINUX or LIBC is None or not hasattr(LIBC, "prctl"):
        return False
    return int(LIBC.prctl(option, arg2, arg3, arg4, arg5)) == 0


def child_subreaper() -> bool:
    """Whether this process is a child subreaper (False where there is no prctl)."""
    if not LINUX or LIBC is None or not hasattr(LIBC, "prctl"):
        return False
    flag = ctypes.c_int(0)
    return int(LIBC.prctl(PR_GET_CHILD_SUBREAPER, ctypes.addressof(flag), None, 0, 0)) == 0 and flag.value != 0


def die_with(parent: int = 0, parent_end: int = -1) -> bool:
    """SIGKILL this process when its parent exits; exit now (status 1) if the parent is already gone.
    Whether the signal is set: False where there is no prctl (not Linux: nothing is checked either,
    and what the process starts is the next start's to kill, `leftovers`); OSError if prctl refuses.

    Gone: getppid() changed while the signal was set, or `parent`, a pid the caller was told (a plain
    run's server or zygote, the probe's server: one that may have died before this process could
    first ask), is no process any more. It need not be the parent: a `RUNNER_PYTHON` that is a
    wrapper starts python as its child (found by a review: compared with getppid(), a wrapper's probe
    exited at once, unsaid, and `auto` fell back from namespaces). 0, no pid told: the parent is
    whoever getppid() says, and the signal is set all the same (a caller that wants none, a sandboxed
    run, does not call this). A process in a PID namespace its parent is outside of gets 0 from
    getppid() whether the parent lives or not: there `parent_end` tells, this process's end of a
    socket pair whose other end only the parent holds, hung up once the parent has died (an exiting
    process's files are closed before its children are told: a parent that died too early for the
    signal has hung up by then). Forked children do not inherit the signal: a session's calls, forked
    by its anchor, are not killed when a call's process that forked them ends."""
    before = os.getppid()
    if not LINUX or LIBC is None or not hasattr(LIBC, "prctl"):
        return False
    checked(LIBC.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")  # SIGKILL
    if os.getppid() != before:
        os._exit(1)
    # The parent unchanged while the signal was set was alive then: only another process is looked at.
    if parent and parent != before:
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            try:  # noqa: SIM105  (contextlib is not imported in runs)
                os.write(2, b"the server (pid %d) is gone\n" % parent)
            except OSError:
                pass  # its reader, the server, is gone with it
            os._exit(1)
        except PermissionError:
            pass  # a process, another uid's: alive
    if parent_end >= 0:
        os.set_blocking(parent_end, False)
        try:
            said = os.read(parent_end, 1)  # the parent says nothing first: only its end's hang-up reads
        except BlockingIOError:
            return True
        if not said:
            os._exit(1)
    return True


def fork_bare() -> int:
    """fork(2) as os.fork does it (the GIL and the import lock held across it, so that no import is
    half-done in the child), but without CPython's at-fork hooks: neither the ``before`` and
    ``after_in_parent`` functions of os.register_at_fork run in this process, nor the audit hooks'
    "os.fork" event. For a process that must run no code but its own (a session's keeper, holding a
    state whose code registered such hooks). The child must call `after_fork_child` before anything
    else (it lets the import lock go). OSError if the fork fails."""
    if PYLIBC is None or not hasattr(PYLIBC, "fork"):
        raise OSError(errno.ENOSYS, "fork: no C library")
    _imp.acquire_lock()
    pid = int(PYLIBC.fork())
    if pid != 0:
        _imp.release_lock()
    if pid < 0:
        code = ctypes.get_errno() or errno.EAGAIN
        raise OSError(code, f"fork: {os.strerror(code)}")
    return pid


def after_fork_child() -> None:
    """In a child of `fork_bare`: what os.fork does in its child (the interpreter's locks and thread
    states made anew, the import lock let go, then the ``after_in_child`` functions of
    os.register_at_fork)."""
    if PYLIBC is not None and hasattr(PYLIBC, "PyOS_AfterFork_Child"):
        PYLIBC.PyOS_AfterFork_Child()


class _Sigaction(ctypes.Structure):
    """glibc's struct sigaction (Linux: the handler, a 1,024-bit mask, the flags, the restorer)."""

    _fields_ = (
        ("handler", ctypes.c_void_p),
        ("mask", ctypes.c_ulong * (1024 // (8 * ctypes.sizeof(ctypes.c_ulong)))),
        ("flags", ctypes.c_int),
        ("restorer", ctypes.c_void_p),
    )


SA_RESTART = 0x10000000
_byref = ctypes.byref  # bound at load: read as a session's call is sealed (`sealing`), ctypes may be the state's


def restarts(signum: int) -> bool:
    """Whether system calls a handler of `signum` interrupts restart (``signal.siginterrupt(n, False)``,
    SA_RESTART), which Python's signal.signal does not set (`sealing.unseal` sets it again)."""
    if LIBC is None or not hasattr(LIBC, "sigaction"):
        return False
    action = _Sigaction()
    if LIBC.sigaction(signum, None, _byref(action)) != 0:
        return False
    return bool(action.flags & SA_RESTART)


def make_private(start: int, length: int, prot: int) -> bool:
    """Put a private anonymous mapping, holding the same bytes, in place of the mapping at `start`
    (`length` bytes), with protection `prot` as it had: to the process nothing changes, but a process
    forked from it then gets a copy of those pages instead of sharing them. Whether it was done."""
    if LIBC is None or not hasattr(LIBC, "mmap") or not hasattr(LIBC, "mprotect"):
        return False
    if not prot & PROT_READ and LIBC.mprotect(start, length, PROT_READ) != 0:
        return False
    data = ctypes.string_at(start, length)
    placed = LIBC.mmap(start, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0)
    if placed != start:
        return False
    ctypes.memmove(start, data, length)
    return prot == PROT_READ | PROT_WRITE or LIBC.mprotect(start, length, prot) == 0


def trim_heap() -> bool:
    """malloc_trim(0): give the kernel back the pages of memory malloc holds free (what a parser
    freed, a DataFrame dropped). A fork copies a page-table entry for every page still mapped, free or
    not. Whether it released any (False where there is no malloc_trim)."""
    if LIBC is None or not hasattr(LIBC, "malloc_trim"):
        return False
    return int(LIBC.malloc_trim(0)) == 1


def set_dumpable(enabled: bool) -> bool:
    """Non-dumpable closes this process's /proc entries (environ, fd, mem, ...) and ptrace to other
    processes of the same uid."""
    return prctl(PR_SET_DUMPABLE, 1 if enabled else 0)


def privilege_dropper(*, bounding_set: bool = True, held: bool = True, kept: int = 0) -> Callable[[int | None], None]:
    """A function that drops privileges for good (Linux): its ctypes objects made now (in each fork
    they would cost ~0.8 ms of copied pages).

    `bounding_set`: empty the bounding set; `held`: set no_new_privs and drop every capability held.
    A namespaced zygote empties only its bounding set, once for all its forks (~40 prctl calls each).
    Given a `uid`, the function first becomes that host uid (and gid, with no supplementary groups):
    after the bounding set, which takes CAP_SETPCAP, and before the capabilities, since it takes
    CAP_SETUID; leaving uid 0 clears the rest of them anyway. `kept`: the capabilities (a mask of
    their bits) that stay effective and permitted, for a kept PID namespace's init that must kill
    processes of runs lent other uids (pidspaces.serve_as_init).
    """
    if not LINUX or LIBC is None or not hasattr(LIBC, "capset"):
        return _nothing_to_drop
    call, capset, get_errno = LIBC.prctl, LIBC.capset, ctypes.get_errno
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    # effective, permitted, inheritable x 2 words: empty but for `kept`
    data = (ctypes.c_uint32 * 6)(kept & 0xFFFFFFFF, kept & 0xFFFFFFFF, 0, kept >> 32, kept >> 32, 0)

    def drop(uid: int | None = None) -> None:
        cap = 0
        while bounding_set and (call(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0 or get_errno() == errno.EPERM):
            cap += 1  # EPERM: no CAP_SETPCAP (not root); EINVAL past the last capability
            if cap > 63:
                break
        if uid is not None:
            become_user(uid)
        if held:
            call(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            capset(header, data)

    return drop


def _nothing_to_drop(uid: int | None = None) -> None:
    """Where there is no capset (not Linux): no capability to drop, no uid to become."""


def become_user(uid: int) -> None:
    """Be host uid and gid `uid`, really, effectively and saved, in no supplementary group: OSError if
    the kernel refuses (the uid is not mapped in this user namespace, or there is no CAP_SETUID)."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
