"""The standard library a sealed process calls (a session's keeper, a candidate to be one, a call forked
ahead before its code comes), recorded before any code of the session's ran, put back as a process is
sealed and the state's put back in each call (`Library`, for `sealing.seal` and `sealing.unseal`).
Standard library only.

Found by a review and two second looks: one line of a state's (``os.wait4 = f``, ``builtins.len = f``,
``socket.socket.recvmsg = f``, ``ModuleSpec.__getattr__ = f``, ``sys.modules = Subclass(sys.modules)``,
a colliding key, a module's class) ran its code in its keeper.
"""

from __future__ import annotations

import gc
import sys

# Identity alone, in C: a key's type may have a metaclass whose __hash__ or __eq__ is the state's (a review).
from _operator import is_not as _is_not  # type: ignore[import-not-found,unused-ignore]
from itertools import repeat as _repeat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Bound as this module loads, before any code of a session's: what `Library.put_own` calls before it has
# put the interpreter's own library back.
_dict, _len, _list, _map, _str, _type = dict, len, list, map, str, type
_vars, _zip = vars, zip
_set_type_attribute, _del_type_attribute = type.__setattr__, type.__delattr__
# Identity alone, in C: a key's type may have a metaclass whose __hash__ or __eq__ is the state's (a review).

_any = any
# An object's class set by object's own descriptor: a class the state gave a module may define a
# __class__ (or a __setattr__) of its own, which setattr would run.
_set_class = object.__dict__["__class__"].__set__

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
    "_thread",
)
LIBRARY_CLASSES = (
    ("socket", "socket"),
    ("ctypes", "CDLL"),  # the C library's handles (`libc`), whose attributes are its functions
    ("ctypes", "PyDLL"),
    ("_frozen_importlib", "ModuleSpec"),
    # The compiler's tree of "x", which a call forked ahead makes and compiles while sealed (its warm-up):
    # the classes of its nodes, which the state may give an attribute or an __init__ of its own.
    *(("_ast", name) for name in ("AST", "mod", "Module", "Expression", "stmt", "Expr", "expr", "Name")),
    *(("_ast", name) for name in ("expr_context", "Load")),
)
# A sealed process asks for these modules by name (`Library.module`), not with an import statement; and
# while it is sealed, each of them has None for its ``__spec__``: every import of a loaded module, also one
# made in C (``os.wait4`` imports ``resource`` at each call), asks the module's spec whether it is still
# loading, and the state may have given the spec, or its class, a __getattr__ of its own (found by a
# second look, then a review). None has no such attribute, and nothing can give it one (a stand-in of
# ours could be changed by a thread of a call being sealed: found by a second look at the fix).
_MISSING = object()
# Read and set by type's own descriptor: a class's __bases__ (socket.socket's, say), which the state may
# have changed to put a class of its own in its MRO (a review).
_get_bases = type.__dict__["__bases__"].__get__


class Library:
    """The standard library a sealed process calls, as it was before any code of the session's ran
    (recorded in the session's first keeper): `put_own` puts it back as a process is sealed, and returns
    the state's, which `put_back` restores in a call as it begins. Put back whole: the dictionaries of
    those modules and of `sys` (its hooks, ``sys.modules`` itself: a dict subclass the state put there
    would run its methods), names the state added taken out too (a module's ``__getattr__``, a key whose
    hash is a name's and whose ``__eq__`` is the state's); the class of each of those modules (a module
    subclass's ``__getattribute__``); ``sys.modules``' entries of those modules, and no key there but
    a plain string; the attributes of those classes; and while sealed, each module's ``__spec__`` is
    None.

    A dictionary is looked at by identity alone (`_plain`) and copied, or where the state planted a key
    that is no plain string, swapped with three C calls that compare no key and free nothing: no code
    of the state's runs as it is. What it cannot put back so, it refuses (`unchanged`: the state is not
    kept). What it does not undo: objects the state reaches outside these modules, and code that
    rewrites the interpreter (a function's ``__code__``, memory through ctypes, the runner's own modules
    reached through gc): docs/sessions.md says what."""

    __slots__ = ("bases", "class_dicts", "classes", "imported", "kinds", "modules", "sizes", "system")

    def __init__(self) -> None:
        for name in LIBRARY_MODULES:
            __import__(name)
        modules = [sys.modules[name] for name in LIBRARY_MODULES]
        self.modules = tuple((vars(module), {**vars(module), "__spec__": None}) for module in modules)
        self.imported: dict[str, object] = {name: sys.modules[name] for name in LIBRARY_MODULES}
        self.system: dict[str, Any] = dict(vars(sys))
        self.kinds = tuple((module, type(module)) for module in (*modules, sys))
        classes = [getattr(sys.modules[module], name) for module, name in LIBRARY_CLASSES]
        self.classes = tuple((cls, dict(vars(cls))) for cls in classes)
        # Each class's own dictionary, which its mappingproxy shows (gc can reach it: a review planted a
        # key there), and its bases.
        self.class_dicts = tuple(
            next(found for found in gc.get_referents(vars(cls)) if type(found) is dict) for cls in classes
        )
        self.bases = tuple(cls.__bases__ for cls in classes)
        self.sizes = _plain_sizes()  # once a session, not as every run loads this (some 0.3 ms)

    def unchanged(self) -> bool:
        """Whether the state left alone what `put_own` could not put back without running its code: the
        bases of those classes (a change of them goes down to their subclasses, whose metaclass may be
        the state's) and the keys of their dictionaries (a key that is no plain string, whose
        ``__eq__`` a class's lookups would run). Where it did not, the state is not kept (`seal`)."""
        for (cls, _), bases, own in _zip(self.classes, self.bases, self.class_dicts, strict=True):
            if _get_bases(cls) is not bases or not _plain(own, self.sizes):
                return False
        return True

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
        if _plain(modules_dict, self.sizes):
            imported: Any = _taken(modules_dict, self.imported)
        else:  # a key the state planted: out, while sealed
            imported = _list(modules_dict.items())
            modules_dict.clear()
            modules_dict.update([item for item in imported if _type(item[0]) is _str])
            modules_dict.update(self.imported)
        modules = [_put_own_names(current, own, self.sizes) for current, own in self.modules]
        # (A class's own class is not the state's to change: `type`, whose instances' cannot be.)
        classes = [_dict(_vars(cls)) for cls, _ in self.classes]
        for (cls, own), real in _zip(self.classes, self.class_dicts, strict=True):
            if _plain(real, self.sizes):  # else a key planted since `unchanged` looked, which `seal_again` refuses
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


def _plain(current: dict[Any, Any], sizes: frozenset[int]) -> bool:
    """Whether every key of `current` is a plain string (C alone looks: no key's own code runs), which
    is all a module's dictionary holds unless the state planted another kind of key there: one whose
    hash is a name's and whose ``__eq__`` runs as that name is looked up (found by a second look).

    Told by the dictionary's size where it can be (`sizes`: `_plain_sizes`): a look at each key writes its
    reference count, and in a call just forked that copies the page each key lives on (2-3 ms a call
    with packages loaded, for these dictionaries and sys.modules); else by each key's type."""
    if _getsizeof(current) in sizes:
        return True
    return not _any(_map(_is_not, _map(_type, current), _repeat(_str)))


def _plain_sizes() -> frozenset[int]:
    """The sizes `sys.getsizeof` gives a dictionary whose keys are all plain strings, table by table:
    CPython 3.11 and later keep such a dictionary's entries without their hashes (16 bytes each, against
    24 where any key is of another type, which the dictionary keeps until it is cleared). Checked
    against dictionaries made here of each kind; none where the interpreter lays them out otherwise
    (then every key is looked at)."""
    empty: dict[str, int] = {}
    base = _getsizeof(empty)
    sizes = set()
    for log2 in range(3, 31):
        slots, usable = 1 << log2, (2 << log2) // 3
        index_bytes = slots * (1 if log2 < 8 else 2 if log2 < 16 else 4)
        sizes.add(base + 32 + index_bytes + 16 * usable)

    class Other(str):
        __slots__ = ()

    for count in (1, 6, 11, 100):
        plain = {f"k{n}": n for n in range(count)}
        other = {Other(f"k{n}"): n for n in range(count)}
        mixed: dict[object, int] = {key: value for key, value in plain.items()}
        mixed[1] = 1
        if _getsizeof(plain) not in sizes or _getsizeof(other) in sizes or _getsizeof(mixed) in sizes:
            return frozenset()
    return frozenset(sizes)


_getsizeof = sys.getsizeof


def _swapped(current: dict[str, Any], own: dict[str, Any]) -> list[tuple[Any, Any]]:
    """`current` made `own` (its keys all plain strings); what it held, as a list of its items. Three C
    calls: no key compared (a state's key with an ``__eq__`` of its own), nothing freed (a finaliser)."""
    theirs = _list(current.items())
    current.clear()
    current.update(own)
    return theirs


def _put_own_names(
    current: dict[str, Any], own: dict[str, Any], sizes: frozenset[int]
) -> dict[str, Any] | list[tuple[Any, Any]]:
    """`current` (a module's dictionary) made `own` again: the names the state replaced or deleted put
    back, and any it added taken out (a module ``__getattr__``; some 30 us in all where there are
    none). What it held, for `_put_back_names`: a copy, or where the state planted a key that is no plain
    string, a list of its items (a copy would compare that key)."""
    if not _plain(current, sizes):
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
