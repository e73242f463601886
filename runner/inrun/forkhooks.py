"""The interpreter's at-fork hooks, for a session's processes: none runs as a keeper forks a call, or as
a call with threads forks its candidate; the after_in_child hooks are kept back, for the call to run as
its code is about to (`run_deferred`, from `sealing.unseal`). Standard library only.

A state's hooks (os.register_at_fork), and the interpreter's own (threading's and logging's call
methods of what the state made), would otherwise run the session's code in a keeper, a candidate or a
call forked ahead before its code comes (found by reviews; docs/sessions.md).
"""

from __future__ import annotations

import errno
import gc
import os
import sys
from _imp import acquire_lock as _acquire_import_lock
from _imp import release_lock as _release_import_lock

# Bound as this module loads, before any code of a session's (`sealing`'s note).
_len, _fork, _exit = len, os.fork, os._exit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from runner.inrun import libc
    from runner.inrun.sealing import Holder
else:  # from this file's directory (`bootstrap.load_siblings`): never imported by the server
    import libc


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
