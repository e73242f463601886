"""A session, the run's side (runner/processes/keeper.py is the server's): its anchor, the keeper of its last
good state, and each call forked from that state. Standard library only.

A session starts as an ordinary run interpreter, ready (its limits applied, its view built, its uid
taken): its job says ``keeper`` instead of carrying code (`wire.frame_keeper`), and it becomes the
session's **anchor** (`anchor`). The anchor never runs code of the session's. It forks the first
**keeper**, a process that holds the session's state (its ``__main__``, its imports, its random
generators) and does nothing but fork one **call** per request. A call runs its code as a one-shot run
does (`bootstrap.run`, in the keeper's ``__main__``, in the session's directory), and if its code
ended, offers the state it leaves as the **candidate** for the next keeper (`offer_state`): itself,
when it has one thread left (it leaves the group the server kills, reports its end and stays), or
else a fork of itself (one thread, a process group of its own) while it reports its end and exits
like any run. The server decides from the whole result whether the call ended ok (its output within
the cap, no limit met, ...) and says so:

- kept: the candidate becomes the keeper, the old keeper is killed;
- rolled back: the candidate is killed, the old keeper stays, and the session's directory (and a
  sandbox's /dev/shm and /run) is put back as it was (`Snapshot`, which the anchor holds: no call
  can reach its memory).

A call's channel to the anchor, one message a packet: ``P <pid> <threads>`` its candidate (its own pid
when it is its own); ``N <why>`` its state cannot be kept; ``D <utime> <stime> <maxrss>`` (a call that
is its own candidate) its end reported, its fds closed; anchor to candidate: ``K`` kept.

Either way the anchor, a child subreaper, then kills every other process the call left (orphans
come to it), so that nothing of a call lives on but the state it was kept in.

The anchor and its wire with the server are `anchor`'s.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
from _signal import SIG_DFL as _SIG_DFL  # type: ignore[import-not-found]
from _signal import SIGCHLD as _SIGCHLD
from _signal import signal as _set_handler

# A session's anchor loads this module (`bootstrap.Siblings.keeper`; the zygote, once for its forks): the
# socket modules are imported where a session needs them, not here, and before any code of the session's.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import array
    import socket
    from collections.abc import Callable
    from typing import Any

    from runner.inrun import forkhooks, libc, sealing, workdir
    from runner.inrun.anchor import MAX_LINE
    from runner.inrun.anchor import anchor as anchor
    from runner.inrun.library import Library
    from runner.inrun.sweeps import SWEEP_SECONDS
else:  # from this file's directory (`bootstrap.load_siblings`): never imported by the server
    import forkhooks
    import libc
    import sealing
    import workdir
    from anchor import MAX_LINE
    from anchor import anchor as anchor
    from library import Library
    from sweeps import SWEEP_SECONDS

# A call's channel to the anchor: kept open through its code, since the candidate it forks is
# announced on it (and becomes the keeper's channel). Not inheritable by what the code executes. Both
# sit at the top of a run's open files (bootstrap.OPEN_FILES), out of the way of what the code opens
# and keeps: a kept call's open files stay open for the next.
CHANNEL_FD = 254
# Where a keeper holds its channel.
KEEPER_FD = 255
# Where the fds a call is handed wait before they are put in place.
HANDED_ABOVE = 200


class SessionCarry(sealing.Holder):
    """What a call knows of its session, carried from keeper to candidate: the number of calls kept,
    what a call forked ahead does while it waits for its pipes (`bootstrap.serve_session`), what the
    state set that only a call may run (`sealing.seal`), and whether this process still owes CPython's
    after-fork work (`libc.fork_bare`)."""

    kept_calls = 0
    warm_up: Callable[[], None] | None = None
    sealed: sealing.Sealed | None = None
    fork_hooks: forkhooks.ForkHooks | None = None
    deferred: list[object] = []  # noqa: RUF012  (each process's own: set by `forkhooks.after_bare_fork`)
    mapped = False
    monitored = False
    home = ""
    library: Library | None = None  # recorded in the session's first keeper


# How long a call waits for its candidate to say whether it can be kept: some ms (`sealing.seal_again`).
CANDIDATE_LOOK_SECONDS = 10.0
# Why a call whose state changed what a keeper cannot put back is not kept (`Library.unchanged`).
CHANGED_LIBRARY = "it changed what a keeper cannot put back (a library class's bases or dictionary)"
# Why its candidate refused itself (`fork_candidate`), by what it said.
CANDIDATE_REFUSED = {
    b"0": CHANGED_LIBRARY,
    b"2": "its candidate had a thread of its own",
    b"3": "its candidate held memory shared with another process, or a file of its own memory",
}


def filename(calls: int) -> str:
    """The name a session's call compiles under: tracebacks through code an earlier call defined show
    that call's lines."""
    return f"<run_python call {calls + 1}>"


class Kept(BaseException):
    """Raised in a candidate the server kept: it is the keeper now, holding `channel`. It unwinds the
    call that forked it (`bootstrap.serve_session` catches it), so that a keeper's stack does not grow
    with every call kept."""

    def __init__(self, channel: socket.socket, ready: tuple[int, socket.socket] | None = None) -> None:
        super().__init__()
        self.channel = channel
        self.ready = ready  # the call it forked ahead, if it did so before it was kept


class Forked(BaseException):
    """Raised in a call forked ahead by a call that offered itself as the next state
    (`_wait_to_be_kept`), once it has its `fds`: it unwinds what it was forked in, to run as a call
    (`bootstrap.serve_session`)."""

    def __init__(self, fds: list[int]) -> None:
        super().__init__()
        self.fds = fds


def serve_as_keeper(
    channel: socket.socket, *, first: bool = False, ahead: tuple[int, socket.socket] | None = None
) -> list[int]:
    """Be a keeper: hold the state, and run one call per ``C`` from the anchor; say its pid, wait
    for it, say its end. Returns only in a call, with the fds it was handed; EOF or being killed ends
    the keeper. The `first` keeper of a session holds nothing of the anchor's; a later one (a kept
    candidate) keeps the files its calls opened.

    The next call is forked ahead (`_fork_ready`), when the keeper begins and when the anchor says
    ``F`` (after a roll-back): a ``C`` then only hands it its fds, and the fork of a keeper that
    holds a large state (a few milliseconds with pandas loaded) is not on the call's path. A keeper
    that was a call may have forked it already (`ahead`)."""
    socket = _library("socket")
    try:
        if first:
            sys.addaudithook(sealing.audit(SessionCarry))  # type: ignore[arg-type]
            SessionCarry.fork_hooks = forkhooks.find_fork_hooks()
            SessionCarry.library = Library()
        if not sealing.seal(SessionCarry):
            os._exit(1)
        _quiet_signals()
        if channel.fileno() != KEEPER_FD:
            os.dup2(channel.fileno(), KEEPER_FD, inheritable=False)
            channel.close()
        else:
            channel.detach()
        channel = socket.socket(fileno=KEEPER_FD)
        if first:
            null = os.open(os.devnull, os.O_RDWR)
            for target in (0, 1, 2):
                os.dup2(null, target)
            os.closerange(3, KEEPER_FD)
        offsets = sealing.open_files(SessionCarry, KEEPER_FD)
        ready = _fork_ready(channel) if ahead is None else ahead
        if isinstance(ready, list):
            return ready
        _announce(channel, ready)
        while True:
            message, fds, _, _ = channel.recvmsg(MAX_LINE, socket.CMSG_SPACE(8 * 4))
            received = _received(fds)
            if not message:
                os._exit(0)
            if message == b"F" and ready is None:  # the last call was rolled back
                sealing.put_back_files(SessionCarry, offsets)
                if sealing.nameless_file():  # it took the name of a file the state holds open: lost
                    channel.send(b"L")  # found by a second look: "as it was", its writes there kept
                    os._exit(0)
                ready = _fork_ready(channel)
                if isinstance(ready, list):
                    return ready
                _announce(channel, ready)
            if message != b"C" or len(received) != 5:
                for fd in received:
                    os.close(fd)
                continue
            if ready is None:  # none ahead (that fork failed): fork the call now, as it comes
                ready = _fork_ready(channel)
                if isinstance(ready, list):
                    return ready
                if ready is None:
                    os._exit(1)  # no call can be forked: the session's state is as good as lost
            pid, hand = ready
            ready = None
            # Said before the call has its fds: a call may kill its keeper as it starts, and the
            # anchor must know by then that a call runs (its end then decides the session's).
            channel.send(b"S %d" % pid)
            try:  # noqa: SIM105  (contextlib is not imported in runs)
                hand.sendmsg([b"C"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _int_array(received))])
            except OSError:
                pass  # the ready call died: its end is told below, as any call's
            hand.close()
            for fd in received:
                os.close(fd)
            _, status, usage = os.wait4(pid, 0)
            channel.send(b"X %d %d %r %r %d" % (pid, status, usage.ru_utime, usage.ru_stime, usage.ru_maxrss))
    except BaseException:  # a keeper never returns but into a call
        os._exit(1)


def _announce(channel: socket.socket, ready: tuple[int, socket.socket] | None) -> None:
    """``A <pid>``: the call forked ahead, and the keeper now idle: the anchor kills every other
    process under the keeper (what a candidate's at-fork hooks started, say), so that nothing of the
    session runs between calls but the anchor, the keeper and that call."""
    if ready is not None:
        try:  # noqa: SIM105  (contextlib is not imported in runs)
            channel.send(b"A %d" % ready[0])
        except OSError:
            pass


def _quiet_signals() -> None:
    """What a keeper does not take from the calls it was made of: a wake-up fd, a SIGCHLD handler
    (which would run a call's code in the keeper as it reaps); the calls it forks do not either."""
    signal.set_wakeup_fd(-1)
    # _signal's own: signal.signal makes an enum member of the handler it replaces (a review: the state's
    # enum.EnumType.__call__ ran here).
    _set_handler(_SIGCHLD, _SIG_DFL)


def _fork_ready(channel: socket.socket) -> tuple[int, socket.socket] | list[int] | None:
    """Fork the next call ahead. In the keeper: its pid and the socket its fds go down (None if the
    fork failed). In the call: the fds, once they come (a call is then on its way, as if just forked).
    While it waits, the call goes once through what a call does before and after its code
    (`SessionCarry.warm_up`), as a pooled interpreter does: the pages that copies are copied then, not
    once its code has come."""
    socket = _library("socket")
    # A kept state holds what its calls freed and malloc kept (40 MB after `pd.read_csv` of 4 MB):
    # every fork from it copies the page tables of that too (1.2 against 0.9 ms), and it counts as the
    # session's memory. Released here, before each fork: some 20 us when there is nothing to release.
    libc.trim_heap()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    keeper = os.getpid()
    try:
        # Not os.fork: the state's at-fork hooks (os.register_at_fork's before and after_in_parent)
        # would run here, in the keeper; its after_in_child ones run in the call as it begins.
        pid = libc.fork_bare()
    except OSError:
        ours.close()
        theirs.close()
        return None
    if pid:
        theirs.close()
        return pid, ours
    try:
        forkhooks.after_bare_fork(SessionCarry)
        ours.close()
        channel.close()  # the keeper's: the anchor sees the keeper's end as the end of this socket
        libc.prctl(libc.PR_SET_PDEATHSIG, signal.SIGKILL)  # a ready call dies with its keeper
        if os.getppid() != keeper:  # it died before that
            os._exit(0)
        if SessionCarry.warm_up is not None:
            try:  # noqa: SIM105  (contextlib is not imported in runs)
                SessionCarry.warm_up()
            except Exception:  # noqa: S110  (only a head start: the call does it all again)
                pass
        message, fds, _, _ = theirs.recvmsg(16, socket.CMSG_SPACE(8 * 4))
        received = _received(fds)
        if message != b"C" or len(received) != 5:
            os._exit(0)
        theirs.close()
    except BaseException:
        os._exit(1)
    return received


def _int_array(fds: list[int]) -> array.array[int]:
    array = _library("array")
    return array.array("i", fds)  # type: ignore[no-any-return]


def _received(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """The fds a message carried (`anchor._fds`, with the library's modules: `_library`)."""
    array, socket = _library("array"), _library("socket")
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return list(fds)


def _library(name: str) -> Any:
    """A module of the standard library, for a process that may be sealed (`sealing.library_module`):
    never an import statement, which asks the module's spec, the state's to change."""
    return sealing.library_module(SessionCarry, name)


def enter_call(fds: list[int], home: str) -> None:
    """In a call, just forked from the keeper: its fds in place (0-2 its pipes, 3 its job socket,
    `CHANNEL_FD` its channel), the keeper's channel closed, a process group of its own, in `home`.
    What earlier calls opened and kept stays open."""
    fcntl = _library("fcntl")

    # A group of its own, for the server to kill, in the keeper's session: a call that becomes the
    # keeper (`offer_state`) moves to the keeper's group, which a session leader could not.
    os.setpgid(0, 0)
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HANDED_ABOVE) for fd in fds]
    for fd in fds:
        os.close(fd)
    for target, fd in enumerate(moved[:4]):
        os.dup2(fd, target)
    os.dup2(moved[4], CHANNEL_FD, inheritable=False)
    for fd in moved:
        os.close(fd)
    os.chdir(home)


def begin_call() -> None:
    """In a call, its job read: from now on it outlives its keeper, as a call forked on demand would
    (one that kills its keeper and then ends ok is kept). Until then, handed its pipes ahead and
    waiting for its job, it died with its keeper: a keeper killed while the session is idle ends it.
    Here, and not before, the state's own code may run again: its after_in_child hooks (the keeper
    forked this call bare, `forkhooks.after_bare_fork`), then what `seal` took out."""
    libc.prctl(libc.PR_SET_PDEATHSIG, 0)
    sealing.unseal(SessionCarry)


def files_before(home: str, identity: tuple[int, int]) -> dict[str, tuple[int, int, int, int]]:
    """What the session's directory holds as a call starts, for its report to return only what the
    call made or changed (no CRC: -1 says the inode, size and time suffice)."""
    return {
        path: (info.st_ino, info.st_size, info.st_mtime_ns, -1)
        for path, info in workdir.walk(home, identity)
        if info is not None
    }


def write_call_files(files: list[tuple[str, bytes]]) -> dict[str, tuple[int, int, int, int]]:
    """The call's files, over what the session's directory holds at their paths."""
    for path, _ in files:
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                os.unlink(path)
        except FileNotFoundError:
            pass
    return workdir.write_inputs(files)


def offer_state(channel_fd: int) -> Callable[[], None] | None:
    """At the end of a call whose code ended: offer the state it leaves as the session's next, on the
    call's channel (``P <pid> <threads>``), before the call reports its end.

    A call left with one thread, with the CPU time a keeper needs, holding nothing that reaches its own
    memory from outside it, and whose processes are all gone once killed, is that state itself: it
    leaves the group the server kills, and once it has reported (the function returned here, called
    then) it says ``D`` and waits to be kept (`Kept`) or killed. That takes no fork of a process that
    may map a large state (several milliseconds with pandas loaded), and no teardown of one, off a
    call's path. Any other call forks a candidate of its state (`fork_candidate`), which a fork leaves
    without those threads, fds' reach and processes."""
    if not sealing.seal(SessionCarry):  # from here on, whatever this process becomes, no code of the call's runs in it
        return None
    alone = SessionCarry.sealed is not None and SessionCarry.sealed.alone  # no thread to undo the seal
    resource = _library("resource")  # once sealed: never an import statement (`_library`)

    threads = not alone and sealing.threads() > 1  # any thread, not only `threading`'s: C code's and `_thread`'s too
    if not alone and not threads:  # a thread since ended, after the seal
        if not sealing.seal_again(SessionCarry):
            _refuse(channel_fd, CHANGED_LIBRARY)
            return None
        # Alone as that seal's clean round looked, or forked (its candidate seals again too): a count now
        # would miss a thread that acted after the round's reads, then ended (as `seal`'s found).
        threads = SessionCarry.sealed is None or not SessionCarry.sealed.alone
    # The looks after that seal: what a thread left before it ended is part of what they look at (found by
    # a review: shared memory made after them was kept).
    shared = sealing.share_nothing(SessionCarry) or sealing.nameless_file()
    if shared:
        _refuse(channel_fd, shared)
        return None
    own = resource.getrusage(resource.RUSAGE_SELF)
    cpu_limit = resource.getrlimit(resource.RLIMIT_CPU)[0]
    # A keeper's CPU time counts against the call's RLIMIT_CPU: one that has used more than a quarter
    # of it would, after forking a few thousand calls, be killed (and its session lost).
    spent = cpu_limit != resource.RLIM_INFINITY and own.ru_utime + own.ru_stime > cpu_limit / 4
    if threads or spent or sealing.reaches_own_memory():
        fork_candidate(channel_fd, threads)
        return None
    socket = _library("socket")
    # What a fork would not carry: being a subreaper (orphans of what the call started would come to
    # the keeper, out of the anchor's sweep), a parent-death signal, pending timers.
    libc.prctl(libc.PR_SET_CHILD_SUBREAPER, 0)
    libc.prctl(libc.PR_SET_PDEATHSIG, 0)
    for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
        signal.setitimer(timer, 0)
    try:
        os.setpgid(0, os.getpgid(os.getppid()))
    except OSError:
        fork_candidate(channel_fd, threads)
        return None
    if not _end_own_processes():
        fork_candidate(channel_fd, threads)
        return None
    # A call may have made itself dumpable again; the keeper it becomes must not be, or a later call
    # could write the kept state through /proc/PID/mem and then be rolled back.
    libc.set_dumpable(False)
    channel = socket.socket(fileno=channel_fd)
    try:
        channel.send(b"P %d 0" % os.getpid())
    finally:
        channel.detach()
    return lambda: _wait_to_be_kept(channel_fd)


def _refuse(channel_fd: int, why: str) -> None:
    """``N <why>``: the call's state cannot be kept (it is rolled back, and its result says why)."""
    socket = _library("socket")
    channel = socket.socket(fileno=channel_fd)
    try:
        channel.send(b"N " + why.encode(errors="replace")[:300])
    except OSError:
        pass
    finally:
        channel.detach()


def _end_own_processes() -> bool:
    """Kill and reap every process the call started that is still its child or in its group (a keeper
    has no children but the calls it forks; what they left goes to the anchor, which kills it); False
    if some are still there after SWEEP_SECONDS (then a candidate is forked instead)."""
    time = _library("time")
    try:  # noqa: SIM105  (contextlib is not imported in runs)
        os.killpg(os.getpid(), signal.SIGKILL)  # the group it left: its own pid names it
    except OSError:
        pass
    deadline = time.monotonic() + SWEEP_SECONDS
    while True:
        try:
            with open(f"/proc/self/task/{os.getpid()}/children", "rb") as listing:
                children = [int(pid) for pid in listing.read().split()]
        except (OSError, ValueError):
            return False
        for pid in children:
            try:  # noqa: SIM105
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)


def _wait_to_be_kept(channel_fd: int) -> None:
    """A call that offered itself as the next state, its end reported: nothing of the server's held
    (its pipes and job socket closed), ``D`` with its usage (the anchor tells it as the call's end),
    then kept (``K``: `Kept`) or killed. Never returns.

    The session's next call is forked ahead right after ``D``, while the server answers and gives
    its verdict, rather than once kept; if this call is rolled back, that one dies with it."""
    resource, socket = _library("resource"), _library("socket")
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        os.close(null)
        try:  # noqa: SIM105  (contextlib is not imported in runs)
            os.close(3)
        except OSError:
            pass
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        SessionCarry.kept_calls += 1
        channel = socket.socket(fileno=channel_fd)
        channel.send(
            b"D %r %r %d"
            % (
                own.ru_utime + children.ru_utime,
                own.ru_stime + children.ru_stime,
                max(own.ru_maxrss, children.ru_maxrss),
            )
        )
        _quiet_signals()
        ready = _fork_ready(channel)
        if isinstance(ready, list):
            raise Forked(ready)
        answer = channel.recv(16)
    except Forked:
        raise
    except BaseException:
        os._exit(0)
    if answer != b"K":
        os._exit(0)
    raise Kept(channel, ready)


def fork_candidate(channel_fd: int, threads: bool) -> None:
    """Fork the candidate state and, once it has looked at what the call's threads did since the seal,
    announce it on the call's channel (``P <pid> <threads>``), or say why it cannot be kept (``N``); the
    call goes on to report its end. The candidate waits to be kept (``K``: it raises `Kept`, and
    becomes the keeper) or killed."""
    socket = _library("socket")
    try:
        looked, looks = socket.socketpair()  # the candidate says there whether it can be kept (one byte)
    except OSError as exc:
        _refuse(channel_fd, f"its candidate could not be forked: {exc.strerror}")
        return
    try:
        # Bare, as the keeper forks: the state's at-fork hooks would run in the candidate (one that
        # starts a thread would leave it in the keeper). The candidate has one thread, the forking one;
        # with others here, through os.fork (`forkhooks.fork_with_threads`).
        pid = forkhooks.fork_with_threads(SessionCarry) if threads else libc.fork_bare()
    except OSError as exc:
        looked.close()
        looks.close()
        _refuse(channel_fd, f"its candidate could not be forked: {exc.strerror}")
        return
    if pid:
        looks.close()
        _announce_candidate(channel_fd, pid, threads, looked)
        return
    try:
        looked.close()
        if not threads:  # (os.fork did that work)
            forkhooks.after_bare_fork(SessionCarry)  # the hooks kept back for the call: never run here
        # Refused (not kept): what the call's threads undid since the seal (0); a thread (2), memory shared
        # or reached (3), that code of the state's left as this child began (os.fork's frees what only the
        # other threads held, finalisers and all: found by a review; a hook put before its guard).
        look = b"1" if sealing.seal_again(SessionCarry) else b"0"
        if look == b"1" and sealing.threads() != 1:
            look = b"2"
        elif look == b"1":
            shared = sealing.share_nothing(SessionCarry) or sealing.nameless_file()
            look = b"3" if shared or sealing.reaches_own_memory() else look
        looks.send(look)
        if look != b"1":
            os._exit(0)
        looks.close()
        os.setpgid(0, 0)  # the same, from this side: whichever runs first
        # A call may have made itself dumpable again; the keeper it may become must not be, or a
        # later call could write the kept state through /proc/PID/mem and then be rolled back.
        libc.set_dumpable(False)
        # Nothing of the call's: the server waits for its pipes to close, and the job socket is its.
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        os.close(null)
        os.close(3)
        SessionCarry.kept_calls += 1
        channel = socket.socket(fileno=channel_fd)
        answer = channel.recv(16)
    except BaseException:
        os._exit(0)
    if answer != b"K":
        os._exit(0)
    raise Kept(channel)


def _announce_candidate(channel_fd: int, pid: int, threads: bool, looked: Any) -> None:
    """In the call: its candidate `pid` in a group of its own before the call reports its end (the
    server then has the call's group killed), then announced once it said it can be kept (`looked`):
    from here, before the call's report, which the candidate may come after; after its look: one
    announced, then refused, was a call answered as kept, whose session then ended (found by a test)."""
    socket = _library("socket")
    try:  # noqa: SIM105  (contextlib is not imported in runs)
        os.setpgid(pid, pid)
    except OSError:
        pass  # gone already: its socket says so
    try:
        looked.settimeout(CANDIDATE_LOOK_SECONDS)  # another thread's fork may hold its end open too
        said = looked.recv(1)
    except TimeoutError:
        said = b""
        os.kill(pid, signal.SIGKILL)  # it holds its end: alive, not reaped (the call's child)
    except OSError:
        said = b""
    finally:
        looked.close()
    if said != b"1":
        _refuse(channel_fd, CANDIDATE_REFUSED.get(said, "its candidate is gone"))
        return
    try:
        channel = socket.socket(fileno=channel_fd)
        try:
            channel.send(b"P %d %d" % (pid, threads))
        finally:
            channel.detach()
    except OSError:
        pass  # its channel gone: the call is rolled back
