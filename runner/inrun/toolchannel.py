"""The run's side of its tool calls (code mode): ``import mcp_tools`` made to work (`offer_tools`), and
each call framed on the job socket and its answer taken back, by the run's processes and by their
threads at once (`ToolChannel`).

Standard library only. A run loads this with its other modules (`bootstrap.load_siblings`), and uses
it only where the server brokers tools; the frames themselves are the wire's (`wire.frame_tool`,
`wire.frame_line`).
"""

from __future__ import annotations

import os
import sys

# Always loaded (the interpreter's own SIGINT handler). Its mask function, not signal's, which wraps the
# mask it returns in enum members: 68 us a pair of calls here against 2.5.
from _signal import SIG_BLOCK, SIG_SETMASK, valid_signals  # type: ignore[import-not-found]
from _signal import pthread_sigmask as _sigmask

TYPE_CHECKING = False
if TYPE_CHECKING:
    import importlib.machinery
    import types
    from collections.abc import Sequence
    from typing import Any

    from runner.inrun import wire
elif __package__:  # the server's import (its tests), as runner.inrun.toolchannel
    from runner.inrun import wire
else:  # in a run: from this directory (`bootstrap.load_siblings`)
    import wire

_SIGNALS = valid_signals()  # every one: held while the main thread takes a frame (`_take`)
MAX_WHOLE = 64 << 20  # a frame the main thread takes in one receive, at most
# Looked at, at the head, before a frame is taken: a frame this small that is all there already is
# taken in one receive that nothing splits, without holding signals (two system calls less a call).
PEEKED = 4096
LOST_WAKE = 0.05  # seconds a waiting call sleeps before it looks again whether it should read
# Calls given up (`ToolChannel._give_up`): slots of a call id's most bytes, one picked by its hash.
GIVEN_UP_SLOTS, GIVEN_UP_SLOT = 64, 32


class _Waiting:
    """One process's calls waiting for their answers, one per calling thread, and which of those threads
    reads the socket (`ToolChannel._answer`): one at a time, and only its own answer. An answer at the
    head that is another waiting thread's makes that thread the reader: no thread takes another's
    bytes, so a signal's exception in one (the main thread's) fails its own call alone.

    Each call waits on a lock of its own (`calls`: held while it has nothing to wake for), which C
    acquires and releases whole: no signal's exception leaves one half-taken, as it could a
    `threading.Condition`'s (Python's: found by a review, every thread of the process waiting for ever)."""

    __slots__ = ("calls", "lock", "reader")

    def __init__(self) -> None:
        import _thread  # threading's locks, without its import (1-4 ms of a run's)

        self.lock = _thread.allocate_lock()  # over `calls` and `reader`
        self.calls: dict[bytes, Any] = {}  # sent, and not answered nor given up: each one's wake
        self.reader: bytes | None = None  # the call whose thread reads the socket now

    def wake(self, call_id: bytes | None = None) -> None:
        """Wake `call_id`'s thread, or every waiting thread (one will read next). Under `lock`."""
        for waiting, woken in self.calls.items():
            if (call_id is None or waiting == call_id) and woken.locked():
                woken.release()


class ToolChannel:
    """The run's side of its tool calls (`exchange`) on its job socket `fd`: made once, when the run
    first imports ``mcp_tools``, and inherited by the processes it forks and, in a session, by its
    later calls (whose job socket is `fd` again, by number)."""

    def __init__(self, fd: int, given_up: Any = None) -> None:
        """`given_up`: memory all the run's processes share (made before its code runs: `_ToolsFinder`)."""
        import mmap
        import socket

        class Borrowed(socket.socket):
            """A socket over an fd it does not own: never closed, even when collected, and no warning."""

            def __del__(self) -> None:
                self.detach()

        self.fd = fd
        # One socket object for the run's life, not one per call: making one costs a call some
        # syscalls (its family, type and timeout read and set), each a few microseconds in a sandbox.
        self._socket = Borrowed(socket.AF_UNIX, socket.SOCK_STREAM, 0, fd)
        self._socket.settimeout(None)  # blocking, whatever socket.setdefaulttimeout the run's code set
        self.given_up = given_up if given_up is not None else mmap.mmap(-1, GIVEN_UP_SLOTS * GIVEN_UP_SLOT)
        self._waiting = _Waiting()
        # A fork has only the forking thread: its calls are none of its parent's, and the parent's lock
        # may be held by a thread the child lacks.
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self._waiting = _Waiting()

    def exchange(self, body: bytes, call_id: bytes) -> bytes:
        """One tool call: `body` framed on the job socket, its answer's body read back. OSError if the
        socket is gone or closed by the server (it shuts a channel it cannot read); ValueError for an
        answer too large. Any thread may call it while others wait for their answers.

        The run's processes share the socket, and each takes only its own answers. An answer at the
        head is looked at before it is taken (MSG_PEEK), then taken by its own process alone; another
        that looks while it is being taken sees no frame at the head (the middle of an answer: its
        JSON holds no newline) and waits. In a process, one waiting thread at a time reads the socket,
        and takes only its own answer: another waiting thread's at the head makes that thread the
        reader. An answer at the head that is not its process's is left for that process, unless no
        one will take it: that process is gone (or a zombie), or it is a call of this process that no
        thread waits for (given up), or one its process gave up (a signal's exception while it
        waited, say: such a call is written down in memory the run's processes share). Such an answer
        is dropped, under a POSIX lock on the socket (per process: a fork does not inherit it) so that
        two processes do not both drop it. Every call is written under that lock (`wire.in_turn`),
        shared for a small one (one write, which no other write splits) and alone for a large one
        (written in parts) and for the report (`harvest.send`)."""
        import _thread

        waiting = self._waiting
        woken = _thread.allocate_lock()
        woken.acquire()
        with waiting.lock:
            waiting.calls[call_id] = woken  # before it is sent: its answer may come at once
        try:
            framed = wire.frame_tool(body, call_id)
            wire.in_turn(self.fd, len(framed) > wire.ATOMIC_BYTES, wire.write_whole, self.fd, framed)
            return self._answer(call_id, waiting, woken)
        except BaseException:
            # First, in one C call under C's enter (no signal's exception comes before it): a second
            # signal's exception at _give_up's first step must not leave the call waited for.
            with waiting.lock:
                answered = waiting.calls.pop(call_id, None) is None
            self._give_up(call_id, waiting, answered)
            raise

    def _answer(self, call_id: bytes, waiting: _Waiting, woken: Any) -> bytes:
        """This call's answer, read by this thread once it is the reader: when no thread reads, or when
        the reader finds this call's answer at the head and hands the reading over."""
        lock = waiting.lock
        while True:
            while True:
                with lock:
                    # No reader, or one whose call ended without letting go of the reading (a signal
                    # handler's exception in the main thread at just the wrong step): this one reads.
                    if waiting.reader in (None, call_id) or waiting.reader not in waiting.calls:
                        waiting.reader = call_id
                        break
                # Until the reader wakes it; and again now and then, for a wake such an exception lost.
                woken.acquire(timeout=LOST_WAKE)
            answer = None
            try:
                answer = self._read(call_id, waiting)
            finally:
                with lock:
                    if waiting.reader == call_id:  # else handed over, to the thread whose answer came
                        waiting.reader = None
                        waiting.wake()  # a thread still waiting reads next
                    if answer is not None:
                        del waiting.calls[call_id]
            if answer is not None:
                return answer

    def _read(self, call_id: bytes, waiting: _Waiting) -> bytes | None:
        """Read the socket until `call_id`'s answer comes, or another waiting thread's is at the head
        (None: the reading is that thread's now)."""
        import select
        import socket
        import time

        # In poll (the server's read of a call wakes a recv for nothing); one a call (a fork copies one in use).
        ready = select.poll()
        ready.register(self.fd, select.POLLIN)
        channel = self._socket
        while True:
            ready.poll()
            head = _peek(channel)  # blocks until something is there
            line = _line_of(head)
            if line is not None:
                line_bytes, size, owner = line
                if owner == call_id:
                    if size > wire.MAX_ANSWER_BYTES:
                        _drop(channel, line_bytes + size)
                        with waiting.lock:
                            del waiting.calls[call_id]  # answered, if not with a value
                        raise ValueError("an answer too large")
                    if len(head) >= line_bytes + size:  # all there: one receive, which nothing splits
                        return _recv(channel, line_bytes + size, socket.MSG_WAITALL)[line_bytes:]
                    return _receive(channel, line_bytes + size)[line_bytes:]
                with waiting.lock:
                    if owner in waiting.calls:  # its thread waits: it reads its own answer
                        waiting.reader = owner
                        waiting.wake(owner)
                        return None
                at = _slot(owner)
                given_up = self.given_up[at : at + GIVEN_UP_SLOT].rstrip(b"\0") == owner
                if given_up or _orphaned(owner):
                    if wire.in_turn(self.fd, True, _drop_if_there, channel, head, line_bytes + size) and given_up:
                        self.given_up[at : at + GIVEN_UP_SLOT] = bytes(GIVEN_UP_SLOT)
                    continue
            time.sleep(0.0005)  # another process's answer at the head, or being read, or on its way

    def _give_up(self, call_id: bytes, waiting: _Waiting, answered: bool) -> None:
        """`call_id` waits no more (a signal's exception, say): if the reading was handed to it, it goes to
        the next waiting thread; if its answer has not come, the call is written down as given up, over
        any older one in its slot (whose answer then waits longer), for the run's other processes to
        drop (this one's threads drop it as no one's)."""
        with waiting.lock:
            if waiting.reader == call_id:
                waiting.reader = None
                waiting.wake()
        if not answered:
            at = _slot(call_id)
            self.given_up[at : at + GIVEN_UP_SLOT] = call_id.ljust(GIVEN_UP_SLOT, b"\0")


class _ToolsFinder:
    """Makes ``import mcp_tools`` work in a run whose server brokers tools (code mode): on the first
    import, the module's source and the caller's catalog of tools come from the server over the job
    socket, and the module is made from them. A run that never imports it pays for nothing more than
    this finder on sys.meta_path."""

    def __init__(self) -> None:
        # One channel for the run's processes and threads, however often its code imports mcp_tools anew:
        # a process's threads take their answers from each other through it (`ToolChannel.exchange`).
        self._channel: ToolChannel | None = None
        self._given_up: Any = None
        self.share_given_up()

    def share_given_up(self) -> None:
        """Make the memory that says which calls a process of the run gave up (`ToolChannel`): before the
        run's code runs, so that the processes it forks share it whichever of them imports mcp_tools
        first; and again before each later call of a session, whose kept state holds it private
        (`sealing.share_nothing`), where it would be each forked process's own."""
        import mmap

        self._given_up = mmap.mmap(-1, GIVEN_UP_SLOTS * GIVEN_UP_SLOT)
        if self._channel is not None:
            self._channel.given_up = self._given_up

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None, /
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "mcp_tools":
            return None
        import importlib.util

        return importlib.util.spec_from_loader(name, self)  # type: ignore[arg-type]  # exec_module is enough

    def create_module(self, spec: object) -> None:
        return None  # the default module

    def exec_module(self, module: types.ModuleType) -> None:
        import json
        import stat

        fd = wire.CODE_FD
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                raise OSError("fd 3, this run's channel to the server, is no longer its socket")
            if self._channel is None:
                self._channel = ToolChannel(fd, self._given_up)
            channel = self._channel
            answer = json.loads(channel.exchange(b'{"op": "module"}', b"%d.0" % os.getpid()))
            if "error" in answer:  # refused: the run's bytes, say
                raise ValueError(answer["error"])
            source, catalog = answer["source"], answer["catalog"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ImportError(f"mcp_tools: the server's tools could not be listed: {exc}", name="mcp_tools") from None
        exec(compile(source, "<mcp_tools>", "exec"), module.__dict__)  # noqa: S102  (the module the server sent)
        module._mcp_start(catalog, channel.exchange)


def offer_tools() -> None:
    """Let this run import ``mcp_tools`` (once per process: a session's later calls inherit it, and have
    the memory of calls given up made anew, shared by the processes each forks)."""
    finder = next((finder for finder in sys.meta_path if isinstance(finder, _ToolsFinder)), None)
    if finder is None:
        sys.meta_path.append(_ToolsFinder())
    else:
        finder.share_given_up()
    import builtins

    if not hasattr(builtins, "help"):  # runs start without site: help(mcp_tools) lists the tools
        builtins.help = _help  # type: ignore[assignment]


def _help(*args: object, **kwargs: object) -> None:
    """help() as the interactive interpreter has it (site's), made for runs that may call tools."""
    import pydoc

    pydoc.help(*args, **kwargs)


def _slot(call_id: bytes) -> int:
    """Where a call given up is written down (`ToolChannel._give_up`)."""
    import zlib

    return zlib.crc32(call_id) % GIVEN_UP_SLOTS * GIVEN_UP_SLOT


def _peek(channel: Any, wait: bool = True) -> bytes:
    """What is at the head of the socket, up to PEEKED bytes: a small answer whole."""
    import socket

    if not wait:
        try:
            head: bytes = channel.recv(PEEKED, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return b"-"  # nothing there now
    else:
        head = _recv(channel, PEEKED, socket.MSG_PEEK)  # blocks until something is there
    if not head:
        raise OSError("the server closed this run's channel")
    return head


def _recv(channel: Any, size: int, flags: int = 0) -> bytes:
    """A blocking receive, also where the fd has been made non-blocking since the channel was made
    (the run's code can: a socket object of its own over fd 3, with a default timeout): then it is
    made blocking again."""
    while True:
        try:
            chunk: bytes = channel.recv(size, flags)
            return chunk
        except BlockingIOError:
            os.set_blocking(channel.fileno(), True)  # the fd's flag itself, whatever socket class is in use


def _line_of(head: bytes) -> tuple[int, int, bytes] | None:
    """The answer's line at the head, if whole there (else on its way, or another's being read)."""
    try:
        return wire.frame_line(head, wire.ANSWER_HEAD)
    except ValueError:
        return None


def _orphaned(owner: bytes) -> bool:
    """Whether the call `owner` names is no one's now: its process is gone, or it is this process's
    (and none of its threads waits for it: `ToolChannel._read` asked first)."""
    pid = int(owner.split(b".")[0] or b"0")
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or no pid at all (an id the run made up)
        return True
    except OSError:
        return False
    try:  # a zombie is signalled as if alive, and will never take its answer
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _receive(channel: Any, size: int) -> bytes:
    """`size` bytes (a frame), whole, with no other reader between (`_take`)."""
    return _take(channel, size, keep=True)


def _drop_if_there(channel: Any, head: bytes, size: int) -> bool:
    """Drop the answer of `size` bytes that starts with `head`, if still at the head (no other process
    dropped it meanwhile); whether it was."""
    if _peek(channel, wait=False)[: wire.MAX_FRAME_LINE] != head[: wire.MAX_FRAME_LINE]:  # its line, its id
        return False
    _drop(channel, size)
    return True


def _drop(channel: Any, size: int) -> None:
    """`size` bytes (a frame no one takes) taken and let go (`_take`)."""
    _take(channel, size, keep=False)


def _take(channel: Any, size: int, keep: bool) -> bytes:
    """A frame's `size` bytes taken from the socket, kept or not. In the main thread (the only one that
    raises a signal handler's exception, and only between its steps), with its signals held and in one
    receive up to MAX_WHOLE: the exception then comes once the frame is taken, never in its middle,
    where the rest would stay at the head and no one could read past it (found by a review: the run's
    every later call waited until its timeout)."""
    import socket

    threading = sys.modules.get("threading")  # not imported: no thread but this one (the main one) runs Python
    main = threading is None or threading.current_thread() is threading.main_thread()
    before = _sigmask(SIG_BLOCK, _SIGNALS) if main else None
    try:
        part = size if main and size <= MAX_WHOLE else 1 << 20
        taken, left = bytearray(), size
        while left > 0:
            chunk = _recv(channel, min(left, part), socket.MSG_WAITALL)
            if not chunk:
                raise OSError("the server closed this run's channel")
            left -= len(chunk)
            if keep:
                taken += chunk
        return bytes(taken)
    finally:
        if before is not None:
            _sigmask(SIG_SETMASK, before)
