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

import gc
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
_dict, _len, _list, _map, _set, _str, _type = dict, len, list, map, set, str, type
_vars, _range, _zip = vars, range, zip
_set_type_attribute, _del_type_attribute = type.__setattr__, type.__delattr__
_PLAIN = frozenset((str,))  # the type of every key of a dictionary the state planted nothing odd in
# An object's class set by object's own descriptor: a class the state gave a module may define a
# __class__ (or a __setattr__) of its own, which setattr would run.
_set_class = object.__dict__["__class__"].__set__
# Collections, and the profile and trace functions, off before the library is put back: they would run
# the state's code (a finaliser of its garbage, a profile function at each call) as it is swapped.
_gc_isenabled, _gc_disable = gc.isenabled, gc.disable
_getprofile, _setprofile, _gettrace, _settrace = sys.getprofile, sys.setprofile, sys.gettrace, sys.settrace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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
# A sealed process asks for these modules by name (`Library.module`), never with an import statement:
# one asks the module's spec whether it is still loading, and the state may have given the spec, or its
# class, a __getattr__ of its own (found by a second look).
_MISSING = object()


class Library:
    """The standard library a sealed process calls, as it was before any code of the session's ran
    (recorded in the session's first keeper): `put_own` puts it back as a process is sealed, and returns
    the state's, which `put_back` restores in a call as it begins. Put back whole: the dictionaries of
    those modules and of `sys` (its hooks, ``sys.modules`` itself: a dict subclass the state put there
    would run its methods), names the state added taken out too (a module's ``__getattr__``, a key whose
    hash is a name's and whose ``__eq__`` is the state's); the class of each of those modules (a module
    subclass's ``__getattribute__``); ``sys.modules``' entries of those modules, and no key there but
    a plain string; the attributes of those classes. Some 50 us each way.

    A dictionary is swapped with three C calls that compare no key and free nothing (what was in it
    stays referenced, by the list of the state's): no code of the state's runs as it is. What it does
    not undo: objects the state reaches outside these modules, and code that rewrites the interpreter
    (a function's ``__code__``, memory through ctypes, the runner's own modules reached through gc):
    docs/sessions.md says what."""

    __slots__ = ("classes", "imported", "kinds", "modules", "system")

    def __init__(self) -> None:
        for name in LIBRARY_MODULES:
            __import__(name)
        modules = [sys.modules[name] for name in LIBRARY_MODULES]
        self.modules = tuple((vars(module), dict(vars(module))) for module in modules)
        self.imported: dict[str, object] = {name: sys.modules[name] for name in LIBRARY_MODULES}
        self.system: dict[str, Any] = dict(vars(sys))
        self.kinds = tuple((module, type(module)) for module in (*modules, sys))
        classes = [getattr(sys.modules[module], name) for module, name in LIBRARY_CLASSES]
        self.classes = tuple((cls, dict(vars(cls))) for cls in classes)

    def module(self, name: str) -> object:
        """The module `name` of LIBRARY_MODULES, as loaded before any code of the session's ran."""
        return self.imported[name]

    def put_own(self) -> tuple[Any, ...]:
        """The interpreter's own library back; the state's, for `put_back`. Only dict methods and names
        bound at load run here: the state may have replaced any other."""
        kinds = [(module, _type(module)) for module, _ in self.kinds]  # no tuple(): the state's
        for module, kind in self.kinds:
            if _type(module) is not kind:
                _set_class(module, kind)
        system = _swapped(_vars(sys), self.system)
        modules_dict: dict[Any, Any] = self.system["modules"]  # the interpreter's own, which its imports use
        if _plain(modules_dict):
            imported: Any = _taken(modules_dict, self.imported)
        else:  # a key the state planted: out, while sealed
            imported = _list(modules_dict.items())
            modules_dict.clear()
            modules_dict.update([item for item in imported if _type(item[0]) is _str])
            modules_dict.update(self.imported)
        modules = [_put_own_names(current, own) for current, own in self.modules]
        # (A class's own class is not the state's to change: `type`, whose instances' cannot be.)
        classes = [_dict(_vars(cls)) for cls, _ in self.classes]
        for cls, own in self.classes:
            _put_class(cls, own)
        return kinds, system, imported, modules, classes

    def put_back(self, state: tuple[Any, ...]) -> None:
        """In a call as it begins (one thread): the library as the state left it (`put_own`'s)."""
        kinds, system, imported, modules, classes = state
        for (cls, _), theirs in _zip(self.classes, classes, strict=True):
            _put_class(cls, theirs)
        for (current, _), theirs in _zip(self.modules, modules, strict=True):
            _put_back_names(current, theirs)
        modules_dict: dict[Any, Any] = self.system["modules"]
        if _type(imported) is _dict:
            _give_back(modules_dict, imported)
        else:
            _put_back_names(modules_dict, imported)
        _put_back_names(_vars(sys), system)
        for module, kind in kinds:
            if _type(module) is not kind:
                _set_class(module, kind)


def _plain(current: dict[Any, Any]) -> bool:
    """Whether every key of `current` is a plain string (C alone looks: no key's own code runs), which
    is all a module's dictionary holds unless the state planted another kind of key there: one whose
    hash is a name's and whose ``__eq__`` runs as that name is looked up (found by a second look)."""
    return _set(_map(_type, current)) <= _PLAIN


def _swapped(current: dict[str, Any], own: dict[str, Any]) -> list[tuple[Any, Any]]:
    """`current` made `own` (its keys all plain strings); what it held, as a list of its items. Three C
    calls: no key compared (a state's key with an ``__eq__`` of its own), nothing freed (a finaliser)."""
    theirs = _list(current.items())
    current.clear()
    current.update(own)
    return theirs


def _put_own_names(current: dict[str, Any], own: dict[str, Any]) -> dict[str, Any] | list[tuple[Any, Any]]:
    """`current` (a module's dictionary) made `own` again: the names the state replaced or deleted put
    back, and any it added taken out (a module ``__getattr__``; some 30 us in all where there are
    none). What it held, for `_put_back_names`: a copy, or where the state planted a key that is no plain
    string, a list of its items (a copy would compare that key)."""
    if not _plain(current):
        return _swapped(current, own)
    theirs = _dict(current)  # its keys are plain strings: only C compares them
    current.update(own)
    if _len(current) != _len(own):  # names the state added (`own`'s are all there now)
        current.clear()
        current.update(own)
    return theirs


def _put_back_names(current: dict[Any, Any], theirs: dict[str, Any] | list[tuple[Any, Any]]) -> None:
    """In a call as it begins: `current` as the state left it (`_put_own_names`, `_swapped`). Keys that
    are no plain string go in last: their ``__eq__`` (the state's, in its call) finds every name there."""
    current.clear()
    if _type(theirs) is _dict:
        current.update(theirs)
        return
    items: list[tuple[Any, Any]] = theirs  # type: ignore[assignment]  # (no isinstance: the state's by now)
    current.update([item for item in items if _type(item[0]) is _str])
    current.update([item for item in items if _type(item[0]) is not _str])


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


def library_module(holder: type[Holder], name: str) -> Any:
    """The module `name` of LIBRARY_MODULES, for a process that may be sealed: as loaded before any code
    of the session's ran (`Library.module`), never through an import statement (LIBRARY_CLASSES' note);
    imported where no library is recorded yet (the session's first keeper, before its first call)."""
    library = holder.library
    return library.module(name) if library is not None else __import__(name)


class Holder:
    """What a session's processes carry from keeper to call (`keeper.SessionCarry`, copied by each fork)."""

    sealed: Sealed | None
    # The interpreter's list of after_in_child hooks (os.register_at_fork keeps them there), how many
    # of it are the interpreter's own, from before the session, and which of those reseed `random`
    # (`find_child_hooks`).
    child_hooks: tuple[list[object], int, tuple[int, ...]] | None
    deferred: list[object]  # the session's own after_in_child hooks, kept back for the call (`run_deferred`)
    mapped: bool  # the state made a mapping through Python's mmap module (`audit`)
    home: str  # the session's directory
    library: Library | None  # recorded in the session's first keeper


class Sealed:
    """What a call left that would run its code in a keeper, taken out of the process while it is one
    and put back in each call forked from it (`seal`, `unseal`)."""

    __slots__ = ("enabled", "gc_callbacks", "library", "mask", "monitoring", "profile", "trace")

    def __init__(self, mask: set[int], library: tuple[object, ...] | None, taken: tuple[bool, Any, Any]) -> None:
        self.mask = mask
        self.library = library  # the state's, while the interpreter's own is in place (`Library`)
        self.enabled, self.profile, self.trace = taken  # as they were before `seal` turned them off
        self.gc_callbacks = list(gc.callbacks)
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
    taken = (_gc_isenabled(), _getprofile(), _gettrace())
    _gc_disable()
    _setprofile(None)
    _settrace(None)
    library = holder.library.put_own() if holder.library is not None else None
    sealed = Sealed(mask, library, taken)
    gc.callbacks.clear()
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


def find_child_hooks() -> tuple[list[object], int, tuple[int, ...]] | None:
    """In a process no code of a session's has run in (its first keeper): the list where the interpreter
    keeps its after_in_child hooks, how many of it are its own (threading's, random's, the preloaded
    modules'), found through a hook registered now, and where random's reseed is among them; None where
    the list cannot be found. Some milliseconds, once per session (gc.get_referrers over the heap)."""
    os.register_at_fork(after_in_child=_interpreters_own)
    found = [r for r in gc.get_referrers(_interpreters_own) if type(r) is list and r and r[-1] is _interpreters_own]
    if len(found) != 1:
        return None
    listed = found[0]
    generator = getattr(sys.modules.get("random"), "_inst", _MISSING)
    reseeds = tuple(n for n, hook in enumerate(listed) if getattr(hook, "__self__", None) is generator)
    return listed, len(listed), reseeds


def after_bare_fork(holder: type[Holder]) -> None:
    """In the child of `libc.fork_bare`, before anything else: what os.fork does in its child (CPython's
    after-fork work: the interpreter's locks and thread states made anew, the import lock let go), with
    the interpreter's own after_in_child hooks; the session's are kept back in `holder.deferred`, for
    a call to run as it begins (`run_deferred`): none of them runs in a candidate or a keeper, nor in a
    call forked ahead before its code comes. Nor does random's own reseed: the random stream stays the
    state's, without a call of `random` here, whose functions and classes the state may have replaced
    (found by a second look: ``random.getstate`` ran in a keeper)."""
    hooks = holder.child_hooks
    if hooks is None:  # the list was not found: all of them now, as os.fork would
        holder.deferred = []
        libc.after_fork_child()
        return
    listed, own, reseeds = hooks
    whole = listed[:]
    holder.deferred = listed[own:]
    listed[:] = [hook for n, hook in enumerate(whole[:own]) if n not in reseeds]
    try:
        libc.after_fork_child()
    finally:
        listed[:] = whole


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
