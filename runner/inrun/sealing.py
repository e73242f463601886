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
(`after_bare_fork`, `run_deferred`). And what the keeper would share with its calls (shared memory) is
made its own, or the state is not kept (`share_nothing`).
"""

from __future__ import annotations

import errno
import gc
import os
import signal
import stat
import sys
from _imp import acquire_lock as _acquire_import_lock
from _imp import release_lock as _release_import_lock

# Bound as this module loads, before any code of a session's: a call that replaces signal.valid_signals
# or signal.pthread_sigmask (one line) does not reach what a keeper calls. (_signal's own returns
# numbers, not 64 enum members, which cost 50 us a call.)
from _signal import SIG_BLOCK, SIG_SETMASK  # type: ignore[import-not-found]
from _signal import pthread_sigmask as _sigmask

# Bound as this module loads too: what `seal` calls before it has put the interpreter's own library back
# (`library.Library`).
_vars, _range, _len, _listdir, _fork, _exit = vars, range, len, os.listdir, os.fork, os._exit
# Collections, and the profile and trace functions, off before the library is put back: they would run
# the state's code (a finaliser of its garbage, a profile function at each call) as it is swapped.
_gc_isenabled, _gc_disable = gc.isenabled, gc.disable
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
    from runner.inrun.library import Library
else:  # from this file's directory (`bootstrap.load_siblings`): never imported by the server
    import libc
    from library import Library


# Every signal there is (valid_signals() makes 64 enum members each call: 56 us).
ALL_SIGNALS = tuple(signal.valid_signals())
# sys.monitoring's functions and events, one bit each, a callback each (3.12 and later; none before).
_MONITORING_FUNCTIONS: Any = (
    (_MONITORING.get_tool, _MONITORING.get_events, _MONITORING.set_events, _MONITORING.register_callback)
    if _MONITORING is not None
    else (None, None, None, None)
)
_get_tool, _get_events, _set_events, _register_callback = _MONITORING_FUNCTIONS
_EVENTS = getattr(_MONITORING, "events", None)
_MONITORING_EVENTS = tuple(
    value
    for name, value in (vars(_EVENTS).items() if _EVENTS is not None else ())
    if name.isupper() and type(value) is int and value > 0 and value & (value - 1) == 0
)


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
        "library",
        "mask",
        "monitoring",
        "profile",
        "trace",
    )

    def __init__(self, mask: set[int], library: tuple[object, ...] | None, taken: tuple[bool, Any, Any]) -> None:
        self.mask = mask
        self.library = library  # the state's, while the interpreter's own is in place (`Library`)
        self.enabled, self.profile, self.trace = taken  # as they were before `seal` turned them off
        self.alone = False  # no other thread as the library was put back (`seal`)
        # What `seal_again` took out, held until a call drops it (`unseal`): freed in a sealed process,
        # a finaliser of the state's would run there (found by a review: its __del__ put the state's
        # function back in the library, after it was put back, and the keeper called it).
        self.displaced: list[object] = []
        self.gc_callbacks = _list(_GC_CALLBACKS)
        self.monitoring: dict[int, int] = {}
        if _MONITORING is not None:  # Python 3.12 and later
            for tool in _range(6):
                if _get_tool(tool) is not None:
                    self.monitoring[tool] = _get_events(tool)
        self.callbacks: dict[tuple[int, int], object] = {}  # sys.monitoring's, taken out (`_take_callbacks`)


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
    try:  # noqa: SIM105  (contextlib is not imported in runs)
        _sigmask(SIG_BLOCK, ALL_SIGNALS)
    except BaseException:  # noqa: S110  (a handler run as the mask took hold: blocked all the same)
        pass
    taken = (_gc_isenabled(), _getprofile(), _gettrace())
    _gc_disable()
    _setprofile(None)
    _settrace(None)
    # No other thread now, and none can start (only this code runs from here): none can undo what is put
    # back next (`seal_again` need not look again). Bound at load: os.listdir may be the state's now.
    try:
        alone = _len(_listdir("/proc/self/task")) == 1
    except OSError:
        alone = False
    if holder.library is not None and not holder.library.unchanged():
        return False  # the call is not kept (it ends as a call does; this process with it)
    library = holder.library.put_own() if holder.library is not None else None
    sealed = Sealed(mask, library, taken)
    sealed.alone = alone
    _GC_CALLBACKS.clear()
    for tool in sealed.monitoring:
        _set_events(tool, 0)
    sealed.callbacks = _take_callbacks()
    holder.sealed = sealed
    return True


def _take_callbacks() -> dict[tuple[int, int], object]:
    """sys.monitoring's callbacks of the tools in use, each event's, taken out (3.12 and later): a
    tool's events set to none are its global ones, and the local events a state set on the library's
    code (``set_local_events`` on socket.socket.close, say) would still call its callback while sealed
    (found by a review: in the keeper's loop)."""
    taken: dict[tuple[int, int], object] = {}
    if _MONITORING is None:
        return taken
    for tool in _range(6):
        if _get_tool(tool) is None:
            continue
        for event in _MONITORING_EVENTS:
            callback = _register_callback(tool, event, None)
            if callback is not None:
                taken[tool, event] = callback
    return taken


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
    try:  # noqa: SIM105  (contextlib is not imported in runs)
        _sigmask(SIG_BLOCK, ALL_SIGNALS)  # as sealed (another thread cannot change this one's mask; a finaliser could)
    except BaseException:  # noqa: S110  (blocked all the same)
        pass
    displaced = sealed.displaced
    displaced += (_getprofile(), _gettrace(), _list(_GC_CALLBACKS))
    _gc_disable()
    _setprofile(None)
    _settrace(None)
    if holder.library is not None:
        if not holder.library.unchanged():
            return False
        displaced.append(holder.library.put_own())
    _GC_CALLBACKS.clear()
    if _MONITORING is not None:  # 3.12 and later: the tools in use (another's events cannot be set)
        for tool in _range(6):
            if _get_tool(tool) is not None:
                _set_events(tool, 0)
        displaced.append(_take_callbacks())
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
    gc.callbacks[:] = sealed.gc_callbacks
    if sealed.enabled:
        gc.enable()
    for tool, events in sealed.monitoring.items():
        if _get_tool(tool) is not None:  # (a tool freed since: by a finaliser os.fork ran, say)
            _set_events(tool, events)
    for (tool, event), callback in sealed.callbacks.items():
        if _get_tool(tool) is not None:
            _register_callback(tool, event, callback)
    sys.setprofile(sealed.profile)
    sys.settrace(sealed.trace)
    _sigmask(SIG_SETMASK, sealed.mask)


def _interpreters_own() -> None:
    """Registered as an at-fork hook of each kind before any code of a session's runs, to find the
    interpreter's lists of them (`find_fork_hooks`)."""


def _interpreters_own_before() -> None:
    """`_interpreters_own`, as a ``before`` hook (one function each, to tell the three lists apart)."""


def _interpreters_own_in_parent() -> None:
    """`_interpreters_own`, as an ``after_in_parent`` hook."""


class ForkHooks:
    """The interpreter's lists of at-fork hooks (os.register_at_fork keeps them in it), found in a
    session's first keeper, where no code of the session's has run (`find_fork_hooks`)."""

    __slots__ = ("before", "child", "in_parent")

    def __init__(self, child: list[object], before: list[object] | None, in_parent: list[object] | None) -> None:
        self.child = child  # the after_in_child hooks
        self.before = before  # the before hooks, None where not found
        self.in_parent = in_parent  # the after_in_parent hooks, None where not found


def find_fork_hooks() -> ForkHooks | None:
    """In a process no code of a session's has run in (its first keeper): the interpreter's lists of
    at-fork hooks, found through hooks registered now; None where the after_in_child list cannot be
    found. Some milliseconds, once per session (gc.get_referrers over the heap)."""
    os.register_at_fork(
        before=_interpreters_own_before, after_in_parent=_interpreters_own_in_parent, after_in_child=_interpreters_own
    )
    # A zygote with packages froze its heap (gc.freeze: no collection in a fork copies its pages), the
    # lists with it, which get_referrers does not look through: thawed for the search, frozen again (two
    # splices of the collector's lists). Found by a review: not found, every hook ran, the session's too.
    frozen = gc.get_freeze_count() > 0
    if frozen:
        gc.unfreeze()
    try:
        sentinels = (_interpreters_own, _interpreters_own_before, _interpreters_own_in_parent)
        child, before, in_parent = (_ending_with(hook) for hook in sentinels)
    finally:
        if frozen:
            gc.freeze()
    return ForkHooks(child, before, in_parent) if child is not None else None


def _ending_with(hook: object) -> list[object] | None:
    """The one list that ends with `hook`, among the objects that refer to it; None if not one."""
    found = [r for r in gc.get_referrers(hook) if type(r) is list and r and r[-1] is hook]
    return found[0] if len(found) == 1 else None


def after_bare_fork(holder: type[Holder]) -> None:
    """In the child of `libc.fork_bare`, before anything else: what os.fork does in its child (CPython's
    after-fork work: the interpreter's locks and thread states made anew, the import lock let go),
    without its after_in_child hooks, kept back in `holder.deferred` for a call to run as it begins
    (`run_deferred`): none of them runs in a candidate or a keeper, nor in a call forked ahead before
    its code comes. Not the interpreter's own either: threading's calls methods of each Thread the
    state made (a subclass's), logging's of each of its handlers, random's reseeds the state's stream
    through `random` (found by reviews: each ran the state's code in a call forked ahead)."""
    hooks = holder.fork_hooks
    if hooks is None:
        # The list was not found (`find_fork_hooks`): the session's hooks would run here with the
        # interpreter's. This fork dies instead (a review: it ran them), and the session with its calls.
        os._exit(1)
    listed = hooks.child
    whole = listed[:]
    listed[:] = []
    try:
        libc.after_fork_child()
    finally:
        listed[:] = whole
    holder.deferred = whole


def fork_with_threads(holder: type[Holder]) -> int:
    """os.fork, for a process with other threads (a call forking its candidate), with no at-fork hook
    run, here or in the child (its after_in_child hooks kept back in `holder.deferred`, as
    `after_bare_fork` does). Not `libc.fork_bare` there: the child would run a line of Python before its
    after-fork work, with the interpreter's lock as the threads left it; a thread that had waited for it
    long enough asks its holder to let go, and the child, alone, then lets go and waits for ever for a
    thread that is not there (found: a call with a busy thread lost its session). os.fork makes that
    lock anew in C first.

    The other threads run on as it forks, and one may register a hook meanwhile (found by a review: the
    GIL let go as os.fork waited for the import lock a thread held): the import lock is taken first,
    and the child's list holds a guard alone, which ends the child where anything was added to it. A
    thread that changes the list in place (found through gc) can still put a hook before the guard
    (docs/sessions.md). OSError if it cannot be done."""
    hooks = holder.fork_hooks
    if hooks is None or hooks.before is None or hooks.in_parent is None:
        raise OSError(errno.ENOSYS, "fork: the interpreter's at-fork hooks were not found")
    listed, before, in_parent = hooks.child, hooks.before, hooks.in_parent

    def guard() -> None:
        if _len(listed) != 1 or listed[0] is not guard:
            _exit(1)

    _acquire_import_lock()  # held: os.fork takes it again at once, without letting the GIL go
    try:
        whole, was_before, was_in_parent = listed[:], before[:], in_parent[:]
        before[:] = in_parent[:] = []
        listed[:] = [guard]
        try:
            pid = _fork()
        finally:
            listed[:] = whole
            before[:] = was_before
            in_parent[:] = was_in_parent
    finally:
        _release_import_lock()  # in the child too: its after-fork work left it held once
    if pid == 0:
        holder.deferred = whole
    return pid


def run_deferred(holder: type[Holder]) -> None:
    """In a call, as it begins: the after_in_child hooks `after_bare_fork` kept back, in the order
    os.fork runs them (one that raises is reported on the call's stderr, as CPython does); but random's
    reseed, the interpreter's or one a session's own import of random registered: the random stream
    stays the state's (skipped, not undone: a reseed and a put-back of its state cost a call 25 us)."""
    deferred, holder.deferred = holder.deferred, []
    if not deferred:
        return
    random = sys.modules.get("random")
    generator = getattr(random, "_inst", None) if random is not None else None
    for hook in deferred:
        if generator is not None and getattr(hook, "__self__", None) is generator:
            continue
        try:
            hook()  # type: ignore[operator]
        except BaseException:  # as CPython does (found by a review: sys.exit as a hook failed every call)
            import traceback

            sys.stderr.write(f"Exception ignored in: {hook!r}\n")
            traceback.print_exc()


def audit(holder: type[Holder]) -> object:
    """The audit hook of a session's processes, added before any code of its own: an audit hook can
    never be taken out again, and would run in the keeper at each of its forks, so a session's calls
    may not add one (sys.addaudithook returns, and the hook is not added); and a mapping made through
    Python's mmap module is noted, for `share_nothing` to look for shared memory only then."""

    def hook(event: str, _: tuple[object, ...]) -> None:
        if event == "mmap.__new__":
            holder.mapped = True
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
