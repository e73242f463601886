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

import os
import signal
import stat
import sys

# Bound as this module loads, before any code of a session's: a call that replaces signal.valid_signals
# or signal.pthread_sigmask (one line) does not reach what a keeper calls. (_signal's own returns
# numbers, not 64 enum members, which cost 50 us a call.)
from _signal import SIG_BLOCK, SIG_SETMASK  # type: ignore[import-not-found]
from _signal import pthread_sigmask as _sigmask

# Bound as this module loads too: what `seal` calls before it has put the interpreter's own library back
# (`Library`).
_dict, _vars, _range, _zip, _set_type_attribute, _del_type_attribute = (
    dict,
    vars,
    range,
    zip,
    type.__setattr__,
    type.__delattr__,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from runner.inrun import libc
else:  # from this file's directory (`bootstrap.load_siblings`): never imported by the server
    import libc


# Every signal there is (valid_signals() makes 64 enum members each call: 56 us).
ALL_SIGNALS = tuple(signal.valid_signals())


# The modules whose functions a sealed process calls (a keeper, a candidate, a call forked ahead before
# its code comes), itself or through what it calls, and the classes whose methods it calls: while sealed,
# as the interpreter had them before any code of the session's ran (`Library`). Found by a review: one
# line (`os.wait4 = f`, `builtins.len = f`, `socket.socket.recvmsg = f`) ran a state's code in its keeper.
LIBRARY_MODULES = (
    "builtins",
    "os",
    "posix",
    "posixpath",
    "stat",
    "_stat",
    "signal",
    "_signal",
    "time",
    "resource",
    "socket",
    "_socket",
    "array",
    "fcntl",
    "gc",
    "errno",
    "json",
    "json.encoder",
    "_json",
    "ctypes",
    "_ctypes",
    "_imp",
)
LIBRARY_CLASSES = (("socket", "socket"),)
_MISSING = object()


class Library:
    """The standard library a sealed process calls, as it was before any code of the session's ran
    (recorded in the session's first keeper): `put_own` puts back, as a process is sealed, what the
    state replaced or deleted of the names recorded in those modules, of `sys`'s callables (its hooks:
    ``sys.unraisablehook`` would run in a keeper as a finaliser fails), of their ``sys.modules`` entries
    and of those classes, and returns the state's, which `put_back` restores in a call as it begins.
    Some 40 us each way.

    What it does not undo: names the state added (a module's ``__getattr__``), objects the state
    reaches outside these modules, a key whose ``__eq__`` is the state's (an update compares keys), and
    code that rewrites the interpreter (a function's ``__code__``, memory through ctypes, the runner's
    own modules reached through gc): docs/sessions.md lists what a second look ran so."""

    __slots__ = ("classes", "imported", "modules", "system")

    def __init__(self) -> None:
        for name in LIBRARY_MODULES:
            __import__(name)
        modules = [sys.modules[name] for name in LIBRARY_MODULES]
        self.modules = tuple((vars(module), dict(vars(module))) for module in modules)
        self.imported: dict[str, object] = {name: sys.modules[name] for name in LIBRARY_MODULES}
        self.system = {name: value for name, value in vars(sys).items() if callable(value)}
        classes = [getattr(sys.modules[module], name) for module, name in LIBRARY_CLASSES]
        self.classes = tuple((cls, dict(vars(cls))) for cls in classes)

    def put_own(self) -> tuple[object, ...]:
        """The interpreter's own library back; the state's, for `put_back`. Only dict methods and names
        bound at load run here: the state may have replaced any other. A dict's update is one call (what
        it replaces stays referenced, no finaliser runs), so another thread of the call's never finds a
        name missing."""
        modules = [_dict(current) for current, _ in self.modules]  # no tuple(): the state's, until below
        for current, own in self.modules:
            current.update(own)
        imported = _taken(sys.modules, self.imported)  # type: ignore[arg-type]
        system = _taken(_vars(sys), self.system)
        classes = [_dict(_vars(cls)) for cls, _ in self.classes]
        for cls, own in self.classes:
            _put_class(cls, own)
        return modules, imported, system, classes

    def put_back(self, state: tuple[object, ...]) -> None:
        """In a call as it begins (one thread): the library as the state left it (`put_own`'s)."""
        modules, imported, system, classes = state
        _give_back(sys.modules, imported)  # type: ignore[arg-type]
        _give_back(_vars(sys), system)  # type: ignore[arg-type]
        for (cls, _), theirs in _zip(self.classes, classes, strict=True):  # type: ignore[call-overload]
            _put_class(cls, theirs)
        for (current, _), theirs in _zip(self.modules, modules, strict=True):  # type: ignore[call-overload]
            current.clear()
            current.update(theirs)


def _taken(current: dict[str, object], own: dict[str, object]) -> dict[str, object]:
    """`own`'s names put in `current`; what `current` held under them (`_MISSING`: nothing)."""
    theirs = {name: current.get(name, _MISSING) for name in own}
    current.update(own)
    return theirs


def _give_back(current: dict[str, object], theirs: dict[str, object]) -> None:
    for name, value in theirs.items():
        if value is _MISSING:
            current.pop(name, None)
        else:
            current[name] = value


def _put_class(cls: type, wanted: dict[str, object]) -> None:
    """`cls`'s attributes made `wanted`'s, by type's own setattr (a class's may be replaced)."""
    current = _dict(_vars(cls))
    for name in current:
        if name not in wanted:
            try:  # noqa: SIM105  (contextlib is not imported in runs)
                _del_type_attribute(cls, name)
            except (AttributeError, TypeError):
                pass
    for name, value in wanted.items():
        if current.get(name, _MISSING) is not value:
            try:  # noqa: SIM105
                _set_type_attribute(cls, name, value)
            except (AttributeError, TypeError):
                pass


class Holder:
    """What a session's processes carry from keeper to call (`keeper.SessionCarry`, copied by each fork)."""

    sealed: Sealed | None
    # The interpreter's list of after_in_child hooks (os.register_at_fork keeps them there) and how
    # many of it are the interpreter's own, from before the session (`find_child_hooks`).
    child_hooks: tuple[list[object], int] | None
    deferred: list[object]  # the session's own after_in_child hooks, kept back for the call (`run_deferred`)
    mapped: bool  # the state made a mapping through Python's mmap module (`audit`)
    home: str  # the session's directory
    library: Library | None  # recorded in the session's first keeper


class Sealed:
    """What a call left that would run its code in a keeper, taken out of the process while it is one
    and put back in each call forked from it (`seal`, `unseal`)."""

    __slots__ = ("enabled", "gc_callbacks", "library", "mask", "monitoring", "profile", "trace")

    def __init__(self, mask: set[int], library: tuple[object, ...] | None) -> None:
        import gc

        self.mask = mask
        self.library = library  # the state's, while the interpreter's own is in place (`Library`)
        self.profile = sys.getprofile()
        self.trace = sys.gettrace()
        self.gc_callbacks = list(gc.callbacks)
        self.enabled = gc.isenabled()
        self.monitoring: dict[int, int] = {}
        monitoring = _vars(sys).get("monitoring")  # Python 3.12 and later (not getattr: a state's sys.__getattr__)
        if monitoring is not None:
            for tool in range(6):
                if monitoring.get_tool(tool) is not None:
                    self.monitoring[tool] = monitoring.get_events(tool)


def seal(holder: type[Holder]) -> bool:
    """Make this process one that runs no code of the session's (a keeper, or a candidate to be one),
    whatever the state it holds set up: every signal blocked (one sent to a keeper stays pending, and
    dies with it: no Python handler of the state's runs), no profile, trace or sys.monitoring function,
    no gc callbacks and no automatic collection (which would run finalisers of the state's garbage).
    What was there is kept in `holder.sealed`, for `unseal` in each call. False if the call's own
    handlers, run as signals are blocked, would not let that be done: then it is not kept."""
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
    library = holder.library.put_own() if holder.library is not None else None
    import gc

    sealed = Sealed(mask, library)
    sys.setprofile(None)
    sys.settrace(None)
    gc.callbacks.clear()
    gc.disable()
    monitoring = _vars(sys).get("monitoring")
    for tool in sealed.monitoring:
        monitoring.set_events(tool, 0)  # type: ignore[union-attr]
    holder.sealed = sealed
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
    import gc

    gc.callbacks[:] = sealed.gc_callbacks
    if sealed.enabled:
        gc.enable()
    monitoring = _vars(sys).get("monitoring")
    for tool, events in sealed.monitoring.items():
        monitoring.set_events(tool, events)  # type: ignore[union-attr]
    sys.setprofile(sealed.profile)
    sys.settrace(sealed.trace)
    _sigmask(SIG_SETMASK, sealed.mask)


def _interpreters_own() -> None:
    """Registered as an after_in_child hook before any code of a session's runs: what comes after it in
    the interpreter's list is the session's (`find_child_hooks`)."""


def find_child_hooks() -> tuple[list[object], int] | None:
    """In a process no code of a session's has run in (its first keeper): the list where the interpreter
    keeps its after_in_child hooks, and how many of it are its own (threading's, random's, the preloaded
    modules'), found through a hook registered now; None where it cannot be found. Some milliseconds,
    once per session (gc.get_referrers over the heap)."""
    import gc

    os.register_at_fork(after_in_child=_interpreters_own)
    found = [r for r in gc.get_referrers(_interpreters_own) if type(r) is list and r and r[-1] is _interpreters_own]
    return (found[0], len(found[0])) if len(found) == 1 else None


def after_bare_fork(holder: type[Holder]) -> None:
    """In the child of `libc.fork_bare`, before anything else: what os.fork does in its child (CPython's
    after-fork work: the interpreter's locks and thread states made anew, the import lock let go), with
    the interpreter's own after_in_child hooks; the session's are kept back in `holder.deferred`, for
    a call to run as it begins (`run_deferred`): none of them runs in a candidate or a keeper, nor in a
    call forked ahead before its code comes. The random stream stays the state's (random's hook reseeds)."""
    random = sys.modules.get("random")
    state = random.getstate() if random is not None else None
    hooks = holder.child_hooks
    if hooks is None:  # the list was not found: all of them now, as os.fork would
        holder.deferred = []
        libc.after_fork_child()
    else:
        listed, own = hooks
        holder.deferred = listed[own:]
        del listed[own:]
        try:
            libc.after_fork_child()
        finally:
            listed.extend(holder.deferred)
    if random is not None and state is not None:
        random.setstate(state)


def run_deferred(holder: type[Holder]) -> None:
    """In a call, as it begins: the session's after_in_child hooks `after_bare_fork` kept back, in the
    order os.fork runs them (one that raises is reported on the call's stderr, as CPython does)."""
    deferred, holder.deferred = holder.deferred, []
    if not deferred:
        return
    random = sys.modules.get("random")
    state = random.getstate() if random is not None else None
    for hook in deferred:
        try:
            hook()  # type: ignore[operator]
        except Exception:
            import traceback

            sys.stderr.write(f"Exception ignored in: {hook!r}\n")
            traceback.print_exc()
    if random is not None and state is not None:
        random.setstate(state)  # a session's own import of random registered a reseed


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


def open_files(skip: int) -> dict[int, tuple[int, int, bytes]]:
    """Where each open file of this process (but `skip`) is read or written (-1: not a file one seeks
    in), its status flags (O_APPEND, O_NONBLOCK) and, for a regular file, the flock held on it
    (`_flock`): a call forked from the keeper shares its open files, all of that included, so a call
    that is rolled back would leave them as it made them (found by a review: an O_APPEND and a flock a
    rolled-back call set stayed; by a second look, an O_NONBLOCK on a pipe, and a lock of the state's
    it let go). Taken as the keeper begins, put back after a roll-back (`put_back_files`)."""
    import fcntl

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


def put_back_files(saved: dict[int, tuple[int, int, bytes]]) -> None:
    """Each open file as `open_files` found it: its offset, its flags, its flock (an OFD lock,
    F_OFD_SETLK, is not looked at: docs/sessions.md)."""
    import fcntl

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
