"""A session, the server's side (runner/inrun/keeper.py and anchor.py are the run's): a call forked from the
session's kept state, the verdict on it, the session's end.

The anchor is an interpreter of the pool's, ready, that was sent the ``keeper`` job instead of code:
whichever source made it (the zygote, with or without namespaces, or bubblewrap), it sits in that
run's sandbox, with its uid and cgroup. The server talks to it on the run's job socket, one line a
message (the anchor's docstring has the wire). Each call is handed its own pipes and job socket, as
a pooled interpreter is, so the driver runs it exactly as it runs any other (`KeptCall`).
"""

from __future__ import annotations

import array
import contextlib
import os
import socket
import struct
from dataclasses import dataclass

import anyio
import anyio.abc

from runner.fdio import readable_now
from runner.inrun.wire import KEEPER_JOB
from runner.processes import anchor_wire
from runner.processes.anchor_wire import Ended, Lost, Malformed, Ready, Said, Started
from runner.processes.child import STARTUP_TIMEOUT, Child, maxrss_bytes
from runner.processes.forkserver import ForkedChild

# How long the anchor may take to say whether a call can be kept, and to keep it or roll it back
# (which, with files to put back, reads and writes the session's directory).
VERDICT_TIMEOUT = 30.0
# How often a wait for the anchor looks whether it was stopped (SIGSTOP: a call of its uid can send
# it), which ends the session at once: found by a review, a stopped anchor held a call's slot 30 s.
STOPPED_CHECK_SECONDS = 0.25
READ_SIZE = 4096
# Lines the anchor may have said that nobody asked for yet (R, P, V wait in this queue; the server asks
# for each in turn, so two or three is the most a working session ever has).
MAX_QUEUED = 16


class SessionLost(Exception):
    """The session's anchor is gone or said its state is lost: nothing more runs in it."""


def reset_pending(listener: socket.socket) -> None:
    """Take every connection queued on `listener` and reset it (no TIME_WAIT, nothing carried out)."""
    listener.setblocking(False)
    while True:
        try:
            connection, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            continue  # reset by its client before it was taken: the next
        with connection:
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@dataclass(eq=False)
class KeptCall(ForkedChild):
    """A call of a session: forked by its keeper, which reaps it and tells its end through the
    anchor, as the zygote does for a run it forked (`ForkedChild`); only its kill goes through the
    anchor, since its pid is the session's, not the server's."""

    anchor: SessionKeeper | None = None

    def log_fields(self) -> dict[str, int]:
        """Its session's anchor, the pid `session started` logged: the call's own is not known when
        its run starts (the keeper says it with S, read later; found by a review: logged as pid=0),
        and in a sandbox it is a pid of the session's PID namespace, not one the host shows."""
        return {"anchor_pid": self.anchor.anchor.pid} if self.anchor is not None else super().log_fields()

    def kill_group(self) -> None:
        """Have the anchor kill the call's group."""
        if self.report is None and self.anchor is not None:
            self.anchor.kill_call()

    def listener_for_run(self) -> socket.socket | None:
        """The session's egress listener, its anchor's, which stays for the calls after: a duplicate
        for this call's proxy to serve and close. Called before the call has its code: what is still
        queued on it is an earlier call's (connected after its proxy stopped serving), reset here, so
        that no call's connection is carried out in another's name."""
        held = self.anchor.anchor.egress_listener if self.anchor is not None else None
        if held is None:
            return None
        reset_pending(held)
        return held.dup()


class Reading:
    """A session's reader of its anchor's fd (`SessionKeeper._read`), to stop and wait for before that
    fd is closed. Found by a review: a reader left waiting on a closed fd kept its registration in the
    event loop, the next fd of that number (a pooled interpreter's pipe) failed "another task is already
    reading", and that ended the pool's refill task and the whole server."""

    __slots__ = ("done", "scope")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()

    async def stop(self) -> None:
        self.scope.cancel()
        await self.done.wait()


class SessionKeeper:
    """One session's anchor, as the server drives it: `call`, then `verdict`, one call at a time."""

    def __init__(self, anchor: Child) -> None:
        self.anchor = anchor
        self.lost: str | None = None
        self._buffer = b""
        self._lines: list[Ready | Said] = []
        self._arrived = anyio.Event()
        self._call: KeptCall | None = None
        self._previous: KeptCall | None = None  # the call before, whose end may still be told
        self._armed: KeptCall | None = None
        self._closed = False
        # The verdict `call` had on an armed call that died waiting, for `Sessions`' budget; None if none.
        self.rolled_back: Said | None = None
        self.reading = Reading()  # the reader's, stopped before the anchor's fd is closed

    @classmethod
    async def start(cls, anchor: Child, tg: anyio.abc.TaskGroup) -> SessionKeeper:
        """Make the ready interpreter `anchor` a session's anchor; `SessionLost` if it does not say so."""
        keeper = cls(anchor)
        tg.start_soon(keeper._read)
        try:
            os.write(anchor.code, KEEPER_JOB)
            said = await keeper._next(STARTUP_TIMEOUT)
            if not isinstance(said, Ready):
                raise SessionLost(keeper.lost or f"the session's interpreter did not start: it said {said}")
        except BaseException as exc:  # cancelled too: the anchor is destroyed next, its fd closed
            with anyio.CancelScope(shield=True):
                await keeper.reading.stop()
            if isinstance(exc, OSError):
                raise SessionLost(f"the session's interpreter is gone: {exc}") from exc
            raise
        return keeper

    async def call(self) -> KeptCall:
        """The session's next call, ready for its job: the one armed ahead (`arm`) if it is still
        there, else one armed now. An armed call that died waiting (it dies with its keeper) is
        rolled back first, as any call that did not end ok: SessionLost if its keeper is gone."""
        armed, self._armed = self._armed, None
        # Its end of the job socket turns readable (EOF) once it is gone: it writes nothing there
        # before its job.
        if armed is not None and armed.report is None and self.lost is None and not _readable(armed.code):
            return armed
        if armed is not None:
            armed.close_all()
            if self.lost is None:
                await self.keepable()
                self.rolled_back = await self.verdict(False)
        return self._hand()

    def arm(self, before: bytes = b"") -> bool:
        """Hand the next call its pipes now, while the session is idle: the keeper passes them to the
        call it forked ahead, which then waits for its job as a pooled interpreter does, and the
        session's next call starts when its job is written, no process woken before it. `before`:
        lines for the anchor, in the same message. Whether they went."""
        if self._armed is None and self.lost is None and not self._closed:
            with contextlib.suppress(SessionLost, OSError):
                self._armed = self._hand(before)
                return True
        return False

    def _hand(self, before: bytes = b"") -> KeptCall:
        """A call of the session's kept state, its pipes the server's, ready for its job (the keeper
        hands them to the call it forked ahead); `before`, lines the anchor takes first, in the same
        message."""
        ends = _call_ends()
        stdin_r, stdin_w, stdout_r, stdout_w, stderr_r, stderr_w, code_theirs, code_ours = ends
        handed = [stdin_r, stdout_w, stderr_w, code_theirs]
        try:
            sock = socket.socket(fileno=self.anchor.code)
            try:
                sock.sendmsg([before + b"C\n"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", handed))])
            finally:
                sock.detach()
        except OSError as exc:
            for fd in ends:
                os.close(fd)
            self._drain()  # the anchor may have said why it went, and the reader not read it yet
            self.lost = self.lost or f"the session's anchor is gone: {exc}"
            raise SessionLost(self.lost) from exc
        for fd in handed:
            os.close(fd)
        ours_ = [stdin_w, stdout_r, stderr_r, code_ours]
        for fd in ours_:
            os.set_blocking(fd, False)
        # Not waiting for the keeper's "S <pid>" (its pid, in `_take`; a kill asked for before then waits
        # in the anchor for it): the job can go down the call's socket before the call reads it.
        call = KeptCall(
            pid=0, workdir=None, stdin=stdin_w, stdout=stdout_r, stderr=stderr_r, code=code_ours, anchor=self
        )
        call._open.update(ours_)
        self._previous, self._call = self._call, call
        if self.lost is not None:
            call.ended(-9, 0.0, 0)
        return call

    def kill_call(self) -> None:
        self._say(b"K\n")

    async def keepable(self, patience: float = VERDICT_TIMEOUT) -> Said:
        """Whether the last call can be kept: the anchor says so once per call, as soon as it
        knows (its candidate appeared, or the call ended without one); SessionLost after `patience`."""
        return await self._said(b"P", patience)

    async def verdict(self, keep: bool) -> Said:
        """Keep the last call's state, or roll it back; whether the anchor kept it. The anchor
        waits for the call's end itself."""
        self.give_verdict(keep)
        return await self.verdict_done()

    def give_verdict(self, keep: bool, arm: bool = False) -> None:
        """Tell the anchor to keep the last call's state or roll it back, without waiting: it can
        begin while the server answers (`verdict_done` says what it did). With `arm`, the next call
        is handed its pipes in the same message (`arm`): the anchor passes them on as soon as the
        verdict is done, not once the server has heard of it."""
        if not (arm and self.arm(b"V %d\n" % keep)):
            self._say(b"V %d\n" % keep)

    async def verdict_done(self) -> Said:
        """Whether the anchor kept the last call, once it has done what `give_verdict` told it."""
        return await self._said(b"V")

    async def _said(self, tag: bytes, patience: float = VERDICT_TIMEOUT) -> Said:
        """The anchor's next ``P`` or ``V`` (`tag`); anything else in its place ends the session."""
        said = await self._next(patience)
        if not isinstance(said, Said) or said.tag != tag:
            self._lose(f"the session's anchor said {said} where a {tag.decode()} line belongs")
            raise SessionLost(self.lost)
        return said

    def _say(self, line: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(self.anchor.code, line)

    async def _next(self, patience: float) -> Ready | Said:
        """The anchor's next line not about a call in progress; SessionLost if none comes, or it is stopped."""
        with anyio.move_on_after(patience):
            while not self._lines:
                if self.lost is not None:
                    raise SessionLost(self.lost)
                self._arrived = anyio.Event()
                with anyio.move_on_after(STOPPED_CHECK_SECONDS) as waited:
                    await self._arrived.wait()
                # Looked at only once a wait is long (its /proc read is on every call's way else).
                if waited.cancelled_caught and self.lost is None and stopped(self.anchor):
                    self._lose("the session's anchor was stopped")
            return self._lines.pop(0)
        raise SessionLost(self.lost or "the session's anchor did not answer in time")

    def _drain(self) -> None:
        """Take the lines the anchor has sent and the reader has not read yet."""
        with contextlib.suppress(OSError):
            while self.lost is None and readable_now(self.anchor.code):
                chunk = os.read(self.anchor.code, READ_SIZE)
                if not chunk:
                    break
                self._received(chunk)

    async def _read(self) -> None:
        """Read the anchor's lines for as long as the session lasts. It runs in the pool's task group:
        nothing the anchor sends, however malformed, may raise out of it (that would end the pool and
        every session and run with it), so anything unexpected ends this session instead."""
        fd = self.anchor.code
        try:
            with self.reading.scope:
                while self.lost is None:
                    await anyio.wait_readable(fd)
                    try:
                        chunk = os.read(fd, READ_SIZE)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        break
                    self._received(chunk)
        except (OSError, anyio.ClosedResourceError):
            pass
        except Exception as exc:  # a fault of ours on hostile input: still only this session's end
            self._lose(f"the session's anchor could not be read: {type(exc).__name__}: {exc}")
        finally:
            self.lost = self.lost or "the session's anchor is gone"
            self._ended_by_loss()
            self.reading.done.set()

    def _received(self, chunk: bytes) -> None:
        """Take every whole line of what came; a line longer than the wire allows, even unfinished,
        is malformed at once (nothing unbounded is held for a session)."""
        self._buffer += chunk
        while self.lost is None:
            line, newline, rest = self._buffer.partition(b"\n")
            if not newline:
                if len(self._buffer) > anchor_wire.MAX_LINE:
                    self._lose(f"the session's anchor sent a line longer than {anchor_wire.MAX_LINE} bytes")
                return
            self._buffer = rest
            try:
                self._take(anchor_wire.parse(line))
            except Malformed as exc:
                self._lose(f"the session's anchor sent what is not its wire ({exc})")

    def _take(self, message: anchor_wire.Message) -> None:
        call = self._call
        if isinstance(message, Ended):  # the end of a call (its keeper reaped it): the last, or the one before
            ended = next((c for c in (call, self._previous) if c is not None and c.pid == message.pid), None)
            if ended is not None and ended.report is None:
                status = os.waitstatus_to_exitcode(message.status) if _wait_status(message.status) else -9
                ended.ended(status, message.cpu_seconds, maxrss_bytes(message.maxrss_kb))
            return
        if isinstance(message, Started):  # the last call's pid, said once
            if call is not None and call.pid == 0:
                # Its pid in the session's PID namespace, the anchor's to signal; not a host pid, which
                # `interpreter_pid` is everywhere else (a look at /proc/PID there is another process).
                call.pid = message.pid
            elif call is not None:
                self._lose(f"the session's anchor said a second pid for one call ({message.pid})")
            return
        if isinstance(message, Lost):
            self.lost = message.why
            self._ended_by_loss()
            return
        if len(self._lines) >= MAX_QUEUED:
            self._lose(f"the session's anchor said more than {MAX_QUEUED} things nobody asked for")
            return
        self._lines.append(message)
        self._arrived.set()

    def _lose(self, why: str) -> None:
        """End the session for `why`: the anchor, told by the end of its socket, kills everything the
        session holds and exits; the call in progress ends with it, and whoever waits learns why."""
        if self.lost is None:
            self.lost = why
            self._buffer = b""
            self._lines.clear()
            if not self._closed:
                _shut(self.anchor.code, socket.SHUT_RDWR)
        self._ended_by_loss()

    def _ended_by_loss(self) -> None:
        if self._call is not None and self._call.report is None:
            self._call.ended(-9, 0.0, 0)  # no call runs in a session whose state is lost
        self._arrived.set()

    def close(self) -> None:
        """End the session: the anchor kills what it holds and exits when its socket closes (the
        owner then ends the anchor's interpreter as any other)."""
        self._closed = True  # its fd is the owner's to close from now on: nothing more goes down it
        if self._armed is not None:
            self._armed.close_all()
            self._armed = None
        _shut(self.anchor.code, socket.SHUT_WR)


def _call_ends() -> list[int]:
    """A call's stdin, stdout and stderr pipes and its job socket pair, each end an fd: all closed if
    one cannot be made."""
    ends: list[int] = []
    try:
        for _ in range(3):
            ends.extend(os.pipe())
        ours, theirs = socket.socketpair()
        ends.extend((theirs.detach(), ours.detach()))
    except OSError:
        for fd in ends:
            os.close(fd)
        raise
    return ends


def stopped(anchor: Child) -> bool:
    """Whether the session's `anchor` is stopped (state T or t): it answers nothing until continued."""
    try:
        with open(f"/proc/{anchor.interpreter_pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] in (b"T", b"t")
    except (OSError, IndexError):
        return False


def _shut(fd: int, how: int) -> None:
    """Shut the socket `fd` down (`how`: SHUT_WR, SHUT_RDWR) without closing it: the anchor then reads
    EOF, and ends the session."""
    with contextlib.suppress(OSError):  # a closed fd too: this runs where nothing may raise
        sock = socket.socket(fileno=fd)
        try:
            sock.shutdown(how)
        finally:
            sock.detach()


def _wait_status(status: int) -> bool:
    """Whether `status` is a wait status os.waitstatus_to_exitcode takes (exited, or killed by a
    signal), not one only a stopped or malformed report has."""
    return os.WIFEXITED(status) or os.WIFSIGNALED(status)


def _readable(fd: int) -> bool:
    try:
        return readable_now(fd)
    except OSError:
        return True
