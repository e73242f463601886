"""What a session's state set up that would run its code in a keeper, taken out while a process is a
keeper (or a candidate to be one) and put back in each call forked from it. Standard library only;
`keeper` has the keeper.

A keeper is made of a call's state: whatever the call's code left, a Python signal handler, a profile
or trace function, a gc callback, an audit hook, a finaliser of its garbage, would run in the keeper
when its moment came (a signal sent to it from a later call, the keeper's own loop, a collection).
The keeper must run no code of the session's (a call rolled back could otherwise change the kept
state through it, or start processes that outlive every call). So `seal` takes all of it out, and
`unseal` puts it back as each call's code is about to run; the keeper forks bare (`libc.fork_bare`),
so that no at-fork hook runs in it either. And what the keeper would share with its calls (shared
memory) is made its own, or the state is not kept (`share_nothing`).
"""

from __future__ import annotations

import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from runner.inrun import libc
else:  # from this file's directory (`bootstrap.load_siblings`): never imported by the server
    import libc


class Holder:
    """Where the sealed state waits between processes (`keeper.Session`, copied by each fork)."""

    sealed: Sealed | None


class Sealed:
    """What a call left that would run its code in a keeper, taken out of the process while it is one
    and put back in each call forked from it (`seal`, `unseal`)."""

    __slots__ = ("enabled", "gc_callbacks", "mask", "monitoring", "profile", "trace")

    def __init__(self, mask: set[int | signal.Signals]) -> None:
        import gc

        self.mask = mask
        self.profile = sys.getprofile()
        self.trace = sys.gettrace()
        self.gc_callbacks = list(gc.callbacks)
        self.enabled = gc.isenabled()
        self.monitoring: dict[int, int] = {}
        monitoring = getattr(sys, "monitoring", None)  # Python 3.12 and later
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
    import gc

    for _ in range(3):
        try:
            # Reading the mask runs the handlers of signals already caught: in the call, in its time.
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
            break
        except BaseException:  # noqa: S112  (the call's own handler raised; it has run)
            continue
    else:
        return False
    try:  # noqa: SIM105  (contextlib is not imported in runs)
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    except BaseException:  # noqa: S110  (a handler run as the mask took hold: blocked all the same)
        pass
    sealed = Sealed(mask)
    sys.setprofile(None)
    sys.settrace(None)
    gc.callbacks.clear()
    gc.disable()
    monitoring = getattr(sys, "monitoring", None)
    for tool in sealed.monitoring:
        monitoring.set_events(tool, 0)  # type: ignore[union-attr]
    holder.sealed = sealed
    return True


def share_nothing() -> str:
    """Make this process's state its own before it is kept: a mapping shared with other processes
    (``mmap.mmap(-1, n)``'s MAP_SHARED anonymous memory) would be shared by the keeper with every call
    forked from it, and a call rolled back would leave its writes there. Anonymous shared memory is
    made private, its bytes kept; any other writable shared mapping (a file's, POSIX or System V
    shared memory) cannot be, and the state is not kept: why, or ''."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            lines = maps.read().splitlines()
    except OSError as exc:
        return f"its memory map could not be read: {exc}"
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) < 5 or fields[1][1:2] != b"w" or fields[1][3:4] != b"s":
            continue
        start, end = (int(part, 16) for part in fields[0].split(b"-"))
        path = fields[5].decode(errors="replace") if len(fields) > 5 else ""
        if path == "/dev/zero (deleted)" and fields[1][0:1] == b"r":
            try:
                if libc.make_private(start, end - start):
                    continue
            except MemoryError:
                pass
        return f"it holds writable shared memory ({path or 'anonymous'}), which a roll-back could not undo"
    return ""


def unseal(holder: type[Holder]) -> None:
    """In a call forked from a keeper, as its code is about to run: what the state set that `seal`
    took out, put back (signals last, so that one sent to the call meanwhile is handled in it)."""
    sealed, holder.sealed = holder.sealed, None
    if sealed is None:
        return
    import gc

    gc.callbacks[:] = sealed.gc_callbacks
    if sealed.enabled:
        gc.enable()
    monitoring = getattr(sys, "monitoring", None)
    for tool, events in sealed.monitoring.items():
        monitoring.set_events(tool, events)  # type: ignore[union-attr]
    sys.setprofile(sealed.profile)
    sys.settrace(sealed.trace)
    signal.pthread_sigmask(signal.SIG_SETMASK, sealed.mask)


def refuse_audit_hooks(event: str, _: tuple[object, ...]) -> None:
    """An audit hook cannot be taken out again, and would run in the keeper at each of its forks: a
    session's calls may not add one (sys.addaudithook returns, and the hook is not added)."""
    if event == "sys.addaudithook":
        raise RuntimeError("a session's calls cannot add audit hooks: they would run in its keeper")
