"""What a session's state set up that would run its code in a keeper, taken out while a process is a
keeper (or a candidate to be one) and put back in each call forked from it. Standard library only;
`keeper` has the keeper.

A keeper is made of a call's state: whatever the call's code left, a Python signal handler, a profile
or trace function, a gc callback, an audit hook, a finaliser of its garbage, would run in the keeper
when its moment came (a signal sent to it from a later call, the keeper's own loop, a collection).
The keeper must run no code of the session's (a call rolled back could otherwise change the kept
state through it, or start processes that outlive every call). So `seal` takes all of it out, and
`unseal` puts it back as each call's code is about to run; the keeper forks bare (`libc.fork_bare`),
so that no at-fork hook runs in it either, and a call runs the state's `after_in_child` hooks as it begins
(`forkhooks`). And what the keeper would share with its calls (shared memory) is
made its own, or the state is not kept (`share_nothing`).
"""

from __future__ import annotations

import gc
import os
import signal
import stat
import sys
from _operator import call as _call  # type: ignore[import-not-found,unused-ignore]
from _operator import is_ as _is

# Bound as this module loads, before any code of a session's: a call that replaces signal.valid_signals
# or signal.pthread_sigmask (one line) does not reach what a keeper calls. (_signal's own returns
# numbers, not 64 enum members, which cost 50 us a call.)
from _signal import SIG_BLOCK, SIG_SETMASK  # type: ignore[import-not-found]
from _signal import default_int_handler as _default_int_handler
from _signal import getsignal as _getsignal
from _signal import pthread_sigmask as _sigmask
from _signal import siginterrupt as _siginterrupt
from _signal import signal as _set_handler
from itertools import chain as _chain
from itertools import compress as _compress
from itertools import starmap as _starmap

# Bound as this module loads too: what `seal` calls before it has put the interpreter's own library back
# (`library.Library`).
_range, _len, _listdir = range, len, os.listdir
_map, _zip, _callable, _filter, _tuple, _dict = map, zip, callable, filter, tuple, dict
_chain_from = _chain.from_iterable
# Collections, and the profile and trace functions, off before the library is put back: they would run
# the state's code (a finaliser of its garbage, a profile function at each call) as it is swapped.
_gc_isenabled, _gc_disable, _gc_enable = gc.isenabled, gc.disable, gc.enable
_getprofile, _setprofile, _gettrace, _settrace = sys.getprofile, sys.setprofile, sys.gettrace, sys.settrace
# And the interpreter's own list of gc callbacks (the collector's, whatever `gc.callbacks` is bound to
# later), `list`, and sys.monitoring's functions (3.12 and later; no library module of `Library`'s): a
# state that replaced `builtins.list`, `gc.callbacks` or `sys.monitoring.get_tool` had its code run as
# a process was sealed again (found by a review: after the looks for threads and shared memory).
_list, _GC_CALLBACKS = list, gc.callbacks
_MONITORING = vars(sys).get("monitoring")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from runner.inrun import libc
    from runner.inrun.forkhooks import ForkHooks, run_deferred
    from runner.inrun.library import Library
else:  # from this file's directory (`bootstrap.load_siblings`): never imported by the server
    import libc
    from forkhooks import run_deferred
    from library import Library


# Every signal there is (valid_signals() makes 64 enum members each call: 56 us).
ALL_SIGNALS = tuple(int(number) for number in signal.valid_signals())
_BLOCKABLE = frozenset(ALL_SIGNALS) - {signal.SIGKILL, signal.SIGSTOP}
# sys.monitoring's function that takes a callback out and puts it back, and its events, one bit each,
# a callback each (3.12 and later; none before).
_register_callback: Any = _MONITORING.register_callback if _MONITORING is not None else None
_EVENTS = getattr(_MONITORING, "events", None)
_MONITORING_EVENTS = tuple(
    value
    for name, value in (vars(_EVENTS).items() if _EVENTS is not None else ())
    if name.isupper() and type(value) is int and value > 0 and value & (value - 1) == 0
)

# What seals a process: rounds of steps called one after the other from C (`_take_round`), so that no
# profile, trace or sys.monitoring function of the state's sees them (called from Python, each call was
# one: the state's profile function ran as signals were blocked, and could unblock one whose handler
# then ran in the keeper; found by a review). Nothing in a round tests or compares an object of the
# state's (a tool's name may be a str subclass with a __bool__: found by a review of the fix).
_IGNORED = _is  # a signal's handler while sealed: C, takes (signum, frame), does nothing
# A round's steps: collections off first; then each handler replaced (`_swap_step`); then the rest.
_COLLECTOR = ((_gc_isenabled,), (_gc_disable,))
_TAKE_OUT = (
    (_sigmask, SIG_BLOCK, ALL_SIGNALS),
    (_getprofile,),
    (_setprofile, None),
    (_gettrace,),
    (_settrace, None),
    (_list, _GC_CALLBACKS),
    (_GC_CALLBACKS.clear,),
)
_TOOLS = tuple(_range(6)) if _MONITORING is not None else ()
# Each tool's callbacks taken out, one an event (3.12 and later; a tool's events stay set, with nothing
# to call); in a round's take-out, `int` marks the tool first (`Round`).
_CALLBACKS_OUT = tuple(
    tuple((_register_callback, tool, event, None) for event in _MONITORING_EVENTS) for tool in _TOOLS
)
_int = int
_LOOKED_AT = 8  # what a round reads at its end (`_take_round`)
# This process's threads, any thread (C code's and `_thread`'s too), as a step: two where they cannot be
# listed (then as if it had threads: a fork is right either way).
_TASKS = (_listdir, "/proc/self/task") if os.path.isdir("/proc/self/task") else (_tuple, ("?", "?"))


def _swap_step(number: int) -> tuple[object, ...]:
    return (_set_handler, number, _IGNORED)


def _states(handlers: list[object]) -> list[int]:
    """The signals whose handler (of `handlers`, each signal's in ALL_SIGNALS' order) is a Python one of
    the state's: callable, and not one of the interpreter's own (picked in C; by identity alone)."""
    return [
        number
        for number, handler in _zip(_compress(ALL_SIGNALS, _map(_callable, handlers)), _filter(_callable, handlers))
        if handler is not _IGNORED and handler is not _default_int_handler
    ]


ROUNDS = 3  # at most, before a state whose code keeps setting up what a round takes out is not kept


def library_module(holder: type[Holder], name: str) -> Any:
    """The module `name` of LIBRARY_MODULES, for a process that may be sealed: as loaded before any code
    of the session's ran (`Library.module`), never through an import statement (LIBRARY_CLASSES' note);
    imported where no library is recorded yet (the session's first keeper, before its first call)."""
    library = holder.library
    return library.module(name) if library is not None else __import__(name)


class Holder:
    """What a session's processes carry from keeper to call (`keeper.SessionCarry`, copied by each fork)."""

    sealed: Sealed | None
    fork_hooks: ForkHooks | None  # the interpreter's lists of at-fork hooks (`find_fork_hooks`)
    deferred: list[object]  # the after_in_child hooks, kept back for the call (`run_deferred`)
    mapped: bool  # the state made a mapping through Python's mmap module (`audit`)
    monitored: bool  # the state registered a sys.monitoring callback (`audit`)
    home: str  # the session's directory
    library: Library | None  # recorded in the session's first keeper


class Sealed:
    """What a call left that would run its code in a keeper, taken out of the process while it is one
    and put back in each call forked from it (`seal`, `unseal`)."""

    __slots__ = (
        "alone",
        "callbacks",
        "displaced",
        "enabled",
        "gc_callbacks",
        "handlers",
        "library",
        "mask",
        "profile",
        "restarting",
        "trace",
    )

    def __init__(self, mask: set[int], rounds: list[Round]) -> None:
        self.mask = mask
        self.library: tuple[object, ...] | None = None  # the state's, while the interpreter's own is in place
        # As the first round read them before it took them out, and what the state's code set up again
        # as a round ran, which a later round took out (found by a review: it was lost).
        first = rounds[0]
        self.enabled, self.handlers, self.gc_callbacks = first.enabled, first.handlers, _list(first.gc_callbacks)
        self.profile, self.trace, self.callbacks = first.profile, first.trace, first.callbacks
        self.restarting = first.restarting
        for later in rounds[1:]:
            self.handlers.update(later.handlers)
            self.restarting = [*self.restarting, *later.restarting]
            self.profile = later.profile if later.profile is not None else self.profile
            self.trace = later.trace if later.trace is not None else self.trace
            self.gc_callbacks += later.gc_callbacks
            self.callbacks.update(later.callbacks)
        self.alone = False  # no other thread as the library was put back (`seal`)
        # Each round, and what `seal_again` took out, held until a call drops them (`unseal`): freed in
        # a sealed process, a finaliser of the state's would run there (found by a review: its __del__
        # put the state's function back in the library, after it was put back, and the keeper called it).
        self.displaced: list[object] = [*rounds]


class Round:
    """One round's steps' results (`_take_round`), read: what it found and took out, and whether it
    ended clean (`clean`)."""

    __slots__ = (
        "alone",
        "callbacks",
        "clean",
        "enabled",
        "gc_callbacks",
        "handlers",
        "profile",
        "restarting",
        "taken",
        "trace",
    )

    def __init__(self, handled: list[int], restarting: list[int], taken: list[Any], raised: bool) -> None:
        count = _len(handled)
        self.restarting = restarting  # of those, the signals whose handler restarts system calls (SA_RESTART)
        self.taken = taken  # held: what it took out is never freed while sealed
        self.enabled = taken[0]
        self.handlers = _dict(_zip(handled, taken[2 : 2 + count]))
        _, self.profile, _, self.trace, _, self.gc_callbacks, _ = taken[2 + count : 9 + count]
        self.callbacks: dict[tuple[int, int], object] = {}
        step = 1 + _len(_MONITORING_EVENTS)
        for at in _range(9 + count, _len(taken) - _LOOKED_AT, step):
            for event, callback in _zip(_MONITORING_EVENTS, taken[at + 1 : at + step]):
                if callback is not None:
                    self.callbacks[taken[at], event] = callback
        # Read at its end, once nothing more of the state's could run in it (`_take_round`).
        tasks, enabled, handlers, profile, trace, gc_callbacks, callbacks, mask = taken[-_LOOKED_AT:]
        # No other thread as the end began (none can start: no code of the state's runs from there): none
        # can undo what the reads found, nor what is put back after (found by a review: a thread that
        # turned collections on after the reads, then ended before threads were counted, kept it on).
        self.alone = _len(tasks) == 1
        self.clean = (
            not raised
            and enabled is False
            and not _states(handlers)
            and profile is None
            and trace is None
            and not gc_callbacks
            and not [callback for callback in callbacks if callback is not None]
            and mask >= _BLOCKABLE
        )


def _take_round(monitored: bool) -> Round | None:
    """One round, its steps called from C. Collections off first (a collection as a step allocates would
    run finalisers of the state's: found by a review); each Python handler of a signal but the
    interpreter's own replaced by `_IGNORED` (a handler tripped by ``_thread.interrupt_main`` runs
    whatever the mask: found by a review); every signal blocked; the profile and trace functions and
    the gc callbacks read and taken out; each callback of each sys.monitoring tool in use taken out.

    Code of the state's may still run in it: a handler of a signal caught before (or tripped), as a step
    checks for signals, or a finaliser of a collection 3.12 scheduled before collections were turned
    off; and it may set up again what a step before took out, unblock a signal or trip a handler. So the
    round ends by looking (in C too): the collector, every handler, the profile and trace functions and
    the gc callbacks read, then each callback of each tool in use taken out again, then every signal
    blocked again. The round is clean where none of those finds anything of the state's, or a signal
    unblocked: from the reads on, nothing that could run the state's code was in place (the tools'
    callbacks are not called in C, nor in the runner's audit hook, where tracing is off), so none ran,
    and none can. Resumed at a step that raised (a handler of the state's; started over, a round read
    what it had taken out as the state's: found by a review), and then not clean; None where one
    raised three times."""
    handled = _states(_list(_map(_getsignal, ALL_SIGNALS)))
    restarting = [number for number in handled if libc.restarts(number)]  # (a handler put back loses it)
    # Every tool's callbacks, once the state has registered one: a tool freed since calls them still
    # (found by a review; events and callbacks outlive `free_tool_id` on 3.12 and 3.13).
    tools = _CALLBACKS_OUT if monitored else ()
    steps = _COLLECTOR + _tuple(_map(_swap_step, handled)) + _TAKE_OUT
    for tool in tools:
        steps += ((_int, tool[0][1]), *tool)
    steps += (
        _TASKS,
        (_gc_isenabled,),
        (_list, _map(_getsignal, ALL_SIGNALS)),
        (_getprofile,),
        (_gettrace,),
        (_len, _GC_CALLBACKS),
        (_list, _starmap(_call, _chain_from(tools))),
        (_sigmask, SIG_BLOCK, ALL_SIGNALS),
    )
    taken: list[Any] = []
    raised = False
    for _ in _range(3):
        try:
            taken.extend(_starmap(_call, steps[_len(taken) :]))  # a list keeps what came before a step raised
            return Round(handled, restarting, taken, raised)
        except BaseException:  # a handler of the state's raised as a step checked for signals: it has run
            raised = True
            continue
    return None


def _rounds(monitored: bool) -> list[Round] | None:
    """Rounds until one ends clean (`_take_round`): one, for a state whose code does not run as it is
    sealed; None where ROUNDS are not enough: then it is not kept."""
    rounds: list[Round] = []
    for _ in _range(ROUNDS):
        found = _take_round(monitored)
        if found is None:
            return None
        rounds.append(found)
        if found.clean:
            return rounds
    return None


def seal(holder: type[Holder]) -> bool:
    """Make this process one that runs no code of the session's (a keeper, or a candidate to be one),
    whatever the state it holds set up: every signal blocked (one sent to a keeper stays pending, and
    dies with it: no Python handler of the state's runs), no profile, trace or sys.monitoring function,
    no gc callbacks and no automatic collection (which would run finalisers of the state's garbage).
    What was there is kept in `holder.sealed`, for `unseal` in each call. False if the call's own
    handlers, run as signals are blocked, would not let that be done, or the state changed what could
    not be put back without running its code (`Library.unchanged`): then it is not kept."""
    if holder.sealed is not None:
        return True
    for _ in _range(3):
        try:
            # Reading the mask runs the handlers of signals already caught: in the call, in its time.
            mask = _sigmask(SIG_BLOCK, ())
            break
        except BaseException:  # noqa: S112  (the call's own handler raised; it has run)
            continue
    else:
        return False
    try:
        rounds = _rounds(holder.monitored)
    except BaseException:  # a handler of the state's, between a round's steps (its own time): not kept
        return False
    if rounds is None:
        return False
    sealed = Sealed(mask, rounds)
    sealed.alone = rounds[-1].alone  # then `seal_again` need not look again
    if holder.library is not None:
        if not holder.library.unchanged():
            return False  # the call is not kept (it ends as a call does; this process with it)
        sealed.library = holder.library.put_own()
    holder.sealed = sealed
    return True


def seal_again(holder: type[Holder]) -> bool:
    """Once a sealed call has no thread but the one doing this (it becomes the keeper itself), or in
    the candidate it forked because it had threads (`keeper.offer_state`, `keeper.fork_candidate`):
    what `seal` took out, taken out again, and the library put back again, no other thread running
    now. The call's threads ran on after its seal, and one could have put its functions back in place,
    or collections back on, or changed what cannot be put back (found by a test: its ``os.wait4 = f``
    ran in the keeper; by a second look at the fix, a thread that changed ``socket.socket``'s bases
    once the call was sealed, then ended, had its code run in the keeper the call became). False where
    the state changed what cannot be put back (`Library.unchanged`): then it is not kept. The state's,
    for each call, stays what `seal` recorded."""
    sealed = holder.sealed
    if sealed is None:
        return False
    try:
        rounds = _rounds(holder.monitored)
    except BaseException:  # (as in `seal`)
        return False
    if rounds is None:
        return False
    sealed.displaced += rounds
    sealed.alone = rounds[-1].alone
    if holder.library is not None:
        if not holder.library.unchanged():
            return False
        sealed.displaced.append(holder.library.put_own())
    return True


def unseal(holder: type[Holder]) -> None:
    """In a call forked from a keeper, as its code is about to run: what the state set that `seal`
    took out, put back: its library first, then its after_in_child hooks run (`run_deferred`), then the
    rest, signals last (one sent to the call meanwhile is handled in it)."""
    sealed, holder.sealed = holder.sealed, None
    if sealed is not None and holder.library is not None and sealed.library is not None:
        holder.library.put_back(sealed.library)
    run_deferred(holder)
    if sealed is None:
        return
    _GC_CALLBACKS[:] = sealed.gc_callbacks  # the collector's own list, whatever the state named gc.callbacks
    if sealed.enabled:
        _gc_enable()
    for (tool, event), callback in sealed.callbacks.items():
        _register_callback(tool, event, callback)  # (a tool freed calls them still: so does the state's)
    for number, handler in sealed.handlers.items():
        _set_handler(number, handler)
    for number in sealed.restarting:
        _siginterrupt(number, False)
    _setprofile(sealed.profile)
    _settrace(sealed.trace)
    _sigmask(SIG_SETMASK, sealed.mask)


def audit(holder: type[Holder]) -> object:
    """The audit hook of a session's processes, added before any code of its own: an audit hook can
    never be taken out again, and would run in the keeper at each of its forks, so a session's calls
    may not add one (sys.addaudithook returns, and the hook is not added); and a mapping made through
    Python's mmap module is noted, for `share_nothing` to look for shared memory only then."""

    def hook(event: str, _: tuple[object, ...]) -> None:
        if event == "mmap.__new__":
            holder.mapped = True
        elif event == "sys.monitoring.register_callback":
            holder.monitored = True
        elif event == "sys.addaudithook":
            raise RuntimeError("a session's calls cannot add audit hooks: they would run in its keeper")

    return hook


def share_nothing(holder: type[Holder]) -> str:
    """Make this process's state its own before it is kept: a mapping shared with other processes
    (``mmap.mmap(-1, n)``'s MAP_SHARED anonymous memory) would be shared by the keeper with every call
    forked from it, and a call rolled back would leave its writes there. Anonymous shared memory is made
    private, its bytes and protection kept; any other shared mapping that is writable (a file's, POSIX
    or System V shared memory), or read-only now but of the session's own files or shared memory (a
    later call may make it writable), cannot be, and the state is not kept: why, or ''. A read-only
    shared mapping of another file (glibc's gconv cache) is no state of the session's. Looked for once
    the state has made a mapping through Python's mmap module (mmap, numpy.memmap,
    multiprocessing.shared_memory): reading /proc/self/maps takes 0.35 ms with pandas loaded, on each
    kept call's path. One that C code maps itself is not looked for."""
    if not holder.mapped:
        return ""
    try:
        with open("/proc/self/maps", "rb") as maps:
            text = maps.read()
    except OSError as exc:
        return f"its memory map could not be read: {exc}"
    for line in _shared(text):
        fields = line.split(None, 5)
        if len(fields) < 5:
            continue
        start, end = (int(part, 16) for part in fields[0].split(b"-"))
        path = fields[5].decode(errors="replace") if len(fields) > 5 else ""
        if path == "/dev/zero (deleted)":
            prot = sum(bit for flag, bit in zip(fields[1][:3], (1, 2, 4), strict=True) if flag != ord("-"))  # r, w, x
            try:
                if libc.make_private(start, end - start, prot):
                    continue
            except MemoryError:
                pass
        if fields[1][1:2] == b"w" or _sessions(path, holder.home):
            return f"it holds shared memory ({path or 'anonymous'}), which a roll-back could not undo"
    return ""


def reaches_own_memory() -> bool:
    """Whether the call holds an fd on its own /proc entries (``/proc/self/mem`` opened while it could):
    one a later call inherits from a keeper that is this process writes the kept state. A candidate
    forked from the call is not what such an fd reaches."""
    own = (f"/proc/{os.getpid()}/", "/proc/self/", "/proc/thread-self/")
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return True
    for name in names:
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith(own):
                return True
        except OSError:
            continue  # closed meanwhile (the listing's own)
    return False


def threads() -> int:
    """How many threads this process has: any thread, not only `threading`'s (C code's, `_thread`'s)."""
    try:
        return _len(_listdir("/proc/self/task"))
    except OSError:
        return 2  # cannot tell: as if it had threads (a fork is right either way)


def nameless_file() -> str:
    """Why this process's state cannot be kept for the open files it holds, or '': a regular file
    with no name (``tempfile.TemporaryFile``, a file deleted while open) is no file of the snapshot's,
    and a call forked from the keeper shares it, so a call rolled back would leave its writes there
    (found by a review), and what it holds would count in no budget. A named file is the snapshot's
    to put back (`Snapshot.restore` writes it in place, where an open file sees it)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError as exc:
        return f"its open files could not be listed: {exc}"
    for name in names:
        try:
            info = os.fstat(int(name))
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 0:  # a memfd's too
                return (
                    f"it holds open a file with no name (fd {name}: a temporary file, or one deleted "
                    "while open), which a roll-back could not put back; close it before the call ends "
                    "(sqlite3 makes them for large sorts: PRAGMA temp_store=MEMORY keeps those in memory)"
                )
        except OSError:
            continue  # the listing's own fd, closed already
    return ""


def open_files(holder: type[Holder], skip: int) -> dict[int, tuple[int, int, bytes]]:
    """Where each open file of this process (but `skip`) is read or written (-1: not a file one seeks
    in), its status flags (O_APPEND, O_NONBLOCK) and, for a regular file, the flock held on it
    (`_flock`): a call forked from the keeper shares its open files, all of that included, so a call
    that is rolled back would leave them as it made them (found by a review: an O_APPEND and a flock a
    rolled-back call set stayed; by a second look, an O_NONBLOCK on a pipe, and a lock of the state's
    it let go). Taken as the keeper begins, put back after a roll-back (`put_back_files`)."""
    fcntl: Any = library_module(holder, "fcntl")

    found: dict[int, tuple[int, int, bytes]] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        fd = int(name)
        if fd != skip:
            try:
                flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            except OSError:
                continue  # the listing's own fd, closed already
            try:
                offset = os.lseek(fd, 0, os.SEEK_CUR)
            except OSError:
                offset = -1  # a pipe or a socket
            found[fd] = (offset, flags, _flock(fd))
    return found


def put_back_files(holder: type[Holder], saved: dict[int, tuple[int, int, bytes]]) -> None:
    """Each open file as `open_files` found it: its offset, its flags, its flock (an OFD lock,
    F_OFD_SETLK, is not looked at: docs/sessions.md)."""
    fcntl: Any = library_module(holder, "fcntl")

    locks = {b"": fcntl.LOCK_UN, b"READ": fcntl.LOCK_SH, b"WRITE": fcntl.LOCK_EX}
    for fd, (offset, flags, lock) in saved.items():
        try:
            if offset >= 0:
                os.lseek(fd, offset, os.SEEK_SET)
            if fcntl.fcntl(fd, fcntl.F_GETFL) != flags:
                fcntl.fcntl(fd, fcntl.F_SETFL, flags)
            if _flock(fd) != lock:
                fcntl.flock(fd, locks.get(lock, fcntl.LOCK_EX) | (fcntl.LOCK_NB if lock else 0))
        except OSError:
            pass  # closed meanwhile, or its lock taken by another open file since: as it is


def _flock(fd: int) -> bytes:
    """The flock held on the regular file open as `fd`, by this open file (its fdinfo's ``lock:`` line
    of kind FLOCK): ``READ``, ``WRITE``, or b"" for none, or where `fd` is no regular file."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return b""
    info = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        text = os.read(info, 4096)
    finally:
        os.close(info)
    for line in text.splitlines():
        fields = line.split()
        if fields[:1] == [b"lock:"] and b"FLOCK" in fields and len(fields) > 4:
            return fields[fields.index(b"FLOCK") + 2]
    return b""


def _sessions(path: str, home: str) -> bool:
    """Whether a mapped `path` is of what a session can write: its directory, shared memory, a file gone."""
    places = (home + "/" if home else "\0", "/dev/shm/", "/tmp/", "/run/", "/memfd:", "/SYSV")
    return not path or path.endswith("(deleted)") or path.startswith(places)


def _shared(text: bytes) -> list[bytes]:
    """The lines of /proc/self/maps's `text` whose mapping is shared (``???s``), found by bytes.find,
    not by splitting its hundreds of lines."""
    found = []
    for r in b"r-":
        for w in b"w-":
            for x in b"x-":
                permissions = bytes((32, r, w, x, ord("s"), 32))
                at = text.find(permissions)
                while at >= 0:
                    start = text.rfind(b"\n", 0, at) + 1
                    end = text.find(b"\n", at)
                    found.append(text[start : end if end >= 0 else len(text)])
                    at = text.find(permissions, at + 1)
    return found
