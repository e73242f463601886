"""The system calls no run may make: seccomp filters, installed before any code of a run. Stdlib only.

Loaded by the bootstrap and the zygote (`bootstrap.load_siblings`) under ``-I -S``; the server
imports it for its tables only. A filter holds for the process that installs it and everything it forks or
starts, and nothing lifts it. The sets of rules:

- `EVERY_PROCESS`: what no process of a run needs and a hostile run could use against the host or
  against other runs: a user namespace of its own (in which it holds every capability and could mount
  a cgroup2 file system writable to it, with ``cgroup.kill`` over the server), io_uring and
  userfaultfd, by the call or by ``/dev/userfaultfd`` (kernel attack surface Docker's default profile
  also refuses), kernel modules and kexec, file handles, tracing other processes or taking their fds
  (bubblewrap's PID 1, under no filter of ours, would make any call it was made to), the kernel's
  keyrings (a uid's, so they outlive a run), inotify and fanotify (a run would see what others open,
  and could take every instance of its uid), and memory held by neither an address space nor a size
  limit: memfds, SysV shared memory, message queues and semaphore sets, POSIX message queues, and
  socket buffers raised past the default (a request for one is taken and ignored), and extended
  attributes (EOPNOTSUPP: a tmpfs holds them outside its size, and no roll-back puts them back). A namespaced zygote
  installs these once for all its forks: it still makes namespaces and mounts.
- `AFTER_SET_UP`: what only the making of a run's namespaces and view needs: mount(2) and the new mount
  API, pivot_root and setns, and a clone with CLONE_PARENT (the zygote's PID namespaces' inits are
  made so; a run's child cloned so would be its parent's, out of the run's own tree: in a session,
  the keeper's). A namespaced run installs these itself once its view is made; a spawned
  interpreter (plain, or in bubblewrap, which made its view before the exec) and a plain zygote
  install both sets at once (`WHOLE`).
- `NO_NETWORK`: internet sockets, for a sandboxed run of an isolated network, which has no network to
  use them on (`bootstrap.main`, the zygote's `Namespaced`); `PROXY_ONLY` in its place with egress
  (RUNNER_EGRESS_ALLOW): IPv4 sockets, for the server's proxy on the run's loopback, and no IPv6.

clone3(2) fails with ENOSYS (its flags are in memory a filter cannot read): glibc then falls back to
clone(2), whose flags it can. Every system call of another ABI (i386 or x32 on x86_64) is refused.
The programs are pure data (`program`), tested without processes against a reading of classic BPF.
"""

from __future__ import annotations

import errno
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from runner.inrun import libc
elif __package__:  # the server's import, as runner.inrun.seccomp (for its tables)
    from runner.inrun import libc
else:  # in a run: from this directory (`bootstrap.load_siblings`)
    import libc

SECCOMP_MODE_FILTER = 2
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
X32_SYSCALL_BIT = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_PARENT = 0x00008000
SOL_SOCKET = 1
# SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE, and SO_RCVLOWAT, which grows a TCP socket's
# receive buffer to match: the same on both machines.
SOCKET_BUFFER_OPTIONS = (7, 8, 32, 33, 18)
AF_INET, AF_INET6 = 2, 10
# ioctl(2) of /dev/userfaultfd that makes a userfaultfd without the system call (a root run has the device).
USERFAULTFD_IOC_NEW = 0xAA00
# Classic BPF: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_JMP|BPF_JGE|BPF_K, BPF_JMP|BPF_JSET|BPF_K,
# BPF_RET|BPF_K; offsets into struct seccomp_data.
LOAD, JUMP_EQUAL, JUMP_AT_LEAST, JUMP_ANY_BIT, RETURN = 0x20, 0x15, 0x35, 0x45, 0x06
NR, ARCH = 0, 4


def argument(index: int) -> int:
    """The offset of argument `index`'s low 32 bits (both machines are little-endian)."""
    return 16 + 8 * index


# Each call named in the rules and its number on x86_64 and on aarch64 (None: the machine has no such
# call, as aarch64 has no inotify_init), and each machine's AUDIT_ARCH_* and column.
CALLS: tuple[tuple[str, int | None, int | None], ...] = (
    ("ioctl", 16, 29),
    ("shmget", 29, 194),
    ("socket", 41, 198),
    ("setsockopt", 54, 208),
    ("clone", 56, 220),
    ("semget", 64, 190),
    ("msgget", 68, 186),
    ("ptrace", 101, 117),
    ("pivot_root", 155, 41),
    ("mount", 165, 40),
    ("umount2", 166, 39),
    ("init_module", 175, 105),
    ("delete_module", 176, 106),
    ("setxattr", 188, 5),
    ("lsetxattr", 189, 6),
    ("fsetxattr", 190, 7),
    ("mq_open", 240, 180),
    ("mq_timedsend", 242, 182),
    ("mq_timedreceive", 243, 183),
    ("mq_notify", 244, 184),
    ("mq_getsetattr", 245, 185),
    ("kexec_load", 246, 104),
    ("add_key", 248, 217),
    ("request_key", 249, 218),
    ("keyctl", 250, 219),
    ("inotify_init", 253, None),
    ("unshare", 272, 97),
    ("inotify_init1", 294, 26),
    ("perf_event_open", 298, 241),
    ("fanotify_init", 300, 262),
    ("open_by_handle_at", 304, 265),
    ("process_vm_readv", 310, 270),
    ("process_vm_writev", 311, 271),
    ("kcmp", 312, 272),
    ("setns", 308, 268),
    ("finit_module", 313, 273),
    ("memfd_create", 319, 279),
    ("kexec_file_load", 320, 294),
    ("bpf", 321, 280),
    ("userfaultfd", 323, 282),
    ("io_uring_setup", 425, 425),
    ("io_uring_enter", 426, 426),
    ("io_uring_register", 427, 427),
    ("open_tree", 428, 428),
    ("move_mount", 429, 429),
    ("fsopen", 430, 430),
    ("fsconfig", 431, 431),
    ("fsmount", 432, 432),
    ("fspick", 433, 433),
    ("clone3", 435, 435),
    ("pidfd_getfd", 438, 438),
    ("process_madvise", 440, 440),
    ("mount_setattr", 442, 442),
    ("memfd_secret", 447, 447),
    ("setxattrat", 463, 463),
    ("open_tree_attr", 467, 467),
)
MACHINES = {"x86_64": (0xC000003E, 1), "aarch64": (0xC00000B7, 2)}


# What a rule does with a call: refuse it (EPERM), say the kernel lacks it (ENOSYS), refuse it when
# it asks for a new user namespace (clone, unshare: flags in argument 0) or for entering one or any
# namespace at all (setns: its type in argument 1, 0 meaning any), take and ignore a request for
# socket buffers (setsockopt at SOL_SOCKET: they would hold kernel memory outside every limit), refuse
# the ioctl that makes a userfaultfd, or refuse an internet socket (socket: its family in argument 0);
# clone also when it asks for the caller's parent as the child's (CLONE_PARENT: glibc's fork,
# pthread_create and posix_spawn never pass it).
REFUSE, NO_SUCH_CALL, NO_NEW_USER_NAMESPACE, NO_USER_NAMESPACE_TO_ENTER, NO_NEW_USER_NAMESPACE_NOR_PARENT = (
    "refuse",
    "ENOSYS",
    "no new user namespace",
    "no user namespace to enter",
    "no new user namespace nor parent",
)
# What a file system that keeps no extended attributes says (EOPNOTSUPP): shutil's copy2 and others
# go on without them, where EPERM would fail the copy.
NOT_SUPPORTED = "EOPNOTSUPP"
IGNORE_BUFFER_SIZES, NO_USERFAULTFD_DEVICE, NO_INTERNET, NO_INTERNET_BUT_IPV4 = (
    "ignore socket buffer sizes",
    "no userfaultfd device",
    "no internet",
    "no internet but ipv4",
)
EVERY_PROCESS = {
    **dict.fromkeys(("add_key", "request_key", "keyctl"), REFUSE),
    "clone": NO_NEW_USER_NAMESPACE,
    "unshare": NO_NEW_USER_NAMESPACE,
    "setns": NO_USER_NAMESPACE_TO_ENTER,
    "clone3": NO_SUCH_CALL,
    **dict.fromkeys(("io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd"), REFUSE),
    "ioctl": NO_USERFAULTFD_DEVICE,
    **dict.fromkeys(("kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module"), REFUSE),
    **dict.fromkeys(("open_by_handle_at", "bpf", "perf_event_open"), REFUSE),
    # bubblewrap's PID 1, in a run's sight and of its uid, is under no filter of ours: a run that could
    # trace it could make it call anything, a user namespace included, or take its fds.
    **dict.fromkeys(("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "process_madvise"), REFUSE),
    "kcmp": REFUSE,
    **dict.fromkeys(("inotify_init", "inotify_init1", "fanotify_init"), REFUSE),
    **dict.fromkeys(("memfd_create", "memfd_secret", "shmget", "msgget", "semget", "mq_open"), REFUSE),
    # A queue is also opened as a file of the mqueue file system, where the host mounts one at
    # /dev/mqueue (systemd does) and a plain run sees it (found by a review: 10 messages sent to a queue
    # made by open(), which outlived the run): nothing can be put in one, or taken out.
    **dict.fromkeys(("mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr"), REFUSE),
    "setsockopt": IGNORE_BUFFER_SIZES,
    # Extended attributes: kernel memory a tmpfs holds outside its size and every budget of ours (found
    # by a review: four sessions kept 125 MB each, `statvfs` saying 0 used, until the anchor was
    # OOM-killed), and state no roll-back puts back. No data work needs them.
    **dict.fromkeys(("setxattr", "lsetxattr", "fsetxattr", "setxattrat"), NOT_SUPPORTED),
}
AFTER_SET_UP = {
    **dict.fromkeys(
        (
            "mount",
            "umount2",
            "pivot_root",
            "setns",
            "mount_setattr",
            "open_tree",
            "open_tree_attr",
            "move_mount",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
        ),
        REFUSE,
    ),
    # A run's clone may not make its child its parent's (found by a review: a session call's
    # CLONE_PARENT child was the keeper's, which the sweeps of what a call leaves spared); nor, as in
    # EVERY_PROCESS, a user namespace.
    "clone": NO_NEW_USER_NAMESPACE_NOR_PARENT,
}
WHOLE = {**EVERY_PROCESS, **AFTER_SET_UP}  # setns refused whatever it enters
# A sandboxed run of an isolated network (RUNNER_SANDBOX_NETWORK=isolated) has no use for an internet
# socket (in bubblewrap's sandbox only its own loopback), and a TCP socket's buffers grow by themselves
# to tcp_rmem and tcp_wmem, megabytes each, outside every limit of the run.
NO_NETWORK = {"socket": NO_INTERNET}
# Egress (RUNNER_EGRESS_ALLOW): the same namespace, whose loopback holds the server's proxy, reached over
# IPv4 (127.0.0.1); IPv6 still refused. A TCP socket's buffers are bounded there by the run's cgroup
# (`memory.kmem.tcp.limit_in_bytes` on v1; v2 counts them in `memory.max`).
PROXY_ONLY = {"socket": NO_INTERNET_BUT_IPV4}

Instruction = tuple[int, int, int, int]


def program(machine: str, rules: dict[str, str]) -> list[Instruction]:
    """The filter for `rules` on `machine` (an `os.uname().machine`): (code, jump if true, jump if
    false, constant) as sock_filter has them. KeyError for a machine not in MACHINES."""
    arch, column = MACHINES[machine]
    numbers: dict[str, int] = {}
    for name, *on in CALLS:
        number = on[column - 1]
        if number is not None:
            numbers[name] = number

    def calls(action: str) -> list[int]:
        return [numbers[name] for name, wanted in rules.items() if wanted == action and name in numbers]

    branches = (
        NO_SUCH_CALL,
        NOT_SUPPORTED,
        NO_NEW_USER_NAMESPACE,
        NO_USER_NAMESPACE_TO_ENTER,
        NO_NEW_USER_NAMESPACE_NOR_PARENT,
        IGNORE_BUFFER_SIZES,
        NO_USERFAULTFD_DEVICE,
        NO_INTERNET,
        NO_INTERNET_BUT_IPV4,
    )
    lines: list[tuple[Any, ...] | str] = [
        (LOAD, 0, 0, ARCH),
        (JUMP_EQUAL, 0, "refuse", arch),
        (LOAD, 0, 0, NR),
        (JUMP_AT_LEAST, "refuse", 0, X32_SYSCALL_BIT),
        *((JUMP_EQUAL, "refuse", 0, number) for number in calls(REFUSE)),
        *((JUMP_EQUAL, label, 0, number) for label in branches for number in calls(label)),
        (RETURN, 0, 0, RET_ALLOW),
        "no new user namespace",
        (LOAD, 0, 0, argument(0)),
        (JUMP_ANY_BIT, "refuse", "allow", CLONE_NEWUSER),
        "no user namespace to enter",
        (LOAD, 0, 0, argument(1)),
        (JUMP_EQUAL, "refuse", 0, 0),
        (JUMP_ANY_BIT, "refuse", "allow", CLONE_NEWUSER),
        "no new user namespace nor parent",
        (LOAD, 0, 0, argument(0)),
        (JUMP_ANY_BIT, "refuse", "allow", CLONE_NEWUSER | CLONE_PARENT),
        "ignore socket buffer sizes",
        (LOAD, 0, 0, argument(1)),
        (JUMP_EQUAL, 0, "allow", SOL_SOCKET),
        (LOAD, 0, 0, argument(2)),
        *((JUMP_EQUAL, "ignore", 0, option) for option in SOCKET_BUFFER_OPTIONS),
        (RETURN, 0, 0, RET_ALLOW),
        "no userfaultfd device",
        (LOAD, 0, 0, argument(1)),
        (JUMP_EQUAL, "refuse", "allow", USERFAULTFD_IOC_NEW),
        "no internet",
        (LOAD, 0, 0, argument(0)),
        (JUMP_EQUAL, "refuse", 0, AF_INET),
        (JUMP_EQUAL, "refuse", "allow", AF_INET6),
        "no internet but ipv4",
        (LOAD, 0, 0, argument(0)),
        (JUMP_EQUAL, "refuse", "allow", AF_INET6),
        "allow",
        (RETURN, 0, 0, RET_ALLOW),
        "refuse",
        (RETURN, 0, 0, RET_ERRNO | errno.EPERM),
        "ENOSYS",
        (RETURN, 0, 0, RET_ERRNO | errno.ENOSYS),
        "EOPNOTSUPP",
        (RETURN, 0, 0, RET_ERRNO | errno.EOPNOTSUPP),
        "ignore",
        (RETURN, 0, 0, RET_ERRNO | 0),  # the call returns 0, as if done
    ]
    return _assemble(lines)


def _assemble(lines: list[tuple[Any, ...] | str]) -> list[Instruction]:
    """Labels (strings) out, jumps to them as the forward offsets classic BPF takes."""
    at: dict[str, int] = {}
    instructions: list[tuple[Any, ...]] = []
    for line in lines:
        if isinstance(line, str):
            at[line] = len(instructions)
        else:
            instructions.append(line)

    def offset(target: int | str, index: int) -> int:
        if isinstance(target, int):
            return target
        jump = at[target] - index - 1
        if not 0 <= jump <= 255:
            raise ValueError(f"a jump to {target!r} does not fit classic BPF")
        return jump

    return [(code, offset(yes, i), offset(no, i), k) for i, (code, yes, no, k) in enumerate(instructions)]


class Filter:
    """A filter ready to install: its ctypes objects made once (in the zygote: for every fork to
    install without making its own, which would cost it copied pages). None of it where the machine
    is not in MACHINES or this is not Linux: `install` then does nothing."""

    __slots__ = ("_prctl", "_program")

    def __init__(self, rules: dict[str, str]) -> None:
        self._program: Any = None
        self._prctl: Any = None
        machine = os.uname().machine
        if not sys.platform.startswith("linux") or machine not in MACHINES:
            return
        import ctypes

        class SockFilter(ctypes.Structure):
            _fields_ = [
                ("code", ctypes.c_uint16),
                ("jt", ctypes.c_uint8),
                ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32),
            ]

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

        instructions = program(machine, rules)
        filters = (SockFilter * len(instructions))(*(SockFilter(*op) for op in instructions))
        self._program = (SockFprog(len(instructions), filters), filters)  # the array lives as long as the fprog
        self._prctl = libc.LIBC.prctl if libc.LIBC is not None else None

    def install(self) -> None:
        """On this process and all it forks or starts; needs no_new_privs or CAP_SYS_ADMIN. OSError if
        the kernel refuses."""
        if self._program is None or self._prctl is None:
            return
        import ctypes

        if self._prctl(libc.PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(self._program[0]), 0, 0) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"seccomp filter: {os.strerror(code)}")
