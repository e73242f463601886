"""Sessions, from inside the sandbox: the anchor of one session, the keeper of its last good state,
and each call forked from that state. Standard library only.

A session starts as an ordinary run interpreter, ready (its limits applied, its view built, its uid
taken): its job says ``keeper`` instead of carrying code (`wire.frame_keeper`), and it becomes the
session's **anchor** (`anchor`). The anchor never runs code of the session's. It forks the first
**keeper**, a process that holds the session's state (its ``__main__``, its imports, its random
generators) and does nothing but fork one **call** per request. A call runs its code as a one-shot run
does (`bootstrap.run`, in the keeper's ``__main__``, in the session's directory), and if its code
ended, forks a **candidate** of the state it leaves (one thread, a process group of its own), then
reports its end and exits like any run. The server decides from the whole result whether the call
ended ok (its output within the cap, no limit met, ...) and says so:

- kept: the candidate becomes the keeper, the old keeper is killed;
- rolled back: the candidate is killed, the old keeper stays, and the session's directory is put
  back as it was (`Snapshot`, which the anchor holds: no call can reach its memory).

Either way the anchor, a child subreaper, then kills every other process the call left (orphans
come to it), so that nothing of a call lives on but the state it was kept in.

The wire, server to anchor, on the run's job socket (fd 3), one line a message: ``C`` with the
call's four fds (stdin, stdout, stderr, job socket; SCM_RIGHTS): fork a call; ``K``: kill the running
call's group; ``V 1`` or ``V 0``: keep or roll back the last call; EOF: end the session. Anchor to
server: ``R`` once ready; ``S <pid>`` a call was forked; ``X <pid> <wait status> <utime> <stime>
<maxrss>`` it ended; ``P <keepable> <threads> <why...>``, once per call, as soon as it is known
whether the call can be kept (1: its code ran to its end, and its files could be read; threads: 1 if
the call left threads, which a fork does not carry; why not, or ``-``), so that the server can answer
before the verdict; ``V <kept> <threads> <why...>`` the verdict is done; ``E <why>`` the session is
over (its state was lost).
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import time

# Every run loads this module (`bootstrap.RUN_SIBLINGS`), and a spawned one pays for its imports
# before it is ready: the socket modules are imported where a session needs them, not here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import array
    import socket
    from collections.abc import Callable
    from typing import NoReturn

    from runner.inrun import libc, workdir
    from runner.inrun.snapshot import Snapshot
else:  # from this file's directory (`bootstrap.load_siblings`): never imported by the server
    import libc
    import workdir
    from snapshot import Snapshot

# A call's channel to the anchor: kept open through its code, since the candidate it forks is
# announced on it (and becomes the keeper's channel). Not inheritable by what the code executes. Both
# sit at the top of a run's open files (bootstrap.OPEN_FILES), out of the way of what the code opens
# and keeps: a kept call's open files stay open for the next.
CHANNEL_FD = 254
# Where a keeper holds its channel.
KEEPER_FD = 255
# Where the fds a call is handed wait before they are put in place.
HANDED_ABOVE = 200
MAX_LINE = 512
# How long the anchor waits for a candidate to say it exists (it was forked before the call's report
# reached the server) and for what a call left to die.
CANDIDATE_SECONDS = 10.0
SWEEP_SECONDS = 2.0


class Session:
    """What a call knows of its session, carried from keeper to candidate: the number of calls kept."""

    kept_calls = 0


def filename(calls: int) -> str:
    """The name a session's call compiles under: tracebacks through code an earlier call defined show
    that call's lines."""
    return f"<run_python call {calls + 1}>"


# --- the anchor -----------------------------------------------------------------------------------


class _Call:
    __slots__ = ("announced", "candidate", "channel", "ended", "kill_asked", "looked", "pid", "threads", "why")

    def __init__(self, channel: socket.socket) -> None:
        self.channel = channel  # the anchor's end of the call's channel (the candidate speaks on it)
        self.pid = 0
        self.candidate = 0
        self.threads = False
        self.ended = False
        self.kill_asked = False
        self.announced = False  # its P line said to the server
        self.why = b""  # why it cannot be kept, as said in that line
        self.looked: dict[str, tuple[object, ...]] = {}  # the directory as the candidate found it


class Anchor:
    """The anchor's state: the keeper, the call in progress, the snapshot of the directory."""

    def __init__(self, control: socket.socket, home: str, fork_keeper: Callable[[socket.socket], None]) -> None:
        import socket

        self.control = control
        self.home = home
        self.buffer = b""
        self.snapshot = Snapshot(home)
        self.call: _Call | None = None
        self.keeper = 0
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                fork_keeper(theirs)
            finally:
                os._exit(1)
        theirs.close()
        self.keeper = pid
        self.keeper_channel: socket.socket | None = ours
        self.wake = -1  # the read end of SIGCHLD's wake-up pipe (`serve`)

    def say(self, line: bytes) -> None:
        try:
            self.control.sendall(line + b"\n")
        except OSError:
            _end_session()

    def serve(self, wake: int) -> NoReturn:
        import select

        self.wake = wake
        self.say(b"R")
        while True:
            watched: list[socket.socket | int] = [self.control, wake]
            if self.keeper_channel is not None:
                watched.append(self.keeper_channel)
            if self.call is not None and self.call.candidate == 0:
                watched.append(self.call.channel)
            readable, _, _ = select.select(watched, [], [])
            if wake in readable:
                os.read(wake, 4096)
                self.reap()
            if self.keeper_channel is not None and self.keeper_channel in readable:
                self.from_keeper()
            if self.call is not None and self.call.channel in readable and self.call.candidate == 0:
                self.from_candidate(self.call)
            if self.control in readable:
                self.from_server()

    def from_server(self) -> None:
        import socket

        message, fds, _, _ = self.control.recvmsg(MAX_LINE, socket.CMSG_SPACE(8 * 4))
        received = _fds(fds)
        if not message:
            _end_session()
        self.buffer += message
        while b"\n" in self.buffer:
            line, _, self.buffer = self.buffer.partition(b"\n")
            if line == b"C":
                self.start_call(received)
                received = []
            elif line == b"K" and self.call is not None:
                self.call.kill_asked = True
                if self.call.pid:
                    _kill_group(self.call.pid)
            elif line in (b"V 1", b"V 0"):
                self.verdict(line == b"V 1")
        for fd in received:
            os.close(fd)

    def start_call(self, fds: list[int]) -> None:
        import array
        import socket

        if len(fds) != 4 or self.call is not None or self.keeper_channel is None:
            for fd in fds:
                os.close(fd)
            if self.keeper_channel is None:
                self.lost("the session's keeper is gone")
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        handed = [*fds, theirs.fileno()]
        try:
            self.keeper_channel.sendmsg([b"C"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", handed))])
        except OSError:
            ours.close()
            self.lost("the session's keeper is gone")
        finally:
            for fd in fds:
                os.close(fd)
            theirs.close()
        self.call = _Call(ours)

    def from_keeper(self) -> None:
        assert self.keeper_channel is not None
        try:
            message = self.keeper_channel.recv(MAX_LINE)
        except OSError:
            message = b""
        if not message:  # the keeper died: with it the state, unless the call running now is kept
            self.keeper_channel.close()
            self.keeper_channel = None
            if self.call is None or not self.call.pid:  # no call, or one it died before forking
                self.lost("the session's keeper process was killed")
            return
        fields = message.split()
        if self.call is None or len(fields) < 2 or not fields[1].isdigit():
            return
        if fields[0] == b"S":
            self.call.pid = int(fields[1])
            self.say(message)
            if self.call.kill_asked:  # the server's K came before the keeper's S
                _kill_group(self.call.pid)
        elif fields[0] == b"X" and int(fields[1]) == self.call.pid and not self.call.ended:
            self.call.ended = True
            self.say(message)
            self.call_ended(self.call)

    def from_candidate(self, call: _Call) -> None:
        try:
            message = call.channel.recv(MAX_LINE)
        except OSError:
            message = b""
        fields = message.split()
        if len(fields) == 3 and fields[0] == b"P" and fields[1].isdigit():
            call.candidate = int(fields[1])
            call.threads = fields[2] == b"1"
            # What could keep it from being kept is known now, while the call reports its end: the
            # server answers its client with that, and gives the verdict after.
            call.looked, failure = self.snapshot.look()
            self.announce(call, failure)
        else:
            call.candidate = -1  # no candidate will come (the call's end is a roll-back)
            self.announce(call, "its code did not run to its end")

    def call_ended(self, call: _Call) -> None:
        """The call exited: if no candidate was announced (its code did not end: os._exit, a
        signal, ...), none will be, since a call forks it before it ends."""
        if call.candidate == 0:
            import select

            readable, _, _ = select.select([call.channel], [], [], 0)
            if readable:  # announced before the call ended, read only now
                self.from_candidate(call)
                return
            call.candidate = -1
        if not call.announced:
            self.announce(call, "its code did not run to its end")

    def announce(self, call: _Call, failure: str) -> None:
        """``P <keepable> <threads> <why...>``: whether the call can be kept (a candidate, its files
        readable), once per call."""
        if call.announced:
            return
        call.announced = True
        call.why = failure.encode(errors="replace")[:200].replace(b"\n", b" ")
        self.say(b"P %d %d %s" % (call.candidate > 0 and not failure, call.threads, call.why or b"-"))

    def reap(self) -> None:
        """Reap every child that ended: the keeper, a candidate, the call (once the keeper is gone,
        it is the anchor's), or what a call left."""
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            call = self.call
            if pid == self.keeper:
                self.keeper = 0
            elif call is not None and pid == call.candidate:
                call.candidate = -1
            elif call is not None and pid == call.pid and not call.ended:
                call.ended = True
                self.say(b"X %d %d %r %r %d" % (pid, status, usage.ru_utime, usage.ru_stime, usage.ru_maxrss))
                self.call_ended(call)

    def verdict(self, keep: bool) -> None:
        """Keep the last call's candidate or roll the call back, once the call has ended (its
        leftovers are the anchor's orphans only then): what the server said in its answer, unless
        that can no longer be (``V`` says what was done)."""
        import select

        call, self.call = self.call, None
        if call is None:
            self.say(b"V 0 0 no-call")
            return
        self.call = call  # until it has ended: what comes meanwhile is about it
        deadline = time.monotonic() + CANDIDATE_SECONDS
        while not call.ended and time.monotonic() < deadline:
            watched: list[socket.socket | int] = [self.wake]
            if self.keeper_channel is not None:
                watched.append(self.keeper_channel)
            if call.candidate == 0:
                watched.append(call.channel)
            readable, _, _ = select.select(watched, [], [], max(0.0, deadline - time.monotonic()))
            if self.wake in readable:
                os.read(self.wake, 4096)
                self.reap()  # the call itself, once its keeper is gone
            if self.keeper_channel is not None and self.keeper_channel in readable:
                self.from_keeper()
            if call.candidate == 0 and call.channel in readable:
                self.from_candidate(call)
        self.call = None
        if not call.announced:
            self.call_ended(call)
        why = b"-"
        if keep and (call.candidate <= 0 or call.why):  # the server asks only for what P said could be
            keep, why = False, call.why or b"its candidate is gone"
        if keep:
            self.sweep({self.keeper, call.candidate})
            # Read again what changed since the candidate looked (a leftover of the call's may have
            # written before it was killed); where that fails, what the candidate saw is kept.
            if self.snapshot.take(call.looked):
                self.snapshot.entries = call.looked
        # What the anchor kills itself is not waited for: an old keeper or a candidate idles, and
        # writes nothing; their exit (the teardown of a large state) is not on the call's path.
        dying = set()
        if keep:
            if self.keeper:
                _kill(self.keeper)
                dying.add(self.keeper)
            self.keeper = call.candidate
            if self.keeper_channel is not None:
                self.keeper_channel.close()
            self.keeper_channel = call.channel
            try:
                call.channel.send(b"K")
            except OSError:
                self.keeper_channel = None
        else:
            if call.candidate > 0:
                _kill(call.candidate)
                dying.add(call.candidate)
            call.channel.close()
        self.sweep({self.keeper} | dying)
        if not keep:
            failure = self.snapshot.restore()
            if failure:
                self.lost(f"its files could not be put back: {failure}")
        if not self.keeper or self.keeper_channel is None:
            self.lost("the session's keeper process was killed")
        self.say(b"V %d %d %s" % (keep, call.threads, why))
        if not keep:
            # The keeper stays: it forks its next call ahead now (a new keeper does so itself).
            try:  # noqa: SIM105  (contextlib is not imported in runs)
                self.keeper_channel.send(b"F")
            except OSError:
                pass

    def sweep(self, spare: set[int]) -> None:
        """Kill every child of the anchor's but `spare` (and every orphan of theirs as it comes),
        until none is left: what a call left behind."""
        children = f"/proc/self/task/{os.getpid()}/children"
        deadline = time.monotonic() + SWEEP_SECONDS
        while True:
            self.reap()
            try:
                with open(children, "rb") as listing:
                    pids = {int(pid) for pid in listing.read().split()}
            except OSError:
                return
            left = pids - spare
            if not left or time.monotonic() > deadline:
                return
            for pid in left:
                _kill(pid)
            time.sleep(0.0005)

    def lost(self, why: str) -> NoReturn:
        self.say(b"E " + why.encode(errors="replace")[:400])
        _end_session()


def anchor(control_fd: int, home: str, fork_keeper: Callable[[socket.socket], None]) -> NoReturn:
    """Become the anchor of a session whose working directory is `home` (see the module's docstring);
    `fork_keeper(channel)` is what the first keeper, forked now, does (`bootstrap.serve_session`)."""
    import socket

    try:
        libc.prctl(libc.PR_SET_CHILD_SUBREAPER, 1)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        control = socket.socket(fileno=control_fd)
        Anchor(control, home, fork_keeper).serve(wake_r)
    except BaseException:  # nothing of a session may outlive a fault of its anchor
        _end_session()


def _end_session() -> NoReturn:
    """Kill every process of the session this anchor holds, and exit: the kernel gives its orphans to
    the next subreaper up (the server or a PID namespace's init), which kill them."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/children", "rb") as listing:
            for pid in listing.read().split():
                _kill(int(pid))
    except (OSError, ValueError):
        pass
    os._exit(0)


# --- the keeper, its calls and their candidates ---------------------------------------------------


class Kept(BaseException):
    """Raised in a candidate the server kept: it is the keeper now, holding `channel`. It unwinds the
    call that forked it (`bootstrap.serve_session` catches it), so that a keeper's stack does not grow
    with every call kept."""

    def __init__(self, channel: socket.socket) -> None:
        super().__init__()
        self.channel = channel


def keep(channel: socket.socket, *, first: bool = False) -> list[int]:
    """Be a keeper: hold the state, and run one call per ``C`` from the anchor; say its pid, wait
    for it, say its end. Returns only in a call, with the fds it was handed; EOF or being killed ends
    the keeper. The `first` keeper of a session holds nothing of the anchor's; a later one (a kept
    candidate) keeps the files its calls opened.

    The next call is forked ahead (`_fork_ready`), when the keeper begins and when the anchor says
    ``F`` (after a roll-back): a ``C`` then only hands it its fds, and the fork of a keeper that
    holds a large state (a few milliseconds with pandas loaded) is not on the call's path."""
    import socket

    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
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
        ready = _fork_ready(channel)
        if isinstance(ready, list):
            return ready
        while True:
            message, fds, _, _ = channel.recvmsg(MAX_LINE, socket.CMSG_SPACE(8 * 4))
            received = _fds(fds)
            if not message:
                os._exit(0)
            if message == b"F" and ready is None:
                ready = _fork_ready(channel)
                if isinstance(ready, list):
                    return ready
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
            try:  # noqa: SIM105  (contextlib is not imported in runs)
                hand.sendmsg([b"C"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _int_array(received))])
            except OSError:
                pass  # the ready call died: its end is told below, as any call's
            hand.close()
            for fd in received:
                os.close(fd)
            channel.send(b"S %d" % pid)
            _, status, usage = os.wait4(pid, 0)
            channel.send(b"X %d %d %r %r %d" % (pid, status, usage.ru_utime, usage.ru_stime, usage.ru_maxrss))
    except BaseException:  # a keeper never returns but into a call
        os._exit(1)


def _fork_ready(channel: socket.socket) -> tuple[int, socket.socket] | list[int] | None:
    """Fork the next call ahead. In the keeper: its pid and the socket its fds go down (None if the
    fork failed). In the call: the fds, once they come (a call is then on its way, as if just forked)."""
    import socket

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    random = sys.modules.get("random")
    state = random.getstate() if random is not None else None
    keeper = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        ours.close()
        theirs.close()
        return None
    if pid:
        theirs.close()
        return pid, ours
    try:
        ours.close()
        channel.close()  # the keeper's: the anchor sees the keeper's end as the end of this socket
        libc.prctl(libc.PR_SET_PDEATHSIG, signal.SIGKILL)  # a ready call dies with its keeper
        if os.getppid() != keeper:  # it died before that
            os._exit(0)
        if random is not None and state is not None:
            random.setstate(state)  # reseeded by CPython's at-fork hook: the state is the session's
        message, fds, _, _ = theirs.recvmsg(16, socket.CMSG_SPACE(8 * 4))
        received = _fds(fds)
        if message != b"C" or len(received) != 5:
            os._exit(0)
        theirs.close()
        # A call outlives its keeper, as a call forked on demand would: one that kills it and then
        # ends ok is kept (its candidate becomes the keeper).
        libc.prctl(libc.PR_SET_PDEATHSIG, 0)
    except BaseException:
        os._exit(1)
    return received


def _int_array(fds: list[int]) -> array.array[int]:
    import array

    return array.array("i", fds)


def enter_call(fds: list[int], home: str) -> None:
    """In a call, just forked from the keeper: its fds in place (0-2 its pipes, 3 its job socket,
    `CHANNEL_FD` its channel), the keeper's channel closed, a session and group of its own, in `home`.
    What earlier calls opened and kept stays open."""
    import fcntl

    os.setsid()
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HANDED_ABOVE) for fd in fds]
    for fd in fds:
        os.close(fd)
    for target, fd in enumerate(moved[:4]):
        os.dup2(fd, target)
    os.dup2(moved[4], CHANNEL_FD, inheritable=False)
    for fd in moved:
        os.close(fd)
    os.chdir(home)


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


def fork_candidate(channel_fd: int) -> None:
    """At the end of a call whose code ended: fork the candidate state and announce it on the call's
    channel (``P <pid> <threads>``); the call goes on to report its end. The candidate waits to be
    kept (``K``: it raises `Kept`, and becomes the keeper) or killed."""
    import socket

    threading = sys.modules.get("threading")
    threads = threading is not None and threading.active_count() > 1
    random = sys.modules.get("random")
    state = random.getstate() if random is not None else None
    try:
        pid = os.fork()
    except OSError:
        return
    if pid:
        # In a group of its own before the call reports its end: the server then has the call's
        # group killed (``K``), and the candidate must not be in it, whether or not it has run yet.
        # Announced from here, not by the candidate: before the call's report and its end, which
        # the candidate, still to be scheduled, may come after.
        try:
            os.setpgid(pid, pid)
            channel = socket.socket(fileno=channel_fd)
            try:
                channel.send(b"P %d %d" % (pid, threads))
            finally:
                channel.detach()
        except OSError:
            pass  # gone already: the anchor reaps it, and the call is rolled back
        return
    try:
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
        if random is not None and state is not None:
            random.setstate(state)  # the fork reseeded it (CPython's at-fork hook): the state is the call's
        Session.kept_calls += 1
        channel = socket.socket(fileno=channel_fd)
        answer = channel.recv(16)
    except BaseException:
        os._exit(0)
    if answer != b"K":
        os._exit(0)
    raise Kept(channel)


# --- small parts ----------------------------------------------------------------------------------


def _fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    import array
    import socket

    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return list(fds)


def _kill(pid: int) -> None:
    try:  # noqa: SIM105  (contextlib is not imported in runs)
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        _kill(pid)
