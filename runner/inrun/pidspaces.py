"""Kept PID namespaces for forked runs, each lent to one run at a time. Stdlib only.

Loaded by the zygote (``zygote.py``) under ``-I -S``, like ``namespaces.py``, never by the server.

A PID namespace made and torn down with each run costs a process more than the run itself: the
namespace's init, forked from the zygote (its page tables copied, the pages its first Python code
touches copied on write) and torn down again, about 1.5 ms of CPU per run (docs/performance.md).
A kept namespace's init is made once. The run is the zygote's own child, forked into the namespace
(``setns``), so the zygote reaps it and reports its end at once, exactly as it does a plain forked
run's. Then the init kills whatever the run left (``kill(-1)`` from PID 1 reaches every process in
the namespace and nothing outside it), and only once nothing is left is the namespace lent again: a
run never meets a process of an earlier one.

A zygote keeps at most `PidSpaces.bound` of them, whatever the load: one for each process of the
zygote's that can be in one at once (its ready interpreters, the runs in flight, the sessions'
anchors: `isolation.kept_pid_namespaces`). A fork that finds none free while one is still being
cleaned waits for that one, up to `CLEAN_SECONDS` and a little, rather than make one more; at the
bound with none cleaning (the server asked for more than its own limits allow), the fork fails.

Runs' namespaces are made in a PID namespace of the zygote's own (`PidSpaces.prepare`), not in the
zygote's: setns back to a PID namespace needs CAP_SYS_ADMIN over the user namespace that owns it,
which a zygote in a user namespace of its own has for a namespace it made and not for the host's.
That namespace's init only holds it; when the zygote dies, it dies (PDEATHSIG, set before the zygote
goes on: a zygote killed before then is seen gone by the holder itself), and the kernel kills every
process in it: every kept init and every run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import socket
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn, Protocol

    from runner.inrun import bootstrap, libc, namespaces, networks, wire

    class SpaceListener(Protocol):
        """Told of each kept namespace's lending and end, by the fd its init answers on
        (`cgroups.RunCgroups`: a cgroup is kept with each namespace, and lent with it)."""

        def lent(self, replies: int) -> None: ...
        def lost(self, replies: int) -> None: ...
else:  # from this file's directory (`bootstrap.load_siblings`): never imported by the server
    import bootstrap
    import libc
    import namespaces
    import networks
    import wire

# What an init answers once its run's processes are all gone (and its network namespace, if it has one,
# is as it was made), when some would not die in time, or when they are gone but the network
# namespace holds something of theirs (networks.py).
CLEAN = b"C"
NOT_CLEAN = b"D"
USED = b"N"
# What the holder says once it will die with the zygote (`PidSpaces.prepare`).
ARMED = b"H"
# How long an init waits for what a run left to die before it gives up on its namespace (a process
# stuck in the kernel): the namespace is then ended instead of lent again.
CLEAN_SECONDS = 1.0
CLEAN_POLL = 0.0005
# How long a fork at the bound waits for a namespace being cleaned (or ended) to be free (or gone).
BOUND_WAIT_SECONDS = CLEAN_SECONDS + 0.5
BOUND_POLL = 0.01
PF_EXITING = 0x4  # in a process's flags (field 9 of /proc/PID/stat) once it has begun to exit


class HolderGone(Exception):
    """The holder of the PID namespace runs' are made in has died: the zygote can fork no run any more."""


class Space:
    """A kept PID namespace: its init (the zygote's child, PID 1 inside), an fd of the namespace, the
    fd of the network namespace its init made with it (-1: runs keep the zygote's network), and the
    pipe and socket ends on which the zygote says a run has ended and the init answers; the host uid
    lent to its run, if any, until every process of that run is gone."""

    __slots__ = ("commands", "init", "listener", "namespace", "network", "replies", "uid")

    def __init__(
        self, init: int, namespace: int, commands: int, replies: int, network: int = -1, listener: int = -1
    ) -> None:
        self.init = init
        self.namespace = namespace
        self.network = network
        # With egress: the proxy's listener its init made in that network namespace, part of it as made;
        # each run hands the server a copy (`wire.hand_over_listener`), and it goes with the namespace.
        self.listener = listener
        self.commands = commands
        self.replies = replies
        self.uid: int | None = None


class PidSpaces:
    """The zygote's kept PID namespaces, and the one they are made in."""

    __slots__ = (
        "_free",
        "_home",
        "_lends_uids",
        "_limits",
        "_listener",
        "_network",
        "_uids",
        "between",
        "bound",
        "by_init",
        "cleaning",
        "holder",
        "holder_reaped",
    )

    def __init__(
        self,
        limits: list[int],
        bound: int,
        uids: list[int] | None = None,
        listener: SpaceListener | None = None,
        *,
        network: bool = False,
        egress: int = 0,
    ) -> None:
        self._limits = limits  # the runs': each init is held to them, but for CPU time
        # Each init makes a network namespace too, lent with it (networks.py), and with egress (the proxy's
        # port) brings its loopback up and listens there for the server's proxy.
        self._network = (network, egress)
        self.bound = max(1, bound)  # kept namespaces at most, free, lent, cleaning or ending alike
        self._listener = listener
        # What the zygote does while a fork waits at the bound: reap the runs that have ended and report
        # them (their namespaces are cleaned only once they are reaped), as its loop would.
        self.between: Callable[[], None] | None = None
        # The host uids a root server's runs are lent, one to each run (`Space.uid`), back once its
        # namespace holds nothing of it: no two live runs share one, nor its process count.
        self._uids = list(reversed(uids or []))
        self._lends_uids = bool(uids)
        self._free: list[Space] = []
        self._home = -1  # the zygote's namespace for its children, between two forks into a kept one
        self.holder = 0  # that namespace's init
        self.holder_reaped = False
        self.by_init: dict[int, Space] = {}  # every kept namespace whose init is not reaped yet
        self.cleaning: dict[int, Space] = {}  # those whose init is cleaning up after a run, by reply fd

    def prepare(self) -> None:
        """Once, in the zygote, before any run: the PID namespace runs' are made in, and its holder."""
        namespaces.unshare(namespaces.CLONE_NEWPID)
        self.holder = _fork_holder()
        self._home = os.open("/proc/self/ns/pid_for_children", os.O_RDONLY | os.O_CLOEXEC)

    def lend(self) -> Space:
        """A kept PID namespace that no live process is in but its init: a free one, else one made now
        while there are fewer than `bound`, else the first to be free again (`_wait_below_bound`)."""
        if not self._free and len(self.by_init) >= self.bound:
            self._wait_below_bound()
        if self._free:
            return self._free.pop()
        commands_r, commands_w = os.pipe()
        try:
            theirs, ours = socket.socketpair()
        except OSError:
            os.close(commands_r)
            os.close(commands_w)
            raise
        try:
            try:
                # Only a process whose children are born in its own PID namespace may make a new one,
                # and the zygote's are born in the one runs' are made in. So a child of the zygote,
                # born there, makes it and exits; with CLONE_PARENT the init is the zygote's child
                # all the same. The init then sends its pid and its namespace (serve_as_init).
                if namespaces.clone(0) == 0:
                    try:
                        if namespaces.clone(namespaces.CLONE_NEWPID | namespaces.CLONE_PARENT) == 0:
                            serve_as_init(commands_r, theirs.fileno(), self._limits, self._lends_uids, *self._network)
                    finally:
                        os._exit(0)
            finally:
                os.close(commands_r)
                theirs.close()  # so that the read below ends if no init comes
            wanted = 1 + bool(self._network[0]) + bool(self._network[0] and self._network[1])
            said, fds, _, _ = socket.recv_fds(ours, 32, wanted)
            if len(fds) != wanted or not said.isdigit():
                for fd in fds:
                    os.close(fd)
                raise OSError(errno.ECHILD, "no init came for a new PID namespace")
        except OSError:
            os.close(commands_w)
            ours.close()
            raise
        space = Space(int(said), fds[0], commands_w, ours.detach(), *fds[1:])
        os.set_blocking(space.replies, False)
        self.by_init[space.init] = space
        return space

    def _wait_below_bound(self) -> None:
        """Take the answers of namespaces being cleaned, and reap inits that have died, until one is
        free or there are fewer than `bound`; OSError (EAGAIN) if none is within `BOUND_WAIT_SECONDS`."""
        deadline = time.monotonic() + BOUND_WAIT_SECONDS
        while not self._free and len(self.by_init) >= self.bound:
            if self.between is not None:
                self.between()
            for init in list(self.by_init):  # an ended one (retired, or killed from outside) is gone once reaped
                with contextlib.suppress(ChildProcessError):
                    if os.waitpid(init, os.WNOHANG)[0]:
                        self.lost(init)
            left = deadline - time.monotonic()
            if self._free or len(self.by_init) < self.bound:
                return
            if left <= 0:
                raise OSError(
                    errno.EAGAIN,
                    f"all {self.bound} kept PID namespaces of this zygote are in use "
                    "(RUNNER_POOL_SIZE + RUNNER_MAX_CONCURRENT + RUNNER_MAX_SESSIONS)",
                )
            for replies in bootstrap.readable(list(self.cleaning), min(left, BOUND_POLL)):
                self.answered(replies)

    def fork(self) -> tuple[int, Space]:
        """os.fork, the child in a kept PID namespace lent to it: (0 in the child, its pid here; the
        namespace), or OSError (then nothing is lent).

        A namespace whose init was killed from outside takes no process any more (ENOMEM), and the
        zygote may not have reaped that init yet: it is ended, and the fork tried in another one. If
        the holder is dying, no namespace will ever take one: `HolderGone`. Where runs are lent
        uids, the child's is `Space.uid`; OSError (EAGAIN) if every one is lent.
        """
        if self._lends_uids and not self._uids:
            raise OSError(errno.EAGAIN, "every host uid of this server's block is lent (RUNNER_SANDBOX_UIDS)")
        for _ in range(len(self._free) + 1):
            try:
                space = self.lend()
            except OSError as exc:
                _unless_holder_gone(self.holder, exc)
                raise
            try:
                if self._listener is not None:
                    self._listener.lent(space.replies)
                namespaces.setns(space.namespace, namespaces.CLONE_NEWPID)
            except OSError:
                self._free.append(space)
                raise
            try:
                pid = os.fork()
            except OSError as exc:
                self._go_home()
                if exc.errno != errno.ENOMEM:
                    self._free.append(space)
                    raise
                self.retire(space)
                _unless_holder_gone(self.holder, exc)
                continue
            if pid:
                self._go_home()
            if self._lends_uids:
                space.uid = self._uids[-1]
                if pid:
                    self._uids.pop()
            return pid, space
        raise OSError(errno.ENOMEM, "no kept PID namespace takes a process")

    def _go_home(self) -> None:
        try:
            namespaces.setns(self._home, namespaces.CLONE_NEWPID)
        except OSError as exc:  # every later fork would land in a lent namespace: the zygote must go
            raise HolderGone(f"cannot return to the PID namespace runs' are made in: {exc}") from exc

    def clean(self, space: Space) -> None:
        """Its run has ended: its init is to kill what the run left, then answer (`finished`), or it
        ends (`lost`)."""
        self.cleaning[space.replies] = space
        with contextlib.suppress(OSError):  # the init is gone, and its namespace with it: `lost` follows
            os.write(space.commands, b"K")

    def answered(self, replies: int) -> None:
        """The init answering on `replies` (a key of `cleaning`) has answered, or died: read it, and
        take the namespace back (`finished`)."""
        try:
            answer = os.read(replies, 1)
        except OSError:
            answer = b""
        self.finished(self.cleaning[replies], answer)

    def finished(self, space: Space, answer: bytes) -> None:
        """The init of `space` answered: the namespace is free again, or ended if a process of the run
        may still be in it, or something of the run in its network namespace."""
        del self.cleaning[space.replies]
        if answer == CLEAN:
            self._take_back_uid(space)
            self._free.append(space)
        else:
            self.retire(space)  # its uid comes back once its init is reaped (`lost`): then nothing is left

    def _take_back_uid(self, space: Space) -> None:
        if space.uid is not None:
            self._uids.append(space.uid)
            space.uid = None

    def lost(self, pid: int) -> None:
        """A child of the zygote that is not a run was reaped. If it is a kept namespace's init (and
        so every process in its namespace is gone), forget the namespace."""
        if pid == self.holder:
            self.holder_reaped = True
        space = self.by_init.pop(pid, None)
        if space is None:
            return
        if self._listener is not None:
            self._listener.lost(space.replies)
        if space in self._free:
            self._free.remove(space)
        self.cleaning.pop(space.replies, None)
        self._take_back_uid(space)
        for fd in (space.namespace, space.commands, space.replies, space.network, space.listener):
            if fd >= 0:
                os.close(fd)

    def retire(self, space: Space) -> None:
        """End a kept namespace: its init is killed, and every process in it with it (`lost` follows)."""
        if space in self._free:
            self._free.remove(space)
        with contextlib.suppress(ProcessLookupError):
            os.kill(space.init, signal.SIGKILL)

    def end(self) -> list[int]:
        """When the zygote stops: kill every init and the holder; their pids, to reap."""
        for space in list(self.by_init.values()):
            self.retire(space)
        if self.holder_reaped:
            return list(self.by_init)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.holder, signal.SIGKILL)  # not reaped: the pid cannot be anyone else's
        return [*self.by_init, self.holder]


def _fork_holder() -> int:
    """Fork the init of the PID namespace this process's children are born in, which only holds it: its
    pid, once it will die with this process (`HolderGone` if it died first).

    Its parent's end of a socket pair tells it whether its parent died before it set that signal (its
    getppid() is 0 either way: its parent is outside its namespace), and it says on its own end once it
    has, so no zygote goes on with a holder that would outlive it."""
    ours, theirs = (end.detach() for end in socket.socketpair())
    try:
        holder = os.fork()
    except OSError:
        os.close(ours)
        os.close(theirs)
        raise
    if holder == 0:
        try:
            signal.set_wakeup_fd(-1)
            os.close(ours)
            # A parent killed before this line has hung up its end; any later, and the kernel kills
            # this holder, and with it every process in its namespace.
            libc.die_with(parent_end=theirs)
            os.write(theirs, ARMED)
            os.closerange(0, 1 << 16)
            os.setsid()
            while True:
                signal.pause()
        finally:
            os._exit(1)
    os.close(theirs)
    try:
        armed = os.read(ours, 1)
    finally:
        os.close(ours)
    if armed != ARMED:  # its end closed unsaid: it has died
        with contextlib.suppress(ChildProcessError):
            os.waitpid(holder, 0)
        raise HolderGone("the holder of the PID namespace runs' are made in died as it started")
    return holder


def _unless_holder_gone(holder: int, exc: OSError) -> None:
    """HolderGone if `exc` is ENOMEM (a fork under it refused) or ECHILD (no init came: the maker,
    born under it, was killed with it before it made one) because the `holder` is dying or dead: no
    process can be made under it any more. (Its death waits for the zygote to reap what died with
    it, so it is `PF_EXITING` in its stat, not yet a zombie, when a fork fails.)"""
    if exc.errno not in (errno.ENOMEM, errno.ECHILD):
        return
    try:
        with open(f"/proc/{holder}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        dying = fields[0] in (b"Z", b"X") or int(fields[6]) & PF_EXITING
    except (OSError, IndexError, ValueError):
        dying = True
    if dying:
        raise HolderGone("the PID namespace runs' are made in has ended") from exc


def serve_as_init(
    commands: int,
    replies: int,
    limits: list[int],
    kills_other_uids: bool = False,
    network: bool = False,
    egress: int = 0,
) -> NoReturn:
    """PID 1 of a kept PID namespace: told on `commands` that a run has ended, kill whatever is left of
    it, then answer on `replies`: `CLEAN`, `NOT_CLEAN`, or, where it made a network namespace for its
    runs (`network`), `USED` if that namespace is not as it was made (`networks.Watch`).

    It ignores SIGCHLD, so the kernel reaps what is orphaned to it, and every signal from inside the
    namespace (PID 1 gets none it has no handler for): nothing a run does makes it spend CPU. It is
    not dumpable (nothing can trace or read it) and holds no capability but, where runs are lent host
    uids of their own (`kills_other_uids`), CAP_KILL: its runs are not its uid, and in its PID
    namespace nothing but theirs is in its reach.
    """
    try:
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        os.setsid()
        for target, fd in enumerate((commands, replies)):
            os.dup2(fd, target)
        os.closerange(2, bootstrap.MAX_FD)  # the zygote's socket, other runs' pipes, other namespaces
        # getppid() is 0 here either way (the zygote is outside this PID namespace): if the zygote
        # died before this line, its holder has died with it, and the kernel kills this init, in a
        # namespace below the holder's, with every other process there.
        libc.die_with()
        watch = None
        listener = -1
        egress = egress if network else 0
        if network:
            namespaces.unshare(namespaces.CLONE_NEWNET)  # while it still may: it drops every capability below
            if egress:
                # Before the namespace is read as made: its routes include the loopback's, its sockets the
                # proxy's listener, which stays as long as the namespace (the zygote keeps it), so that a
                # run that made no connection leaves the namespace as made.
                networks.loopback_up()
                listener = wire.proxy_listener(egress)
            watch = networks.Watch()
        # Within a run's reach, so within a run's limits, but for CPU time, which adds up from run to run.
        for name, soft, hard in bootstrap.wanted_limits(*limits):
            if name != "RLIMIT_CPU":
                which = getattr(resource, name)
                resource.setrlimit(which, bootstrap.lowered(soft, hard, resource.getrlimit(which)[1]))
        libc.privilege_dropper(kept=1 << libc.CAP_KILL if kills_other_uids else 0)(None)
        # Its pid as the zygote knows it (/proc here is the zygote's, of the zygote's PID namespace), and
        # its namespace: a zygote in a user namespace may not open a non-dumpable process's /proc/PID/ns.
        with socket.socket(fileno=1) as channel:
            held = [os.open(f"/proc/self/ns/{kind}", os.O_RDONLY) for kind in ("pid", "net")[: 1 + network]]
            socket.send_fds(channel, [os.readlink("/proc/self").encode()], [*held, *([listener] if egress else [])])
            for fd in [*held, *([listener] if egress else [])]:
                os.close(fd)
            channel.detach()
        while os.read(0, 1):  # EOF: the zygote is gone
            if not _kill_all():
                os.write(1, NOT_CLEAN)
            else:
                os.write(1, CLEAN if watch is None or watch.as_made() else USED)
    finally:
        os._exit(0)


def _kill_all() -> bool:
    """Kill every other process in this PID namespace: True once none is left, not even a zombie (the
    kernel reaps those of this init's children; a run's CLONE_PARENT children are the zygote's)."""
    deadline = time.monotonic() + CLEAN_SECONDS
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(CLEAN_POLL)
