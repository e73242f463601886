"""Fork-server mode, the zygote's side: one interpreter that forks every run. Stdlib only.

Started as ``python -I -S -X utf8 zygote.py BASE_DIR CPU AS NPROC FSIZE [namespaces TMP_BYTES
NETWORK KEEP...]`` with its end of the server's Unix socket on fd 3, like a run interpreter
otherwise (a minimal environment, a new session). It imports `bootstrap` (and `namespaces`) from
its own directory and does once, for every fork to inherit, what each run interpreter does for
itself (`bootstrap.prepare_process`); each forked child then becomes a run exactly as a spawned
interpreter would.

With ``namespaces`` every run gets its own PID, mount, IPC, UTS and (NETWORK ``isolated``)
network namespaces, set up before its code can arrive. Two processes per run: the zygote's
child, cloned straight into the new namespaces (the server's handle: its pid, its process group),
is PID 1 there; it builds the private view of the file system, forks the run, and reaps whatever
is orphaned to it until the run ends. It reports the run's exact end on a pipe of its own
*before* the namespaces are torn down, so the kernel's teardown never delays an answer.
``python zygote.py --probe TMP_BYTES NETWORK KEEP...`` runs one such run of ``pass`` and exits 0
if it worked (the server's start-up check).

This file must not import the ``runner`` package: like the bootstrap, it runs under ``-I -S`` with
nothing but the standard library.
"""

from __future__ import annotations

import array
import os
import select
import signal
import socket
import sys
import time
import traceback

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

    from runner.processes import bootstrap, namespaces
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
    import namespaces

    sys.dont_write_bytecode = not _writes_bytecode
    del sys.path[0]
    sys.path_importer_cache.pop(_here, None)
    del sys.modules["bootstrap"], sys.modules["namespaces"]

# Where a namespaced run's fds sit in its init: the run's four pipe ends on 0-3, the status pipe next.
STATUS_FD = bootstrap.CODE_FD + 1


class Run:
    """The zygote's record of one run: its directory on disk (plain) or its init's status pipe."""

    __slots__ = ("network", "reported", "status_fd", "workdir")

    def __init__(self, workdir: str | None, status_fd: int | None, network: int | None = None) -> None:
        self.workdir = workdir
        self.status_fd = status_fd
        self.network = network  # the network namespace lent to it, until its init is reaped
        self.reported = False


def serve(base_dir: str, limits: list[int], isolation: namespaces.Isolation | None) -> None:
    """Fork-server mode: fork one run per request from the server, on the socket at fd 3.

    It says ``R`` once it is ready. Requests are one byte, b"F". For each, the zygote makes four
    pipes (and, for a plain run, a working directory), forks, and sends back ``S <pid> [<workdir>]``
    with the server's pipe ends attached (SCM_RIGHTS).
    When a run ends the zygote sends ``X <pid> <wait status> <utime> <stime> <maxrss> <removed>``
    (removed: 1 if no directory of the run is left on disk, 0 if the server must delete what is in
    it). A plain run has ended when the zygote has killed whatever is left in its process group
    (the leader is still a zombie, so the group id cannot have been reused), reaped it and removed
    its directory if the run left it empty; a namespaced run when its init says so. When the
    server closes the socket, every run is killed and reaped and the zygote exits. It holds nothing
    of the server's: a minimal environment, no secrets, and only modules the bootstrap itself needs
    (nothing seeds `random` before a fork).
    """
    if isolation is not None:
        if not namespaces.has_cap_sys_admin():
            namespaces.enter_user_namespace()  # before prepare_process: see its docstring
        namespaces.prepare_shared_view(isolation)
    server = socket.socket(fileno=bootstrap.CODE_FD)
    os.closerange(bootstrap.CODE_FD + 1, bootstrap.MAX_FD)
    # A namespaced zygote keeps its capabilities (in its own user namespace, if it needed one) to
    # build each run's namespaces; every run drops them before its code can arrive.
    bootstrap.prepare_process(keep_capabilities=isolation is not None)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    runs: dict[int, Run] = {}
    try:
        server.send(b"R")
        _serve(server, wake_r, base_dir, limits, isolation, runs)
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


def _serve(
    server: socket.socket,
    wake_r: int,
    base_dir: str,
    limits: list[int],
    isolation: namespaces.Isolation | None,
    runs: dict[int, Run],
) -> None:
    while True:
        statuses = {run.status_fd: pid for pid, run in runs.items() if run.status_fd is not None}
        readable, _, _ = select.select([server.fileno(), wake_r, *statuses], [], [])
        for fd in readable:
            if fd in statuses:
                pid = statuses[fd]
                said = _status_of(runs[pid])
                if said is not None:
                    server.send(b"X %d %s 1" % (pid, said))
        if wake_r in readable:
            os.read(wake_r, 4096)
            for report in _exited_runs(runs, isolation):
                server.send(report)
        if server.fileno() in readable:
            if not server.recv(16):
                return
            reply, ours = _fork_run(base_dir, limits, runs, isolation)
            if ours:
                server.sendmsg([reply], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", ours))])
            else:
                server.send(reply)
            for fd in ours:
                os.close(fd)


def _fork_run(
    base_dir: str, limits: list[int], runs: dict[int, Run], isolation: namespaces.Isolation | None = None
) -> tuple[bytes, list[int]]:
    """Fork one run: (``S <pid> [<workdir>]``, the server's pipe ends), or (``E <why>``, []) leaving nothing.

    A failed fork (EAGAIN once a run's fork loop has used up the process limit) fails this request
    only: the zygote and the runs in flight carry on.
    """
    workdir = None if isolation is not None else os.path.join(base_dir, "run-" + os.urandom(6).hex())
    made = False
    ends: list[int] = []
    network = None
    try:
        if workdir is not None:
            os.mkdir(workdir, 0o700)
            made = True
        for _ in range(4 if isolation is None else 5):  # stdin, stdout, stderr, code (, status): read, write
            ends.extend(os.pipe())
        if isolation is None:
            pid = os.fork()
        else:
            network = isolation.lend_network()
            pid = namespaces.clone_into_namespaces()
    except OSError as exc:
        for fd in ends:
            os.close(fd)
        if isolation is not None:
            isolation.give_back(network)
        if made:
            try:
                os.rmdir(workdir)  # type: ignore[arg-type]
            except OSError:
                pass  # the server removes what is left under its base directory at the end
        return b"E " + str(exc).encode(), []
    theirs = [ends[0], ends[3], ends[5], ends[6]]
    if pid == 0:
        if isolation is None:
            _forked_run(theirs, workdir or "", limits)
        _namespace_init([*theirs, ends[9]], limits, isolation, network)
    for fd in theirs:
        os.close(fd)
    status_fd = None
    if isolation is not None:
        os.close(ends[9])
        status_fd = ends[8]
        os.set_blocking(status_fd, False)
    runs[pid] = Run(workdir, status_fd, network)
    where = b"" if workdir is None else b" " + workdir.encode()
    return b"S %d%s" % (pid, where), [ends[1], ends[2], ends[4], ends[7]]


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
        _become_run(workdir, limits)
    except BaseException:
        _fail()
    os._exit(1)  # _become_run never returns; this keeps the type checker sure of it


def _become_run(workdir: str, limits: list[int]) -> NoReturn:
    os.environ["HOME"] = os.environ["TMPDIR"] = workdir
    # Again: after a fork the compiler's first writes copy pages, better now than once the
    # code has come and the call is waiting.
    bootstrap.warm_up()
    bootstrap.become_run(workdir, limits)
    main = bootstrap.new_main()
    bootstrap.run(bootstrap.read_code(), main)


def _namespace_init(
    fds: list[int], limits: list[int], isolation: namespaces.Isolation, network: int | None
) -> NoReturn:
    """PID 1 of the run's namespaces: build its view, fork the run, reap until it ends, report its end.

    `fds`: the run's stdin, stdout, stderr and code pipe ends, then the status pipe. It keeps none
    of the run's once the run has them, so that the run's output ends when the run does. Nothing
    inside can signal it (PID 1 gets only the signals it has a handler for, and it has none) or
    trace it (it is not dumpable); it is held to the run's limits like the run.
    """
    try:
        if network is not None:
            namespaces.setns(network, namespaces.CLONE_NEWNET)  # before its fd goes with the zygote's others
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(number, signal.SIG_DFL)
        os.setsid()  # the server's SIGKILL to this group ends the namespace, and the run with it
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(STATUS_FD + 1, bootstrap.MAX_FD)  # the zygote's socket and other runs' pipes
        namespaces.die_with_parent()
        namespaces.name_host()
        namespaces.make_private_view(isolation)
        bootstrap.apply_limits(*limits)
        bootstrap.drop_privileges()  # here, not in the run: the init needs none from now on either
        run = os.fork()
        if run == 0:
            os.close(STATUS_FD)
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a run's ^C is KeyboardInterrupt
            os.setsid()
            _become_run(namespaces.WORKDIR, limits)
        os.closerange(0, STATUS_FD)
        while True:
            pid, status, usage = os.wait4(-1, 0)
            if pid == run:
                break
        # Whatever the run left behind dies now (not with the namespace, later): its output ends here.
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass  # nothing was left
        os.write(STATUS_FD, b"%d %r %r %d" % (status, usage.ru_utime, usage.ru_stime, usage.ru_maxrss))
    except BaseException:
        _fail()
    os._exit(0)


def _fail() -> NoReturn:
    """Say what went wrong on the run's stderr, if it is still open, and exit: never return to a caller."""
    try:
        traceback.print_exc()
    finally:
        os._exit(1)


def _status_of(run: Run) -> bytes | None:
    """What a namespaced run's init reported (``<wait status> <utime> <stime> <maxrss>``), once.

    None if it said nothing (it was killed): then the run's end is its init's, reported when it is reaped.
    """
    assert run.status_fd is not None
    try:
        said = os.read(run.status_fd, 256)
    except BlockingIOError:
        said = b""  # it has not written: it was killed, not done
    finally:
        os.close(run.status_fd)
        run.status_fd = None
    run.reported = bool(said)
    return said or None


def _exited_runs(runs: dict[int, Run], isolation: namespaces.Isolation | None) -> list[bytes]:
    """Reap every exited child; the ``X`` report of each whose end the server has not been told yet."""
    reports: list[bytes] = []
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return reports
        if info is None:
            return reports
        _kill_group(info.si_pid)
        pid, status, usage = os.wait4(info.si_pid, 0)
        run = runs.pop(pid, None)
        if run is not None and isolation is not None:
            isolation.give_back(run.network)  # its init is gone, and every process of its namespaces
        if run is not None and run.status_fd is not None:
            said = _status_of(run)  # written before the init ended, not yet seen by the loop
            if said is not None:
                reports.append(b"X %d %s 1" % (pid, said))
        if run is not None and run.reported:
            continue  # its init reported the run's end
        removed = True
        if run is not None and run.workdir is not None:
            # Here, not in the server: rmdir costs the server's single thread up to 0.1 ms on a disk.
            try:
                os.rmdir(run.workdir)
            except OSError:
                removed = False  # not empty (or not ours): the server deletes the tree
        reports.append(b"X %d %d %r %r %d %d" % (pid, status, usage.ru_utime, usage.ru_stime, usage.ru_maxrss, removed))


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


# In its own PID namespace the run is PID 2 (its init is 1).
PROBE_CODE = b"import os\nassert os.getpid() == 2, os.getpid()\n"


def probe(isolation: namespaces.Isolation) -> int:
    """Run ``pass`` as a namespaced run exactly as the server would; 0 if it worked, else why on stderr."""
    if not namespaces.has_cap_sys_admin():
        namespaces.enter_user_namespace()
    namespaces.prepare_shared_view(isolation)
    bootstrap.prepare_process(keep_capabilities=True)
    runs: dict[int, Run] = {}
    reply, ours = _fork_run("", [10, 1 << 30, 4096, 1 << 20], runs, isolation)
    if not ours:
        sys.stderr.write(reply.decode(errors="replace") + "\n")
        return 1
    stdin, stdout, stderr, code = ours
    os.close(stdin)
    ready = os.read(stdout, 256)
    if ready.startswith(bootstrap.READY_PREFIX):
        os.write(code, bootstrap.frame_code(PROBE_CODE))
    os.close(code)
    [(pid, run)] = runs.items()
    _, init_status = os.waitpid(pid, 0)  # the init wrote the run's end before it exited
    said = _status_of(run) if run.status_fd is not None else None
    errors = b""
    while chunk := os.read(stderr, 65536):
        errors += chunk
    status = int(said.split()[0]) if said else init_status
    if not ready.startswith(bootstrap.READY_PREFIX) or status != 0:
        lines = errors.decode(errors="replace").strip().splitlines()
        sys.stderr.write((lines[-1] if lines else f"the run ended with wait status {status}") + "\n")
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        sys.exit(probe(namespaces.Isolation(sys.argv[2:])))
    serve(
        sys.argv[1],
        [int(arg) for arg in sys.argv[2:6]],
        namespaces.Isolation(sys.argv[7:]) if sys.argv[6:7] == ["namespaces"] else None,
    )
