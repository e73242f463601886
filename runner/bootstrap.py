"""The first code every run interpreter executes: stdlib only, applies the limits before any user code.

Started as ``python -I -S -X utf8 bootstrap.py WORKDIR CPU AS NPROC FSIZE`` with the run's pipes on
fds 0-2 and the code pipe on fd 3. It closes every other inherited fd, enters WORKDIR, applies the
rlimits, reports readiness as one line on stdout (before any user output can exist), then waits for
the code on fd 3 (framed: its byte count and a newline first), closes it and runs the code as
``__main__``. This file must not import the
``runner`` package: it runs under ``-I -S`` with nothing but the standard library.
"""

from __future__ import annotations

import atexit
import errno
import linecache
import os
import resource
import signal
import sys
import traceback
import types

# Every import here is paid by every run interpreter before it is ready: typing, contextlib and the
# zygote's socket modules stay out of it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import NoReturn

CODE_FD = 3
FILENAME = "<run_python>"
READY_PREFIX = b"\x00runner-ready"
MAX_FD = 1 << 20
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
LINUX_CAPABILITY_VERSION_3 = 0x20080522


def apply_limits(cpu: int, address_space: int, nproc: int, fsize: int) -> list[str]:
    """Apply every rlimit it can; return the names of those the OS refused (e.g. RLIMIT_AS on macOS)."""
    # CPU hard sits one second above soft: SIGXCPU at soft, SIGKILL at hard if code catches SIGXCPU.
    wanted = [
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_CPU", cpu, cpu + 1),
        ("RLIMIT_AS", address_space, address_space),
        ("RLIMIT_NPROC", nproc, nproc),
        ("RLIMIT_FSIZE", fsize, fsize),
    ]
    refused = []
    for name, soft, hard in wanted:
        which = getattr(resource, name, None)
        if which is None:
            refused.append(name)
            continue
        try:
            _, current_hard = resource.getrlimit(which)
            if current_hard != resource.RLIM_INFINITY:
                # An unprivileged process can only lower its hard limit.
                hard = min(hard, current_hard)
                soft = min(soft, hard)
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            refused.append(name)
    return refused


def drop_privileges() -> None:
    """No capabilities and no way to regain any (Linux): a run as root then cannot raise its own hard
    limits (CAP_SYS_RESOURCE), read or trace the server (CAP_SYS_PTRACE), or bypass file permissions."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        cap = 0
        while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0 or ctypes.get_errno() == errno.EPERM:
            cap += 1  # EPERM: no CAP_SETPCAP (not root); EINVAL past the last capability
            if cap > 63:
                break
        header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
        data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2 words, all empty
        libc.capset(header, data)
    except (OSError, AttributeError):
        pass


def make_undumpable() -> None:
    """Close this process's /proc entries and ptrace to other processes of the same uid (Linux).

    A pre-spawned interpreter waits for its code while processes left behind by earlier runs may
    still live under the same uid; without this they could open /proc/<pid>/fd/1 of the next run
    and write into its output.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def frame_code(code: bytes) -> bytes:
    """What the server writes on the code pipe: the byte count, a newline, the code."""
    return b"%d\n" % len(code) + code


def read_code() -> bytearray | None:
    """Read the code the server framed with `frame_code`; None if the pipe closed before all of it came.

    The count lets the run start as soon as the last byte arrives (waiting for the server to close
    the pipe would cost a second wake-up), and the code is read into one buffer of its size.
    """
    head = b""
    while b"\n" not in head:
        chunk = os.read(CODE_FD, 64)
        if not chunk:
            os.close(CODE_FD)
            return None
        head += chunk
    count, _, first = head.partition(b"\n")
    code = bytearray(int(count))
    got = min(len(first), len(code))
    code[:got] = first[:got]
    view = memoryview(code)
    while got < len(code):
        n = os.readv(CODE_FD, [view[got:]])
        if not n:
            break
        got += n
    view.release()
    os.close(CODE_FD)
    return code if got == len(code) else None  # no copy: decode() takes a bytearray too


def new_main() -> types.ModuleType:
    """The run's fresh ``__main__`` module, made while the interpreter still waits for its code."""
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    sys.argv = [""]
    return main


def run(source: bytes | bytearray | None, main: types.ModuleType) -> NoReturn:
    """Run `source` in `main`, with tracebacks that show the user's lines only, then exit.

    None (the code never fully arrived: the call was cancelled) runs nothing.
    """
    if source is None:
        os._exit(1)
    text = source.decode("utf-8", "replace").removeprefix("\ufeff")  # a BOM, as compile() of bytes allows
    # Seed linecache so tracebacks print the offending source lines of the run's code.
    linecache.cache[FILENAME] = (len(text), None, text.splitlines(True), FILENAME)
    try:
        # The text, not the bytes: the tool takes a str, so a coding cookie must not re-decode it.
        code = compile(text, FILENAME, "exec", dont_inherit=True)
    except Exception as exc:  # SyntaxError, ValueError (NUL), RecursionError, MemoryError...
        report(exc.with_traceback(None))
        finish(1)
    try:
        exec(code, main.__dict__)
    except SystemExit as exc:
        finish(exit_status(exc))
    except BaseException as exc:
        # Drop this module's frame so the traceback starts at the user's code.
        report(exc.with_traceback(exc.__traceback__.tb_next if exc.__traceback__ else None))
        if isinstance(exc, KeyboardInterrupt):
            # Mirror the interpreter: die by SIGINT so the exit status says so.
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        finish(1)
    finish(0)


def exit_status(exc: SystemExit) -> int:
    """The status the interpreter would exit with for `exc` (printing a non-integer code, as it does)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        # The interpreter converts to a C long: what does not fit becomes -1, i.e. status 255.
        return exc.code & 0xFF if -(2**63) <= exc.code < 2**63 else 255
    try:
        sys.stderr.write(f"{exc.code}\n")
    except Exception:  # noqa: S110  (stderr closed by the run: nothing to report to)
        pass
    return 1


def finish(status: int) -> NoReturn:
    """Leave as interpreter shutdown would, minus the heap teardown nothing can observe.

    Non-daemon threads are joined, atexit handlers run, and the standard streams are flushed; then
    os._exit skips finalizing every object, which costs milliseconds and, in a forked run,
    copies the whole inherited heap page by page.
    """
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except Exception:
        # What the interpreter does when stdout cannot be flushed at exit.
        status = status or 120
    try:
        sys.stderr.flush()
    except Exception:  # noqa: S110  (a closed stderr has nothing left to flush)
        pass
    os._exit(status)


def report(exc: BaseException) -> None:
    """Print an uncaught exception as the interpreter would, honouring a user-installed excepthook.

    Never raises: with stderr closed (or a failing excepthook) there is nowhere to report to.
    """
    try:
        if sys.excepthook is not sys.__excepthook__:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        else:
            # The C-level hook reads source lines from disk; this one reads the seeded linecache.
            traceback.print_exception(exc)
    except Exception:  # noqa: S110  (nowhere left to report to)
        pass


def warm_up() -> None:
    """Pay one-time costs before the code arrives: the first compile() of a process is ~1-10 ms."""
    exec(compile("pass", FILENAME, "exec", dont_inherit=True), {})


def prepare_process() -> None:
    """What every run needs once per interpreter, before any run's code: a forked run inherits it.

    Non-dumpable and no capabilities (both survive fork; a run can make only itself dumpable
    again, which exposes nothing but its own process, and can never regain a capability), the compiler
    warmed up, and a line-buffered stdout: -I ignores PYTHONUNBUFFERED, and a block-buffered stdout
    loses what a run printed before a timeout kill. Line buffering keeps every finished line,
    written whole (one write per line, so lines of concurrent processes do not interleave mid-line).
    """
    make_undumpable()
    warm_up()
    drop_privileges()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]


def become_run(workdir: str, limits: list[int]) -> None:
    """Enter the working directory, apply the limits and say so on stdout: then the code may come."""
    # Anything the server's own parent passed down stops here (in a forked run: the zygote's
    # socket and the server's ends of the pipes); fd 3 goes once the code is read.
    os.closerange(CODE_FD + 1, MAX_FD)
    os.chdir(workdir)
    os.umask(0o077)
    # Lowering limits needs no capability, so the order against prepare_process() does not matter.
    refused = apply_limits(*limits)
    os.write(1, READY_PREFIX + b" " + ",".join(refused).encode() + b"\n")


def zygote(base_dir: str, limits: list[int]) -> None:
    """Fork-server mode: fork one run per request from the server, on the socket at fd 3.

    It says ``R`` once it is ready. Requests are one byte, b"F". For each, the zygote makes a
    working directory and four pipes, forks, and sends back ``S <pid> <workdir>`` with the
    server's pipe ends attached (SCM_RIGHTS).
    When a run exits it kills whatever is left in the run's process group (the leader is still a
    zombie, so the group id cannot have been reused), reaps it, removes its working directory if
    the run left it empty, and sends ``X <pid> <wait status> <utime> <stime> <maxrss> <removed>``
    (removed: 1 if the directory is gone, 0 if the server must delete what is in it). When the
    server closes the socket, every run is killed and reaped and the zygote exits. It holds nothing
    of the server's: a minimal environment, no secrets, and only modules the bootstrap itself needs
    (nothing seeds `random` before a fork).
    """
    import socket  # only the zygote needs these

    server = socket.socket(fileno=CODE_FD)
    os.closerange(CODE_FD + 1, MAX_FD)
    prepare_process()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    runs: dict[int, str] = {}  # pid -> working directory
    try:
        server.send(b"R")
        _serve(server, wake_r, base_dir, limits, runs)
    except OSError:
        pass  # the server is gone: so must every run be
    # Reaped here, not left to the server: orphans would reach it as strays of unknown origin. For a
    # second at most: a run stuck in the kernel must not keep the zygote alive with it.
    import time

    for pid in runs:
        _kill_group(pid)
    left, deadline = set(runs), time.monotonic() + 1.0
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    left.discard(pid)
            except ChildProcessError:
                left.discard(pid)
        if left:
            time.sleep(0.005)


def _serve(server: socket.socket, wake_r: int, base_dir: str, limits: list[int], runs: dict[int, str]) -> None:
    import array
    import select
    import socket

    while True:
        readable, _, _ = select.select([server.fileno(), wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
            for pid, status, usage, removed in _exited_runs(runs):
                report = b"X %d %d %r %r %d %d" % (
                    pid,
                    status,
                    usage.ru_utime,
                    usage.ru_stime,
                    usage.ru_maxrss,
                    removed,
                )
                server.send(report)
        if server.fileno() in readable:
            if not server.recv(16):
                return
            reply, ours = _fork_run(base_dir, limits, runs)
            if ours:
                server.sendmsg([reply], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", ours))])
            else:
                server.send(reply)
            for fd in ours:
                os.close(fd)


def _fork_run(base_dir: str, limits: list[int], runs: dict[int, str]) -> tuple[bytes, list[int]]:
    """Fork one run: (``S <pid> <workdir>``, the server's pipe ends), or (``E <why>``, []) leaving nothing.

    A failed fork (EAGAIN once a run's fork loop has used up the process limit) fails this request
    only: the zygote and the runs in flight carry on.
    """
    workdir = os.path.join(base_dir, "run-" + os.urandom(6).hex())
    made = False
    ends: list[int] = []
    try:
        os.mkdir(workdir, 0o700)
        made = True
        for _ in range(4):  # stdin, stdout, stderr, code: read end, write end each
            ends.extend(os.pipe())
        pid = os.fork()
    except OSError as exc:
        for fd in ends:
            os.close(fd)
        if made:
            try:
                os.rmdir(workdir)
            except OSError:
                pass  # the server removes what is left under its base directory at the end
        return b"E " + str(exc).encode(), []
    theirs = [ends[0], ends[3], ends[5], ends[6]]
    if pid == 0:
        _forked_run(theirs, workdir, limits)
    for fd in theirs:
        os.close(fd)
    runs[pid] = workdir
    return b"S %d %s" % (pid, workdir.encode()), [ends[1], ends[2], ends[4], ends[7]]


def _forked_run(theirs: list[int], workdir: str, limits: list[int]) -> NoReturn:
    """In the forked child: become a run like a freshly spawned interpreter would, then run its code.

    Never returns: whatever happens, this process must not go back into the zygote's loop.
    """
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        for target, fd in enumerate(theirs):
            os.dup2(fd, target)
        os.environ["HOME"] = os.environ["TMPDIR"] = workdir
        # Again: after a fork the compiler's first writes copy pages, better now than once the
        # code has come and the call is waiting.
        warm_up()
        become_run(workdir, limits)
        main = new_main()
        run(read_code(), main)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(1)


def _exited_runs(runs: dict[int, str]) -> list[tuple[int, int, resource.struct_rusage, bool]]:
    exited: list[tuple[int, int, resource.struct_rusage, bool]] = []
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return exited
        if info is None:
            return exited
        _kill_group(info.si_pid)
        pid, status, usage = os.wait4(info.si_pid, 0)
        # Here, not in the server: rmdir costs the server's single thread up to 0.1 ms on a disk.
        try:
            os.rmdir(runs.pop(pid))
            removed = True
        except (KeyError, OSError):
            removed = False  # not empty (or not ours): the server deletes the tree
        exited.append((pid, status, usage, removed))


def _kill_group(pid: int) -> None:
    """SIGKILL an unreaped run's group, or the run alone if it has not called setsid yet."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        try:
            os.kill(pid, signal.SIGKILL)  # still our child (unreaped): the pid cannot be someone else's
        except OSError:
            pass
    except OSError:
        pass


def main() -> None:
    """Dispatch: a run (``WORKDIR CPU AS NPROC FSIZE``) or the zygote (``--zygote BASE_DIR CPU AS NPROC FSIZE``)."""
    if sys.argv[1] == "--zygote":
        zygote(sys.argv[2], [int(arg) for arg in sys.argv[3:7]])
        return
    prepare_process()
    become_run(sys.argv[1], [int(arg) for arg in sys.argv[2:6]])
    main = new_main()
    run(read_code(), main)


if __name__ == "__main__":
    main()
