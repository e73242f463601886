"""A session's anchor, from inside the sandbox: the process that holds the session while its keeper
holds the state. Standard library only; `keeper` has the keeper, its calls and their candidates, and
the module's docstring there says what a session is.

The anchor is a child subreaper in the run's sandbox. It never runs the session's code. It forks the
first keeper, passes each call's fds on to the keeper, says what the keeper and the call say, holds
the snapshot of the session's directory and a sandbox's /dev/shm and /run (`Snapshot`: in its own
memory, where no call can reach it), and gives the verdict on each call: the candidate kept (the old
keeper killed), or the candidate killed and the files put back. Either way it kills every other process the call left.

The wire, server to anchor, on the run's job socket (fd 3), one line a message: ``C`` with the call's
four fds (stdin, stdout, stderr, job socket; SCM_RIGHTS): start a call; ``K``: kill the running call's
group; ``V 1`` or ``V 0``: keep or roll back the last call (the next call's ``C`` may follow in the same
message: it is passed on once the verdict is done); EOF: end the session. Keeper to anchor, besides what
it relays: ``A <pid>`` the keeper is idle, its next call forked ahead (every other process under it is
killed). Anchor to server: ``R`` once ready; ``S <pid>`` a call was forked; ``X <pid> <wait status>
<utime> <stime> <maxrss>`` it ended; ``P <keepable> <threads> <KiB> <why...>``, once per call, as soon
as it is known whether the call can be kept (1: its code ran to its end, and its files could be read;
threads: 1 if the call left threads, which a fork does not carry; why not, or ``-``), so that the server
can answer before the verdict; ``V <kept> <threads> <KiB> <why...>`` the verdict is done, and what
the session holds now, kept or rolled back (its /dev/shm and /run put back with its directory); ``E <why>``
the session is over (its state was lost).
"""

from __future__ import annotations

import os
import resource
import signal
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable
    from typing import NoReturn

    from runner.inrun import libc, sweeps
    from runner.inrun.bootstrap import hold_cpu, lowered
    from runner.inrun.snapshot import Snapshot
    from runner.inrun.sweeps import anonymous_kb, beside, held_kb, idle_fault, kill, parent, session_cpu, sweep_tree
else:  # from this file's directory (`bootstrap.load_siblings`): never imported by the server
    import libc
    import sweeps
    from bootstrap import hold_cpu, lowered
    from snapshot import Snapshot
    from sweeps import anonymous_kb, beside, held_kb, idle_fault, kill, parent, session_cpu, sweep_tree

MAX_LINE = 512
MAX_PID = 1 << 22  # Linux's pid_max is at most this
# How long the anchor waits for a call to end once its verdict is asked for, and for the keeper to say
# it forked the next call.
CANDIDATE_SECONDS = 10.0
# How often an idle session's processes are looked at (`sweeps.idle_fault`).
IDLE_CHECK_SECONDS = 1.0
# The CPU time the anchor may use beyond a run's RLIMIT_CPU (`anchor_cpu_limits`): its own bookkeeping
# over the session's life, none of it the session's code. An idle check (`sweeps.idle_fault`) costs
# about 105 us (60-70 before it counted the whole session's CPU and read each process's SIGCHLD; 132
# before it read each stat once, without file objects), 1.5 s of a 4-hour session's idle time; a
# verdict on a call that rewrote 45 MiB of files 25-30 ms. An hour of CPU is 2,400 times
# the one, 120,000 times the other. Found by a review: under the run's own limit, that work ended
# sessions whose calls spent little (RUNNER_MAX_CPU_SECONDS=1: the 27th such call found its anchor
# killed by SIGXCPU, at 0.79 s of the anchor's CPU).
ANCHOR_CPU_SECONDS = 3600
# How many of the keeper's messages one wait takes (`Anchor.step`): a keeper says one or two things at
# a time (S, X, A), so that a flood of them never keeps the anchor from the rest of its loop.
MAX_DRAIN = 16


class _Call:
    __slots__ = (
        "announced",
        "candidate",
        "channel",
        "ended",
        "held_kb",
        "itself",
        "kill_asked",
        "looked",
        "pid",
        "threads",
        "why",
    )

    def __init__(self, channel: socket.socket) -> None:
        self.channel = channel  # the anchor's end of the call's channel (the candidate speaks on it)
        self.pid = 0
        self.candidate = 0
        self.itself = False  # the call is its own candidate (`keeper.offer_state`): its D is its end
        self.threads = False
        self.held_kb = 0  # the memory its candidate's state holds, as the call said (`keeper.held_kb`)
        self.ended = False
        self.kill_asked = False
        self.announced = False  # its P line said to the server
        self.why = b""  # why it cannot be kept, as said in that line
        self.looked: dict[str, tuple[object, ...]] = {}  # the directory as the candidate found it

    def listening(self) -> bool:
        """Whether the call's channel has more to say: its candidate, or (the call its own) its D."""
        return self.candidate == 0 or (self.itself and not self.ended)

    def lose_itself(self) -> None:
        """A call that is its own candidate is gone or going: it has none now."""
        if self.itself:
            self.itself, self.candidate = False, -1

    def done(self, message: bytes) -> bytes:
        """What a call that is its own candidate says once it has reported (``D <utime> <stime>
        <maxrss>``: its fds closed, it waits for K): its end, as the X line for the server (once);
        or nothing (EOF: it is dying, its exit is told by its keeper or reaped). The call's code
        can write anything on this channel: what is not exactly a D line is not one, and the X line
        is made of the numbers read, never of the bytes as they came."""
        fields = message.split(b" ")
        if len(fields) == 4 and fields[0] == b"D" and not self.ended:
            utime, stime, maxrss = _seconds(fields[1]), _seconds(fields[2]), _count(fields[3])
            if utime is not None and stime is not None and maxrss is not None:
                self.ended = True
                return b"X %d 0 %r %r %d" % (self.pid, utime, stime, maxrss)
        if not message:
            self.lose_itself()
        return b""

    def announcement(self, failure: str) -> bytes:
        """``P <keepable> <threads> <KiB> <why...>``, said once per call (`Anchor.announce`): whether it
        can be kept (a candidate, its files readable; `failure` says why not), what its state holds."""
        self.announced = True
        self.why = failure.encode(errors="replace")[:200].replace(b"\n", b" ")
        keepable = self.candidate > 0 and not failure
        return b"P %d %d %d %s" % (keepable, self.threads, self.held_kb, self.why or b"-")

    def kill(self) -> None:
        """Kill the call's group, and the call (in it, not yet in it, or just out of it on its way to
        be its own candidate); not once it said it is its own candidate: the server's kill after its
        report then leaves it be the next keeper (or not: the verdict kills it)."""
        try:  # noqa: SIM105  (contextlib is not imported in runs)
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        if not self.itself and not self.ended:  # once reaped, its pid may be another's
            kill(self.pid)


class Anchor:
    """The anchor's state: the keeper, the call in progress, the snapshot of the directory."""

    def __init__(
        self, control: socket.socket, home: str, fork_keeper: Callable[[socket.socket], None], tmpfs: tuple[str, ...]
    ) -> None:
        self.control = control
        self.home = home
        self.tmpfs = tmpfs  # the session's own tmpfs mounts, its directory's too (`held_kb`)
        self.buffer = b""
        self.snapshot = Snapshot(home, beside(home, tmpfs))  # /dev/shm and /run too: a roll-back puts them back
        self.call: _Call | None = None
        self.baseline_kb = anonymous_kb(os.getpid())  # the first keeper's, a fork of this process (`held_kb`)
        self.keeper, channel = _first_keeper(fork_keeper)
        self.keeper_channel: socket.socket | None = channel
        self.wake = -1  # the read end of SIGCHLD's wake-up pipe (`serve`)
        # The call the keeper forked ahead (its A): one A from each keeper and after each roll-back.
        self.awaiting, self.ready = True, 0
        self.idle, self.next_check = sweeps.IdleMark(), 0.0  # the session as it went idle (`idle_fault`)
        self.tally = sweeps.Tally()  # what was killed: its teardown may take a while, excused

    def say(self, line: bytes) -> None:
        try:
            self.control.sendall(line + b"\n")
        except OSError:
            _end_session()

    def serve(self, wake: int) -> NoReturn:
        self.wake = wake
        self.say(b"R")
        while True:
            self.step(None)

    def step(self, patience: float | None) -> None:
        """Wait for what comes next (at most `patience` seconds, and from the server only without
        one: a verdict in progress reads it after) and take it."""
        import select

        call = self.call
        watched: list[socket.socket | int] = [self.wake] if patience is not None else [self.control, self.wake]
        if self.keeper_channel is not None:
            watched.append(self.keeper_channel)
        if call is not None and call.listening():
            watched.append(call.channel)
        idle = patience is None and (call is None or not call.pid) and not self.awaiting  # armed, not begun
        wait = max(0.0, self.next_check - time.monotonic()) if idle else patience
        readable, _, _ = select.select(watched, [], [], wait)
        if self.wake in readable:
            os.read(self.wake, 4096)
            self.reap()  # the call too, once its keeper is gone
        more = self.keeper_channel is not None and self.keeper_channel in readable
        # The keeper's first (a call's S comes before the call can say anything), so many at a time.
        for _ in range(MAX_DRAIN):
            if not more:
                break
            self.from_keeper()
            more = _readable_now(self.keeper_channel)
        if call is not None and call.channel in readable and call.listening():
            self.from_candidate(call)
        if self.control in readable:
            self.from_server()
        if idle:
            _check_idle(self)

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
                    self.call.kill()
            elif line in (b"V 1", b"V 0"):
                self.verdict(line == b"V 1")
        for fd in received:
            os.close(fd)

    def start_call(self, fds: list[int]) -> None:
        if len(fds) != 4 or self.call is not None or self.keeper_channel is None:
            for fd in fds:
                os.close(fd)
            if self.keeper_channel is None:
                self.lost("the session's keeper is gone")
            return
        try:
            self.call = _Call(_hand_to_keeper(self.keeper_channel, fds))
        except OSError:
            self.lost("the session's keeper is gone")

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
        call = self.call
        tag, pid, line = _keeper_says(message) or (b"", 0, b"")
        if not self.awaiting and (call is None or not call.pid) and not (tag == b"S" and call is not None):
            # Idle, its A taken: ours says only a handed-on call's S (found by a review: a forged one flooded).
            self.lost("its keeper spoke while the session was idle")
        if tag == b"A" and self.awaiting and parent(pid) == self.keeper:
            self.awaiting, self.ready = False, pid
            self.idle = sweeps.idle_mark(self.tally, bool(self.tmpfs))
            self.next_check = time.monotonic() + IDLE_CHECK_SECONDS
        elif tag == b"S" and call is not None and not call.pid:
            call.pid = pid
            self.say(line)
            if call.kill_asked:  # the server's K came before the keeper's S
                call.kill()
        elif tag == b"X" and call is not None and pid == call.pid:
            self.call_exited(call, line)
        elif tag == b"L" and self.awaiting:  # after a roll-back (`keeper.serve_as_keeper`)
            self.lost("a file the state holds open lost its name, and what was written to it could not be put back")

    def call_exited(self, call: _Call, end: bytes) -> None:
        """The call exited (`end`: its X line); if it was its own candidate, it is none now."""
        call.lose_itself()
        if not call.ended:
            call.ended = True
            self.say(end)
            self.call_ended(call)

    def from_candidate(self, call: _Call) -> None:
        try:
            message = call.channel.recv(MAX_LINE)
        except OSError:
            message = b""
        if call.itself:
            end = call.done(message)
            if end:
                self.say(end)
            return
        offered = _offered(message, call.pid, self.keeper)
        if isinstance(offered, tuple):
            call.candidate, call.threads = offered
            call.itself = call.candidate == call.pid
            # What could keep it from being kept is known now, while the call reports its end: the
            # server answers its client with that, and gives the verdict after.
            call.looked, failure = self.snapshot.look()
            call.held_kb = held_kb(call.candidate, self.baseline_kb, call.looked, self.tmpfs)
            self.announce(call, failure)
        else:
            call.candidate = -1  # no candidate will come (the call's end is a roll-back)
            self.announce(call, offered or "its code did not run to its end")

    def call_ended(self, call: _Call) -> None:
        """The call exited: if no candidate was announced (its code did not end: os._exit, a
        signal, ...), none will be, since a call forks it before it ends."""
        if call.candidate == 0:
            import select

            readable, _, _ = select.select([call.channel], [], [], 0)
            if readable:  # announced before the call ended, read only now
                self.from_candidate(call)
                call.lose_itself()  # if it offered itself: it is gone
                return
            call.candidate = -1
        if not call.announced:
            self.announce(call, "its code did not run to its end")

    def announce(self, call: _Call, failure: str) -> None:
        if not call.announced:
            self.say(call.announcement(failure))

    def reap(self) -> None:
        """Reap every child that ended: the keeper, a candidate, the call (once the keeper is gone,
        it is the anchor's), or what a call left."""
        for pid, end in self.tally.reaped():
            call = self.call
            if pid == self.keeper:
                self.keeper = 0
            elif call is not None and pid == call.pid:
                self.call_exited(call, end)
            elif call is not None and pid == call.candidate:
                call.candidate = -1

    def verdict(self, keep: bool) -> None:
        """Keep the last call's candidate or roll the call back, once the call has ended: what the
        server said in its answer, unless that can no longer be (``V`` says what was done). Then
        nothing runs but the anchor, the keeper and its next call: all else under the anchor is
        killed, whoever's child, or the session ends (`sweep_tree`; found by a review: a call's
        CLONE_PARENT child was the keeper's, its own child ran on while the session idled)."""
        call = self.call  # until it has ended: what comes meanwhile is about it
        if call is None:
            self.say(b"V 0 0 0 no-call")
            return
        deadline = time.monotonic() + CANDIDATE_SECONDS
        while not call.ended and time.monotonic() < deadline:
            self.step(max(0.0, deadline - time.monotonic()))
        self.call = None
        if not call.announced:
            self.call_ended(call)
        why = b"-"
        if keep and (call.candidate <= 0 or call.why):  # the server asks only for what P said could be
            keep, why = False, call.why or b"its candidate is gone"
        # Not waited for: an old keeper or a candidate idles; its teardown is not on the call's path.
        dying = {self.keeper if keep else call.candidate} - {0, -1}
        for pid in dying:
            self.tally.kill(pid)
        if keep:
            self.keeper = call.candidate
            if self.keeper_channel is not None:
                self.keeper_channel.close()
            self.keeper_channel = _told(call.channel, b"K")
        else:
            call.channel.close()
            swept = sweep_tree(
                {self.keeper} | dying, self.reap, 0, self.tally
            )  # before the files: nothing writes after
            if failure := (self.snapshot.restore() if swept else "what its last call left could not be killed"):
                self.lost(f"its files could not be put back: {failure}")
            self.keeper_channel = _told(self.keeper_channel, b"F")  # the keeper stays: it forks its next call now
        _await_ready(self)
        if not sweep_tree({self.keeper, self.ready} | dying, self.reap, 0, self.tally):
            self.lost("what its last call left could not be killed")
        # Read again what changed since the candidate looked (a leftover of the call's may have
        # written before it was killed); where that fails, what the candidate saw is kept.
        if keep and self.snapshot.take(call.looked):
            self.snapshot.entries = call.looked
        if not self.keeper or self.keeper_channel is None:
            self.lost("the session's keeper process was killed")
        held = held_kb(self.keeper, self.baseline_kb, self.snapshot.entries, self.tmpfs)  # kept or not
        self.say(b"V %d %d %d %s" % (keep, call.threads, held, why))

    def lost(self, why: str) -> NoReturn:
        self.say(b"E " + why.encode(errors="replace")[:400])
        _end_session()


def _await_ready(anchor: Anchor) -> None:
    """Wait for the keeper's ``A`` (`Anchor.from_keeper`; the next call's ``C`` waits). Not there at once,
    what the last call left is killed, then a keeper doing more than fork its next call ends the session
    (`sweeps.waking_fault`; found by a review: a keeper forged by a call's channel ran until this ended)."""
    anchor.awaiting, anchor.ready, cpu, now = True, 0, -1.0, time.monotonic()
    deadline, look = now + CANDIDATE_SECONDS, now + sweeps.WAKING_CHECK_SECONDS
    while anchor.awaiting and anchor.keeper_channel is not None and now < deadline:
        anchor.step(max(0.0, min(deadline, look) - now))
        if anchor.awaiting and (now := time.monotonic()) >= look:
            if cpu < 0:  # the first look: a sweep, sparing the keeper's child (the call it may be forking)
                if not sweep_tree(
                    {anchor.keeper} | anchor.tally.dying.keys(), anchor.reap, anchor.keeper, anchor.tally
                ):
                    anchor.lost("what its last call left could not be killed")
                cpu = session_cpu(anchor.tally)[0]
            elif fault := sweeps.waking_fault(anchor.keeper, anchor.tally, cpu):
                anchor.lost(fault)
            look = time.monotonic() + sweeps.WAKING_CHECK_SECONDS
    anchor.awaiting = False  # none came (the keeper's fork failed, or it is no keeper of ours): none now
    anchor.idle = sweeps.idle_mark(anchor.tally, bool(anchor.tmpfs))  # tmpfs of its own: a sandbox's
    anchor.next_check = time.monotonic() + IDLE_CHECK_SECONDS


def _check_idle(anchor: Anchor) -> None:
    """Each IDLE_CHECK_SECONDS while no call runs, end the session if `idle_fault` finds a fault; unless
    a call began as it looked: its S came first (the keeper says it before the call has its fds), and
    the only thing an idle keeper says (`Anchor.from_keeper`). Found by a review: whatever was unread on
    the keeper's channel skipped this check, and a forged keeper that flooded it kept its processes
    running while idle."""
    if (anchor.call is not None and anchor.call.pid) or time.monotonic() < anchor.next_check:
        return
    anchor.next_check = time.monotonic() + IDLE_CHECK_SECONDS
    if fault := idle_fault((anchor.keeper, anchor.ready), anchor.tally, anchor.idle):
        if anchor.call is not None and _readable_now(anchor.keeper_channel):
            anchor.from_keeper()
        if anchor.call is None or not anchor.call.pid:
            anchor.lost(fault)


def _first_keeper(fork_keeper: Callable[[socket.socket], None]) -> tuple[int, socket.socket]:
    """Fork the session's first keeper (`fork_keeper` is what it does), under the run's RLIMIT_CPU
    (`hold_cpu`), which each call forked from it inherits: its pid, and the anchor's end of its channel."""
    import socket

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        try:
            hold_cpu()  # as a one-shot run's job does: the anchor takes its own limit after this fork
            ours.close()
            fork_keeper(theirs)
        finally:
            os._exit(1)
    theirs.close()
    return pid, ours


def _told(keeper: socket.socket | None, message: bytes) -> socket.socket | None:
    """The keeper's channel, once `message` went down it (``K``: a candidate is the keeper now; ``F``:
    fork the next call ahead); None if it could not."""
    try:
        if keeper is not None:
            keeper.send(message)
    except OSError:
        return None
    return keeper


def _readable_now(channel: socket.socket | None) -> bool:
    import select

    return channel is not None and bool(select.select([channel], [], [], 0)[0])


def _keeper_says(message: bytes) -> tuple[bytes, int, bytes] | None:
    """What the keeper said: its tag, the pid it names, and the line for the server (or None if it is
    not exactly ``A <pid>``, ``S <pid>``, ``X <pid> <status> <utime> <stime> <maxrss>`` or ``L``). The keeper
    runs no code of the session's, but it is made of a call's state: what it says is read as numbers,
    and what goes on to the server is a line made here of the numbers read."""
    if message == b"L":  # the state it holds is not as it was (`keeper.serve_as_keeper`)
        return b"L", 0, b""
    fields = message.split(b" ")
    pid = _pid(fields[1]) if len(fields) in (2, 6) else None
    if pid is None:
        return None
    if fields[0] in (b"A", b"S") and len(fields) == 2:
        return fields[0], pid, b"%s %d" % (fields[0], pid)
    if fields[0] == b"X" and len(fields) == 6:
        status, maxrss = _count(fields[2], 0xFFFF), _count(fields[5])
        utime, stime = _seconds(fields[3]), _seconds(fields[4])
        if status is not None and maxrss is not None and utime is not None and stime is not None:
            return b"X", pid, b"X %d %d %r %r %d" % (pid, status, utime, stime, maxrss)
    return None


def _offered(message: bytes, call: int, keeper: int) -> tuple[int, bool] | str:
    """What a call said on its channel before its end: ``P <pid> <threads>`` its candidate (and
    whether it left threads), ``N <why>`` that its state cannot be kept (why), anything else ''. The
    candidate is the call itself or a child it forked (the anchor's, once the call has exited): a P
    naming any other process (the keeper, the anchor, another session's) is none."""
    fields = message.split(b" ")
    if fields[0] == b"N" and len(message) > 2:
        return message[2:].decode(errors="replace")
    offer = len(fields) == 3 and fields[0] == b"P" and fields[2] in (b"0", b"1")
    candidate = _pid(fields[1]) if offer else None
    if candidate is None:
        return ""
    anchor = os.getpid()
    if candidate != call and (candidate in (keeper, anchor) or parent(candidate) not in (call, anchor)):
        return ""
    return candidate, fields[2] == b"1"


def _hand_to_keeper(keeper: socket.socket, fds: list[int]) -> socket.socket:
    """Send the keeper a call's four fds and one end of its channel (closed here, as the fds are);
    the anchor's end of that channel."""
    import array
    import socket

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        handed = array.array("i", [*fds, theirs.fileno()])
        keeper.sendmsg([b"C"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, handed)])
    except OSError:
        ours.close()
        raise
    finally:
        for fd in fds:
            os.close(fd)
        theirs.close()
    return ours


def anchor(
    control_fd: int, home: str, fork_keeper: Callable[[socket.socket], None], tmpfs: tuple[str, ...] = ()
) -> NoReturn:
    """Become the anchor of a session whose working directory is `home` (see the module's docstring);
    `fork_keeper(channel)` is what the first keeper, forked now, does (`bootstrap.serve_session`);
    `tmpfs`, the run's own tmpfs mounts (a sandboxed run's: its directory, /dev/shm, /run)."""
    import socket

    try:
        libc.prctl(libc.PR_SET_CHILD_SUBREAPER, 1)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        control = socket.socket(fileno=control_fd)
        held = Anchor(control, home, fork_keeper, tmpfs)  # its keeper under the run's CPU limit
        # The anchor's own: `bootstrap.apply_limits` left the hard one where it was.
        resource.setrlimit(resource.RLIMIT_CPU, anchor_cpu_limits(*resource.getrlimit(resource.RLIMIT_CPU)))
        held.serve(wake_r)
    except BaseException:  # nothing of a session may outlive a fault of its anchor
        _end_session()


def anchor_cpu_limits(cpu: int, hard: int) -> tuple[int, int]:
    """The anchor's RLIMIT_CPU (soft, hard), for a run whose soft limit is `cpu` under a hard limit of
    `hard` (what it inherited, since `bootstrap.apply_limits` leaves it): ANCHOR_CPU_SECONDS more
    than the run's own, its hard one a second above that, never above `hard` (it cannot be raised)."""
    if cpu == resource.RLIM_INFINITY:
        return cpu, hard
    return lowered(cpu + ANCHOR_CPU_SECONDS, cpu + ANCHOR_CPU_SECONDS + 1, hard)


def _end_session() -> NoReturn:
    """Kill every process of the session this anchor holds, its calls and theirs too, and exit (found by
    a review: in plain modes a running call, its keeper's child, outlived close_session by up to a
    second, writing into its directory as it was removed): what it killed, and what is left past
    SWEEP_SECONDS, goes to the next subreaper up (the server or a PID namespace's init), which reaps it."""
    try:  # noqa: SIM105  (contextlib is not imported in runs)
        sweeps.kill_below()
    except (OSError, ValueError):
        pass
    os._exit(0)


def _fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    import array
    import socket

    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return list(fds)


def _count(field: bytes, most: int = 1 << 40) -> int | None:
    """`field` as a whole number from 0 to `most`, or None: what a channel says is read, never trusted."""
    if not 0 < len(field) <= 20 or not field.isdigit() or not field.isascii():
        return None
    number = int(field)
    return number if number <= most else None


def _pid(field: bytes) -> int | None:
    pid = _count(field, MAX_PID)
    return pid or None


def _seconds(field: bytes) -> float | None:
    """`field` as a number of CPU seconds (as ``%r`` of a float writes it), or None."""
    if not 0 < len(field) <= 40 or not field.isascii():
        return None
    try:
        seconds = float(field)
    except ValueError:
        return None
    return seconds if 0.0 <= seconds <= 1e9 else None  # NaN fails both
