"""Fork-server mode, the zygote's side: one interpreter that forks every run. Stdlib only.

Started as ``python -I -S -X utf8 zygote.py BASE_DIR CPU AS NPROC FSIZE [namespaces TMP_BYTES
NETWORK KEEP...]`` with its end of the server's Unix socket on fd 3, like a run interpreter
otherwise (a minimal environment, a new session). It imports `bootstrap` (and `namespaces`) from
its own directory and does once, for every fork to inherit, what each run interpreter does for
itself (`bootstrap.prepare_process`); each forked child then becomes a run exactly as a spawned
interpreter would.

With ``namespaces`` every run gets its own PID, mount, IPC, UTS and (NETWORK ``isolated``)
network namespaces, set up before its code can arrive. The PID namespace is a kept one, lent to one
run at a time (pidspaces.py): the run is forked into it, and once the zygote has reaped the run and
reported its end, the namespace's init, made once, kills whatever the run left before the namespace
is lent again. The network namespace is lent with it, while nothing of an earlier run is in it
(networks.py). The run itself makes the rest (mount, IPC, UTS: never lent, see
`namespaces.Isolation`) and builds its private view of the file system, then drops every capability
and refuses what only that set-up needed (`seccomp.AFTER_SET_UP`).
``python zygote.py --probe [parent=PID] TMP_BYTES NETWORK KEEP...`` runs two such runs of ``pass``, the
second in the first one's PID namespace, and exits 0 if they worked (the server's start-up check); it
dies with the server (PID), whenever that dies.

This file must not import the ``runner`` package: like the bootstrap, it runs under ``-I -S`` with
nothing but the standard library.
"""

from __future__ import annotations

import array
import fcntl  # noqa: F401  (code mode's channel, `wire.in_turn`: loaded once here, not in each run)
import gc
import mmap  # noqa: F401  (code mode's channel, `toolchannel`: loaded once here, not in each run)
import os
import signal
import socket
import sys
import time
import traceback

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from runner.inrun import (
        bootstrap,
        cgroups,
        figures,
        harvest,
        images,
        keeper,
        libc,
        namespaces,
        pidspaces,
        preload,
        seccomp,
        tables,
        toolchannel,
        wire,
        workdir,
    )
else:
    # -I keeps the script's directory off sys.path; the bootstrap sits next to this file, and loads
    # the rest as it does in a spawned run (`bootstrap.load_siblings`), taking away all the loading
    # leaves, so that a forked run can import nothing more than a spawned one. No bytecode is written
    # next to the code (-I ignores PYTHONDONTWRITEBYTECODE; the image precompiles it).
    _writes_bytecode = not sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bootstrap

    del sys.path[0]
    _NAMES = ("namespaces", "pidspaces", "preload", "cgroups", *bootstrap.SIBLINGS, bootstrap.KEEPER)
    (
        namespaces,
        pidspaces,
        preload,
        cgroups,
        libc,
        seccomp,
        wire,
        workdir,
        figures,
        harvest,
        images,
        tables,
        toolchannel,
        keeper,
    ) = bootstrap.load_siblings(*_NAMES)
    del sys.modules["bootstrap"]  # imported here, not by the loader
    sys.dont_write_bytecode = not _writes_bytecode

# After a fork every page the zygote or the run writes to is copied, one page fault each: the modules
# socket.py and signal.py wrap add work that writes to pages, and their C halves do not. signal.signal
# turns the handler it replaces into a Handlers enum member, and the zygote's (a function) is none: the
# ValueError it makes and catches there cost each run some 60 pages. socket.socketpair wraps each end in
# a Python socket object before the zygote takes its fd back: some 20 pages of the zygote's per run.
_SIGNAL: Any = sys.modules["_signal"]
_SOCKET: Any = sys.modules["_socket"]
# What a run takes besides the bootstrap (`bootstrap.Siblings`), the keeper too: loaded once, here.
SIBLINGS = bootstrap.Siblings((wire, workdir, figures, harvest, images, tables, toolchannel), keeper=keeper)
# A namespaced run drops its capabilities itself, after its set-up: with what ctypes needs made once,
# here. The bounding set is already empty: the zygote emptied it for all of them (`prepare_process`).
DROP_PRIVILEGES = libc.privilege_dropper(bounding_set=False)
# And refuses what only its set-up needed (mount, setns), and in a network namespace of its own the
# internet sockets it has no network for: on top of the zygote's own filter. By: has it that namespace?
# With egress (RUNNER_EGRESS_ALLOW), IPv4 sockets stay, for the server's proxy on the run's loopback.
SET_UP_DONE = {
    False: seccomp.Filter(seccomp.AFTER_SET_UP),
    True: seccomp.Filter({**seccomp.AFTER_SET_UP, **seccomp.NO_NETWORK}),
    "egress": seccomp.Filter({**seccomp.AFTER_SET_UP, **seccomp.PROXY_ONLY}),
}


# A namespaced zygote's: what each run gets, and the kept PID namespaces runs are forked into.
Namespaced = tuple[namespaces.Isolation, pidspaces.PidSpaces]


class Run:
    """The zygote's record of one run: its directory on disk (plain), or the PID namespace lent to it,
    and its cgroup (namespaced, where cgroups are planned)."""

    __slots__ = ("anchor", "cgroup", "space", "workdir")

    def __init__(
        self, workdir: str | None, space: pidspaces.Space | None = None, cgroup: cgroups.RunCgroup | None = None
    ) -> None:
        self.workdir = workdir
        self.space = space
        self.cgroup = cgroup
        self.anchor = False  # a session's anchor: its processes outlive each call, an OOM is told


def serve(base_dir: str, limits: list[int], isolation: namespaces.Isolation | None) -> None:
    """Fork-server mode: fork one run per request from the server, on the socket at fd 3.

    It says ``R`` once it is ready. Requests are b"F": for each, the zygote makes four pipes (and,
    for a plain run, a working directory), forks, and sends back ``S <pid> [<workdir>]`` with the
    server's pipe ends attached (SCM_RIGHTS); and ``A <pid>``, unanswered: that run is a session's
    anchor, so an OOM in its cgroup (v1) is told, ``O <pid>``, for the server to end the call
    running in it, instead of ending the run; and ``Y``, answered ``Y`` once every OOM seen so far
    has been told.
    When a run ends the zygote sends ``X <pid> <wait status> <utime> <stime> <maxrss> <removed>
    <oom kills>`` (removed: 1 if no directory of the run is left on disk, 0 if the server must delete
    what is in it; oom kills: the OOM kills in the run's cgroup, 0 without one). A plain run has
    ended when the zygote has killed whatever is left in its process group (the leader is still a
    zombie, so the group id cannot have been reused), reaped it and removed its directory if the run
    left it empty (a namespaced run's PID namespace is lent again only once its init has killed
    whatever else the run left there). When the server closes the socket,
    every run is killed and reaped and the zygote exits. It holds nothing of the server's: a
    minimal environment, no secrets, and only modules the bootstrap itself needs (nothing seeds
    `random` before a fork, and each run reseeds what a preloading zygote's modules seeded).
    """
    server = socket.socket(fileno=wire.CODE_FD)
    os.closerange(wire.CODE_FD + 1, bootstrap.MAX_FD)
    if isolation is not None and not namespaces.has_cap_sys_admin():
        namespaces.enter_user_namespace()  # before prepare_process: see its docstring
    namespaced = None
    try:
        # Before the view is read-only: see `preload.preload`.
        run_limits = preload.limits_after(base_dir, limits, bootstrap.add_packages, figures.private_config)
    except Exception as exc:  # a module that cannot be imported: RUNNER_PRELOAD is wrong
        server.send(b"E " + f"{type(exc).__name__}: {exc}".encode(errors="replace")[:2000])
        return
    if isolation is not None:
        if isolation.cgroup_args:  # opened before the view, which has no /sys
            parents, writes = cgroups.parse_tokens(isolation.cgroup_args)
            # A preloading zygote's run may map RUNNER_MAX_MEMORY_MB beyond what the modules map, and
            # the pages of theirs it writes to are copied into its own cgroup: its budget grows as its
            # RLIMIT_AS does, so that one process still meets its MemoryError before the cgroup's kill.
            isolation.cgroups = cgroups.RunCgroups(parents, cgroups.memory_grown(writes, run_limits[1] - limits[1]))
        namespaces.prepare_shared_view(isolation)
        _home_for_runs()
        # The inits are forked from this zygote too: what it maps counts for them as for its runs.
        namespaced = (isolation, _pid_spaces(isolation, run_limits))
    limits = run_limits
    # A namespaced zygote keeps its capabilities (in its own user namespace, if it needed one) to
    # build each run's namespaces; every run drops them before its code can arrive.
    rules = seccomp.WHOLE if isolation is None else seccomp.EVERY_PROCESS
    bootstrap.prepare_process(libc, seccomp.Filter(rules), namespaced_zygote=isolation is not None)
    if namespaced is not None:
        namespaced[1].prepare()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    runs: dict[int, Run] = {}
    gc.collect()
    gc.freeze()  # what it holds lives as long as it does: no run's collection walks (and copies) it
    try:
        server.send(b"R")
        _serve(server, wake_r, base_dir, limits, namespaced, runs)
    except (OSError, pidspaces.HolderGone):
        pass  # the server is gone (or runs' PID namespaces are): so must every run be
    # Reaped here, not left to the server: orphans would reach it as strays of unknown origin. For a
    # second at most: a run stuck in the kernel must not keep the zygote alive with it.
    for pid in runs:
        _kill_group(pid)
    left, deadline = set(runs), time.monotonic() + 1.0
    if namespaced is not None:
        left.update(namespaced[1].end())  # the inits and the holder, and with them every namespace
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    left.discard(pid)
            except ChildProcessError:
                left.discard(pid)
        if left:
            time.sleep(0.005)
    if isolation is not None and isolation.cgroups is not None:
        left_cgroups = [run.cgroup for run in runs.values() if run.cgroup is not None]
        isolation.cgroups.end(left_cgroups, patience=max(0.0, deadline - time.monotonic()))


def _serve(
    server: socket.socket,
    wake_r: int,
    base_dir: str,
    limits: list[int],
    namespaced: Namespaced | None,
    runs: dict[int, Run],
) -> None:
    if namespaced is not None:

        def report_exited() -> None:
            for report in _exited_runs(runs, namespaced):
                server.send(report)

        namespaced[1].between = report_exited
    while True:
        cleaning = {} if namespaced is None else namespaced[1].cleaning
        run_cgroups = None if namespaced is None else namespaced[0].cgroups
        # v1: the OOM kill of a run's process ends the whole run (v2's memory.oom.group does it itself).
        ooms = {run.cgroup.event: pid for pid, run in runs.items() if run.cgroup is not None and run.cgroup.event >= 0}
        waiting = 0.05 if run_cgroups is not None and run_cgroups.doomed else None
        readable = bootstrap.readable([server.fileno(), wake_r, *cleaning, *ooms], waiting)
        for fd in readable:
            if fd in cleaning:
                assert namespaced is not None
                namespaced[1].answered(fd)
            elif fd in ooms and runs[ooms[fd]].cgroup.out_of_memory():  # type: ignore[union-attr]
                if runs[ooms[fd]].anchor:
                    # A session: the server ends the call running in it, not the session.
                    server.send(b"O %d" % ooms[fd])
                else:
                    _kill_group(ooms[fd])
        if run_cgroups is not None:
            run_cgroups.remove_doomed()
        if wake_r in readable:
            os.read(wake_r, 4096)
            for report in _exited_runs(runs, namespaced):
                server.send(report)
            if namespaced is not None and namespaced[1].holder_reaped:
                raise pidspaces.HolderGone("the PID namespace that runs' are made in has ended")
        if server.fileno() in readable:
            request = server.recv(32)
            if not request:
                return
            if request.startswith(b"A "):  # no answer
                anchor = runs.get(int(request[2:]) if request[2:].isdigit() else 0)
                if anchor is not None:
                    anchor.anchor = True
                continue
            if request == b"Y":  # every OOM told before this answer: the server has them all
                server.send(b"Y")
                continue
            reply, ours = _fork_run(base_dir, limits, runs, namespaced)
            if ours:
                server.sendmsg([reply], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", ours))])
            else:
                server.send(reply)
            for fd in ours:
                os.close(fd)


def _fork_run(
    base_dir: str, limits: list[int], runs: dict[int, Run], namespaced: Namespaced | None = None
) -> tuple[bytes, list[int]]:
    """Fork one run: (``S <pid> [<workdir>]``, the server's pipe ends), or (``E <why>``, []) leaving nothing.

    A failed fork (EAGAIN once a run's fork loop has used up the process limit) fails this request
    only: the zygote and the runs in flight carry on.
    """
    workdir = None if namespaced is not None else os.path.join(base_dir, "run-" + os.urandom(6).hex())
    zygote = os.getpid()
    made = False
    ends: list[int] = []
    space = None
    cgroup = None
    try:
        if workdir is not None:
            os.mkdir(workdir, 0o700)
            made = True
        for _ in range(3):  # stdin, stdout, stderr: read, write
            ends.extend(os.pipe())
        ends.extend(sock.detach() for sock in _SOCKET.socketpair())  # the job socket: the run's, ours
        if namespaced is None:
            pid = os.fork()
        else:
            pid, space = namespaced[1].fork()  # and the cgroup kept with its namespace (`cgroups.RunCgroups.lent`)
            if namespaced[0].cgroups is not None:
                cgroup = namespaced[0].cgroups.kept[space.replies]
    except OSError as exc:
        for fd in ends:
            os.close(fd)
        if made:
            try:
                os.rmdir(workdir)  # type: ignore[arg-type]
            except OSError:
                pass  # the server removes what is left under its base directory at the end
        return b"E " + str(exc).encode(), []
    theirs = [ends[0], ends[3], ends[5], ends[6]]
    if pid == 0:
        if namespaced is None:
            libc.die_with(zygote)  # a plain run (a namespaced one dies with its PID namespace's init)
        uid = space.uid if space else None
        network = space.network if space else -1
        listener = space.listener if space else -1
        _forked_run(
            theirs, workdir or namespaces.WORKDIR, limits, namespaced and namespaced[0], uid, cgroup, network, listener
        )
    for fd in theirs:
        os.close(fd)
    runs[pid] = Run(workdir, space, cgroup)
    where = b"" if workdir is None else b" " + workdir.encode()
    return b"S %d%s" % (pid, where), [ends[1], ends[2], ends[4], ends[7]]


def _forked_run(
    theirs: list[int],
    workdir: str,
    limits: list[int],
    isolation: namespaces.Isolation | None,
    uid: int | None = None,
    cgroup: cgroups.RunCgroup | None = None,
    network: int = -1,
    listener: int = -1,
) -> NoReturn:
    """In the forked child: become a run like a freshly spawned interpreter would, then run its code.

    A namespaced run (`isolation`), forked into its kept PID namespace, enters the `network`
    namespace its init made (-1: the zygote's), makes its own mount, IPC and UTS namespaces, builds its
    view of the file system, becomes the host `uid` it was lent (a root server's run), drops every
    capability and refuses mounting and setns from then on; with egress, it first hands the server the
    `listener` of its network namespace's proxy. Never returns: whatever happens, this process must not
    go back into the zygote's loop.
    """
    try:
        if cgroup is not None:
            # First: in its cgroup before it does anything else, so that nothing of the run escapes
            # its limits; then (unshared) in a cgroup namespace rooted there.
            cgroup.place_self()
        signal.set_wakeup_fd(-1)
        _SIGNAL.signal(_SIGNAL.SIGCHLD, _SIGNAL.SIG_DFL)
        os.setsid()
        if isolation is not None:
            if network >= 0:
                namespaces.setns(network, namespaces.CLONE_NEWNET)
            namespaces.unshare(isolation.unshared)
        for target, fd in enumerate(theirs):
            os.dup2(fd, target)
        if isolation is not None:
            if listener >= 0:
                # The proxy's listener its namespace's init made (inherited from the zygote, closed with the
                # rest before the code comes), handed to the server before the run's code exists.
                wire.hand_over_listener(listener)
            namespaces.name_host()
            namespaces.make_private_view(isolation)
            if uid is not None:
                bootstrap.give_home(workdir, uid)
            DROP_PRIVILEGES(uid)
            SET_UP_DONE["egress" if isolation.egress_port else isolation.network].install()
            namespaces.require_no_privileges()  # fail closed: the dropping ignores what fails
        _ready_and_run_code(workdir, limits, () if isolation is None else isolation.tmpfs, isolation is not None)
    except BaseException:
        _fail()
    os._exit(1)  # _ready_and_run_code never returns; this keeps the type checker sure of it


def _ready_and_run_code(workdir: str, limits: list[int], tmpfs: tuple[str, ...], home_set: bool) -> NoReturn:
    if not home_set:  # a plain run's directory is its own (`_home_for_runs`)
        os.environ["HOME"] = os.environ["TMPDIR"] = workdir
    preload.reseed()
    # Again, and what a run does after its code: after a fork the first writes copy pages, better
    # now than once the code has come and the call is waiting.
    bootstrap.warm_up(SIBLINGS.run, workdir)
    bootstrap.ready_for_code(wire, workdir, limits)
    main = bootstrap.new_main()
    bootstrap.run(wire.read_job(wire.CODE_FD), main, SIBLINGS, tmpfs)


def _pid_spaces(isolation: namespaces.Isolation, limits: list[int]) -> pidspaces.PidSpaces:
    """The kept PID namespaces of a namespaced zygote (or its probe), as its arguments ask."""
    return pidspaces.PidSpaces(
        limits,
        isolation.spaces,
        isolation.uids,
        isolation.cgroups,
        network=isolation.network,
        egress=isolation.egress_port,
    )


def _home_for_runs() -> None:
    """Every namespaced run's HOME and TMPDIR is its own tmpfs at the same place (`namespaces.WORKDIR`): set
    once here, not in each run, where os.environ's encoding and putenv write to some 25 pages of the
    zygote's that the run would copy."""
    os.environ["HOME"] = os.environ["TMPDIR"] = namespaces.WORKDIR


def _fail() -> NoReturn:
    """Say what went wrong on the run's stderr, if it is still open, and exit: never return to a caller."""
    try:
        traceback.print_exc()
    finally:
        os._exit(1)


def _exited_runs(runs: dict[int, Run], namespaced: Namespaced | None) -> list[bytes]:
    """Reap every exited child; the ``X`` report of each run. A namespaced run's init is told to kill
    what the run left, and its PID namespace is lent again once it has (`_serve`)."""
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
        if run is None:
            if namespaced is not None:  # a kept namespace's init, its maker, or the holder
                namespaced[1].lost(pid)
            continue
        removed = True
        # Read now: the cgroup is lent with the run's PID namespace once that is clean.
        oom_kills = run.cgroup.oom_kills() if run.cgroup is not None else 0
        if run.workdir is not None:
            # Here, not in the server: rmdir costs the server's single thread up to 0.1 ms on a disk.
            try:
                os.rmdir(run.workdir)
            except OSError:
                removed = False  # not empty (or not ours): the server deletes the tree
        rusage = (usage.ru_utime, usage.ru_stime, usage.ru_maxrss)
        reports.append(b"X %d %d %r %r %d %d %d" % (pid, status, *rusage, removed, oom_kills))
        if namespaced is not None and run.space is not None:
            namespaced[1].clean(run.space)


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


# Run twice, the second time in the namespace the first one had: PID 2 there, then 3 (its init is 1),
# its parent (the zygote) out of sight.
PROBE_CODE = b"import os\nassert (os.getpid(), os.getppid()) == (%d, 0), (os.getpid(), os.getppid())\n"
PROBE_LIMITS = [10, 1 << 30, 4096, 1 << 20]


def probe(isolation: namespaces.Isolation, parent: int = 0) -> int:
    """Run ``pass`` twice as namespaced runs exactly as the server would, the second in the PID namespace
    the first one had; 0 if it worked, else why on stderr. It dies with its `parent` (the server's pid,
    if it was told: else whatever started it), and so does every process it made."""
    libc.die_with(parent)  # a probe whose server has died would go on for nothing
    if not namespaces.has_cap_sys_admin():
        namespaces.enter_user_namespace()
    if isolation.cgroup_args:  # the runs' cgroups are made and removed as the server's will be
        isolation.cgroups = cgroups.RunCgroups(*cgroups.parse_tokens(isolation.cgroup_args))
    namespaces.prepare_shared_view(isolation)
    _home_for_runs()
    bootstrap.prepare_process(libc, seccomp.Filter(seccomp.EVERY_PROCESS), namespaced_zygote=True)
    spaces = _pid_spaces(isolation, PROBE_LIMITS)
    # Again before its first child, after its set-up, where a change of its credentials would unset it.
    libc.die_with(parent)
    try:
        spaces.prepare()
        for pid_inside in (2, 3):
            why = _probe_run((isolation, spaces), pid_inside)
            if why:
                sys.stderr.write(why + "\n")
                return 1
        if isolation.cgroups is not None:  # the cgroup kept with the namespace, lent to both runs
            isolation.cgroups.end([], patience=1.0)
            if isolation.cgroups.doomed:
                sys.stderr.write(f"the runs' cgroup {isolation.cgroups.doomed[0].name} could not be removed\n")
                return 1
    except (OSError, pidspaces.HolderGone) as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    return 0


def _probe_run(namespaced: Namespaced, pid_inside: int) -> str:
    """One run of the probe, and its clean-up: why it failed, or ''."""
    runs: dict[int, Run] = {}
    reply, ours = _fork_run("", PROBE_LIMITS, runs, namespaced)
    if not ours:
        return reply.decode(errors="replace")
    stdin, stdout, stderr, code = ours
    os.close(stdin)
    ready = os.read(stdout, 256)
    unhanded = ""
    if namespaced[0].egress_port and wire.parse_ready(ready) is not None:
        # The copy of its namespace's listener a run hands the server (`wire.hand_over_listener`): taken
        # and closed here, as the server does once the run is over.
        with socket.socket(fileno=os.dup(code)) as channel:
            said, held, _, _ = socket.recv_fds(channel, 64, 1)
        for fd in held:
            os.close(fd)
        if said != wire.LISTENER_MESSAGE or len(held) != 1:
            unhanded = "a run with egress did not hand over its proxy's listener"
    if wire.parse_ready(ready) is not None:
        uids = namespaced[0].uids
        lent = b"assert os.getuid() in %r, os.getuid()\n" % (uids,) if uids else b""
        os.write(code, wire.frame_job(PROBE_CODE % pid_inside + lent))
    os.close(code)
    [(pid, run)] = runs.items()
    _, status = os.waitpid(pid, 0)
    errors = b""
    while chunk := os.read(stderr, 65536):
        errors += chunk
    for fd in (stdout, stderr):
        os.close(fd)
    if wire.parse_ready(ready) is None or status != 0:
        lines = errors.decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"the run ended with wait status {status}"
    spaces = namespaced[1]
    assert run.space is not None
    spaces.clean(run.space)
    answer = os.read(run.space.replies, 1) if bootstrap.readable([run.space.replies], 5) else b""
    spaces.finished(run.space, answer)
    return unhanded or ("" if answer == pidspaces.CLEAN else f"the PID namespace's init answered {answer!r}")


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        told = sys.argv[2].startswith(namespaces.PARENT_OPTION)
        parent = int(sys.argv[2][len(namespaces.PARENT_OPTION) :]) if told else 0
        sys.exit(probe(namespaces.Isolation(sys.argv[2 + told :]), parent))
    serve(
        sys.argv[1],
        [int(arg) for arg in sys.argv[2:6]],
        namespaces.Isolation(sys.argv[7:]) if sys.argv[6:7] == ["namespaces"] else None,
    )
