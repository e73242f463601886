"""The system calls no run may make, tried by real runs in every mode (tests/unit/inrun/test_seccomp.py
reads the filters as data, as the kernel's classic BPF would).

A run that could make a user namespace of its own could mount a cgroup2 file system there, writable
to it, and kill the server through ``cgroup.kill``; io_uring and userfaultfd are kernel attack surface
no Python program here needs; inotify would show a run what others open and let it take every
instance of its uid; memfds, SysV IPC and raised socket buffers hold memory outside every limit.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runner.config import Config
from runner.execution.pool import Pool
from runner.inrun.bootstrap import OPEN_FILES
from runner.outcome import RunRequest, RunResult, Status
from tests.helpers import MODES, checked, in_mode

# --- the same in real runs -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=MODES)
async def mode_pool(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pool]:
    work_dir = tmp_path_factory.mktemp("seccomp-work")
    config = dataclasses.replace(
        Config.from_env({}), python=os.path.realpath(sys.executable), work_dir=str(work_dir), pool_size=1
    )
    async with Pool.open(in_mode(config, str(request.param)), reap_strays=True) as pool:
        yield pool
    assert list(Path(work_dir).iterdir()) == []


async def run(pool: Pool, code: str) -> RunResult:
    result = checked(await pool.run(RunRequest("5ecc0000", textwrap.dedent(code), 20.0)))
    assert result.status is Status.OK, result.to_text()
    return result


# Each call as a run would make it, through libc's syscall(): its errno's name, or "allowed".
TRY_CALLS = """
    import ctypes, errno, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    N = {"x86_64": dict(clone=56, unshare=272, setns=308, clone3=435, io_uring_setup=425, userfaultfd=323,
                        memfd_create=319, shmget=29, msgget=68, semget=64, inotify_init1=294, fanotify_init=300,
                        mount=165, kexec_load=246, finit_module=313, open_by_handle_at=304, mq_open=240,
                        mq_timedsend=242, pidfd_getfd=438),
         "aarch64": dict(clone=220, unshare=97, setns=268, clone3=435, io_uring_setup=425, userfaultfd=282,
                         memfd_create=279, shmget=194, msgget=186, semget=190, inotify_init1=26, fanotify_init=262,
                         mount=40, kexec_load=104, finit_module=273, open_by_handle_at=265, mq_open=180,
                         mq_timedsend=182, pidfd_getfd=438)}[os.uname().machine]
    params = ctypes.create_string_buffer(120)
    def attempt(name, *args):
        result = libc.syscall(N[name], *args)
        if result < 0:
            return errno.errorcode[ctypes.get_errno()]
        if name != "clone":
            os.close(result) if name not in ("unshare", "shmget", "msgget", "semget") else None
        return "allowed"
    CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWCGROUP = 0x10000000, 0x00020000, 0x02000000
    print("unshare(NEWUSER|NEWNS|NEWCGROUP)", attempt("unshare", CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP))
    print("clone(NEWUSER)", attempt("clone", CLONE_NEWUSER | 17, None, None, None, None))
    print("clone3", attempt("clone3", params, 88))
    own = os.open("/proc/self/ns/user", os.O_RDONLY)
    print("setns(user)", attempt("setns", own, CLONE_NEWUSER), "setns(any)", attempt("setns", own, 0))
    for name, args in [("io_uring_setup", (1, params)), ("userfaultfd", (0,)), ("memfd_create", (b"m", 0)),
                       ("shmget", (0, 1 << 20, 0o1600)), ("msgget", (0, 0o1600)), ("semget", (0, 1, 0o1600)),
                       ("inotify_init1", (0,)), ("fanotify_init", (0, 0)), ("kexec_load", (0, 0, None, 0)),
                       ("finit_module", (0, b"", 0)), ("open_by_handle_at", (0, None, 0)),
                       ("mount", (b"none", b"/tmp", b"tmpfs", 0, None)), ("mq_open", (b"q", 0o100 | 2, 0o600, None)),
                       # on a queue opened as a file of /dev/mqueue, which a plain run may see: any fd here
                       ("mq_timedsend", (os.open("/dev/null", os.O_WRONLY), b"m", 1, 0, None)),
                       ("pidfd_getfd", (os.pidfd_open(os.getpid()), 0, 0))]:
        print(name, attempt(name, *args))
    # A root run finds /dev/userfaultfd where it sees the host's /dev: its ioctl makes what the call would.
    try:
        device = os.open("/dev/userfaultfd", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        print("ioctl(USERFAULTFD_IOC_NEW) EPERM")  # no such device in its view
    else:
        made = libc.ioctl(device, 0xAA00, 0)
        print("ioctl(USERFAULTFD_IOC_NEW)", errno.errorcode[ctypes.get_errno()] if made < 0 else "allowed")
"""

REFUSED = """\
unshare(NEWUSER|NEWNS|NEWCGROUP) EPERM
clone(NEWUSER) EPERM
clone3 ENOSYS
setns(user) EPERM setns(any) EPERM
io_uring_setup EPERM
userfaultfd EPERM
memfd_create EPERM
shmget EPERM
msgget EPERM
semget EPERM
inotify_init1 EPERM
fanotify_init EPERM
kexec_load EPERM
finit_module EPERM
open_by_handle_at EPERM
mount EPERM
mq_open EPERM
mq_timedsend EPERM
pidfd_getfd EPERM
ioctl(USERFAULTFD_IOC_NEW) EPERM
"""


XATTRS = """\
import errno, os, shutil
with open("f", "w") as f:
    f.write("kept")
fd = os.open("f", os.O_RDONLY)
for name, path, follow in [("setxattr", "f", True), ("lsetxattr", "f", False), ("fsetxattr", fd, True)]:
    try:
        os.setxattr(path, "user.x", b"1" * 1000, follow_symlinks=follow)
        print(name, "allowed")
    except OSError as error:
        print(name, errno.errorcode[error.errno])
shutil.copy2("f", "g")  # goes on without them, as on a file system that keeps none
print(open("g").read())
"""


@pytest.mark.anyio
async def test_a_run_sets_no_extended_attribute_and_copies_files_all_the_same(mode_pool: Pool) -> None:
    # Found by a review: a session's tmpfs held 125 MB of them, outside its size, the sessions' memory
    # budget and every roll-back.
    said = (await run(mode_pool, XATTRS)).stdout.text
    assert said == "setxattr ENOTSUP\nlsetxattr ENOTSUP\nfsetxattr ENOTSUP\nkept\n", said  # EOPNOTSUPP


@pytest.mark.anyio
async def test_a_run_can_make_no_user_namespace_and_none_of_the_refused_calls(mode_pool: Pool) -> None:
    assert (await run(mode_pool, TRY_CALLS)).stdout.text == REFUSED


@pytest.mark.anyio
async def test_threads_processes_and_subprocesses_still_start_through_libc_s_fallback_to_clone(
    mode_pool: Pool,
) -> None:
    code = """
        import multiprocessing, subprocess, sys, threading
        done = []
        thread = threading.Thread(target=done.append, args=(1,))
        thread.start(); thread.join()
        child = subprocess.run([sys.executable, "-I", "-S", "-c", "print(2)"], capture_output=True, text=True)
        with multiprocessing.get_context("fork").Pool(2) as workers:
            squares = workers.map(abs, [-3, -4])
        print(done, child.stdout.strip(), squares)
    """
    assert (await run(mode_pool, code)).stdout.text == "[1] 2 [3, 4]\n"


@pytest.mark.anyio
async def test_a_run_s_sockets_keep_their_default_buffers_and_its_processes_256_open_files(mode_pool: Pool) -> None:
    # Before: 100 socket pairs, each asking for 64 MiB of send buffer, held 784 MiB of kernel memory
    # under a 256 MiB limit (the adversarial case "socket buffers asked for past the default are not
    # given" measures what they queue); and a run could open 20,000 of them.
    default = int(Path("/proc/sys/net/core/wmem_default").read_text())
    code = """
        import resource, socket
        pairs = []
        try:
            while True:
                pairs.append(socket.socketpair())
        except OSError as exc:
            stopped = exc.errno
        first = pairs[0][0]
        first.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 20)
        print(*resource.getrlimit(resource.RLIMIT_NOFILE), len(pairs), stopped,
              first.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
    """
    soft, hard, pairs, stopped, buffer = (await run(mode_pool, code)).stdout.text.split()
    assert (int(soft), int(hard)) == (OPEN_FILES, OPEN_FILES)
    assert OPEN_FILES // 2 - 8 <= int(pairs) <= OPEN_FILES // 2
    assert int(stopped) == errno.EMFILE
    assert int(buffer) == default  # asked for 64 MiB, which the kernel would have made 2 x net.core.wmem_max
