"""Fork-server mode, the zygote's side: one interpreter that forks every run. Stdlib only.

Started as ``python -I -S -X utf8 zygote.py BASE_DIR CPU AS NPROC FSIZE`` with its end of the
server's Unix socket on fd 3, like a run interpreter otherwise (a minimal environment, a new
session). It imports `bootstrap` from its own directory and does once, for every fork to inherit,
what each run interpreter does for itself (`bootstrap.prepare_process`); each forked child then
becomes a run exactly as a spawned interpreter would. This file must not import the ``runner``
package: like the bootstrap, it runs under ``-I -S`` with nothing but the standard library.
"""

from __future__ import annotations

import array
import os
import resource
import select
import signal
import socket
import sys
import time
import traceback

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

    from runner.processes import bootstrap
else:
    # -I keeps the script's directory off sys.path; the bootstrap sits next to this file. Everything
    # the import leaves is taken away again, so that a forked run can import nothing more than a
    # spawned one: the path entry, its importer, the module's name. No bytecode is written next to
    # the code (-I ignores PYTHONDONTWRITEBYTECODE; the image precompiles it).
    _here = os.path.dirname(os.path.abspath(__file__))
    _writes_bytecode = not sys.dont_write_bytecode
    sys.path.insert(0, _here)
    sys.dont_write_bytecode = True
    import bootstrap

    sys.dont_write_bytecode = not _writes_bytecode
    del sys.path[0]
    sys.path_importer_cache.pop(_here, None)
    del sys.modules["bootstrap"]


def serve(base_dir: str, limits: list[int]) -> None:
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
    server = socket.socket(fileno=bootstrap.CODE_FD)
    os.closerange(bootstrap.CODE_FD + 1, bootstrap.MAX_FD)
    bootstrap.prepare_process()
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
        bootstrap.warm_up()
        bootstrap.become_run(workdir, limits)
        main = bootstrap.new_main()
        bootstrap.run(bootstrap.read_code(), main)
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


if __name__ == "__main__":
    serve(sys.argv[1], [int(arg) for arg in sys.argv[2:6]])
