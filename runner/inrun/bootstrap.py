"""The first code every run interpreter executes: stdlib only, applies the limits before any user code.

Started as ``python -I -S -X utf8 bootstrap.py WORKDIR CPU AS NPROC FSIZE`` with the run's pipes on
fds 0-2 and the job socket on fd 3 (the zygote forks runs and calls the same functions). It closes
every other inherited fd, enters WORKDIR, applies the rlimits, says it is ready on stdout (before any
user output can exist), reads its job (`wire`) and runs the code as ``__main__``. It runs under
``-I -S`` with nothing but the standard library: what else it needs it loads from its own directory
(`load_siblings`, the one way any in-run module is loaded in a run), and none of that stays importable.
"""

from __future__ import annotations

import atexit
import linecache
import os
import resource
import select
import signal
import sys
import traceback
import types

# Every import here is paid by every run interpreter before it is ready: typing, contextlib and the
# zygote's socket modules stay out of it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

    from runner.inrun import seccomp, wire
    from runner.inrun.harvest import Report

    # What the run returns and how its end is told: (gather the report, or None; send it with the end;
    # in a session, offer the state the call leaves as the next, if its code ended, or None; what
    # that returns is done once the end is told).
    Ending = tuple[
        Callable[[], Report] | None,
        Callable[[Report | None, int], None],
        Callable[[], Callable[[], None] | None] | None,
    ]

FILENAME = "<run_python>"
MAX_FD = 1 << 20
# What a run needs besides this file (`load_siblings`): `run` takes RUN_SIBLINGS, in this order; a
# spawned interpreter also needs the other two to become a run (`prepare_process`). A session's anchor
# and calls take KEEPER too (with what it loads: the sealing, the library, the anchor, the sweeps, the
# snapshot, 1.8 ms of a run's start): a spawned one-shot run never loads it (`Siblings.keeper`).
RUN_SIBLINGS = ("wire", "workdir", "figures", "harvest", "images", "tables", "toolchannel")
SIBLINGS = ("libc", "seccomp", *RUN_SIBLINGS)
KEEPER = "keeper"
# This module, as its siblings import it (`load_siblings`): not sys.modules[__name__] once a run began,
# where a spawned interpreter's ``__main__`` is the run's.
_BOOTSTRAP = sys.modules[__name__]
# A run's open files, per process. Each can hold kernel memory that RLIMIT_AS does not count (a
# socket's queue, a pipe's buffer); with the socket buffers a run may not raise (seccomp.py), this bounds
# a process's socket queues to about 256 x 2 x 208 KiB (docs/security.md). Python's own needs are a few
# dozen; 256 is macOS's default.
OPEN_FILES = 256


def readable(fds: list[int], timeout: float | None) -> list[int]:
    """Which of `fds` can be read (or are at their end) within `timeout` seconds (None: until one can).

    poll, not select: select's fd sets take no fd above 1023, and a zygote that keeps a namespace,
    its network namespace and its cgroup for each of hundreds of runs (RUNNER_MAX_CONCURRENT up to 256)
    holds fds well past that."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(None if timeout is None else timeout * 1000)]


def wanted_limits(cpu: int, address_space: int, nproc: int, fsize: int) -> list[tuple[str, int, int]]:
    """Every rlimit of a run as (name, soft, hard). CPU hard sits one second above soft: SIGXCPU at
    soft, SIGKILL at hard if the code catches SIGXCPU."""
    return [
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_CPU", cpu, cpu + 1),
        ("RLIMIT_AS", address_space, address_space),
        ("RLIMIT_NPROC", nproc, nproc),
        ("RLIMIT_FSIZE", fsize, fsize),
        ("RLIMIT_NOFILE", OPEN_FILES, OPEN_FILES),
    ]


def lowered(soft: int, hard: int, current_hard: int) -> tuple[int, int]:
    """What may be set under a hard limit already there: an unprivileged process can only lower it."""
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    return soft, hard


def apply_limits(cpu: int, address_space: int, nproc: int, fsize: int) -> list[str]:
    """Apply every rlimit it can; return the names of those the OS refused (e.g. RLIMIT_AS on macOS).
    RLIMIT_CPU's hard limit is left where it is until a job comes (`hold_cpu`): a process that becomes
    a session's anchor, which runs none of the session's code, takes a limit of its own instead."""
    refused = []
    for name, soft, hard in wanted_limits(cpu, address_space, nproc, fsize):
        which = getattr(resource, name, None)
        if which is None:
            refused.append(name)
            continue
        if name == "RLIMIT_CPU":
            hard = resource.RLIM_INFINITY  # `lowered` keeps the one there
        try:
            resource.setrlimit(which, lowered(soft, hard, resource.getrlimit(which)[1]))
        except (ValueError, OSError):
            refused.append(name)
    return refused


def hold_cpu() -> None:
    """Lower RLIMIT_CPU's hard limit to one second above its soft one (`wanted_limits`), as this
    process is about to run a job: `apply_limits` left it where it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if soft != resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_CPU, lowered(soft, soft + 1, hard))


def load_siblings(*names: str, loaded: tuple[types.ModuleType, ...] = ()) -> tuple[types.ModuleType, ...]:
    """Modules of this directory (stdlib only), imported by name: their imports of each other and of
    this module resolve (`bootstrap` is this one, and each of `loaded`, siblings loaded before, is the
    one they import, not a second copy), and nothing this call added stays on sys.path, in its importer
    cache or in sys.modules, so the code of a run can import nothing more than the standard library.
    The caller keeps what it needs; the zygote loads once what every fork inherits."""
    here = os.path.dirname(os.path.abspath(__file__))
    before = set(sys.modules)
    sys.modules.setdefault("bootstrap", _BOOTSTRAP)
    for module in loaded:
        sys.modules.setdefault(module.__name__, module)
    sys.path.insert(0, here)
    try:
        return tuple(__import__(name) for name in names)
    finally:
        sys.path.remove(here)
        sys.path_importer_cache.pop(here, None)
        for name in set(sys.modules) - before:
            if os.path.dirname(getattr(sys.modules[name], "__file__", None) or "") == here:
                del sys.modules[name]


class Siblings:
    """What a run takes besides this module: the modules of RUN_SIBLINGS (`run`), and the keeper, for
    a session's anchor and calls: loaded once asked for (with the modules it imports, `loaded` reused),
    or given, loaded before (the zygote's, which every fork inherits)."""

    __slots__ = ("_keeper", "_loaded", "run")

    def __init__(
        self,
        run: tuple[types.ModuleType, ...],
        loaded: tuple[types.ModuleType, ...] = (),
        keeper: types.ModuleType | None = None,
    ) -> None:
        self.run = run
        self._loaded = (*loaded, *run)
        self._keeper = keeper

    @property
    def keeper(self) -> Any:
        if self._keeper is None:
            self._keeper = load_siblings(KEEPER, loaded=self._loaded)[0]
        return self._keeper


def new_main() -> types.ModuleType:
    """The run's fresh ``__main__`` module, made while the interpreter still waits for its code."""
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    sys.argv = [""]
    return main


def run(
    job: wire.Job | None,
    main: types.ModuleType,
    siblings: Siblings,
    tmpfs: tuple[str, ...] = (),
    spawned: bool = False,
    session: bool = False,
) -> NoReturn:
    """Run the job's code in `main`, with tracebacks that show the user's lines only, then exit.

    None (the job never fully arrived: the call was cancelled) runs nothing. `siblings`: the modules
    named in RUN_SIBLINGS, and the keeper for a session (`Siblings`). How the run counts its peak
    memory (`harvest.ended`): `tmpfs`, its own tmpfs mounts, and whether it is a `spawned`
    interpreter, not a fork. A job that
    says ``keeper`` makes this interpreter a session's anchor (`keeper.anchor`); a `session` call is
    one forked from its keeper: its directory is the session's, not emptied, and if its code ends,
    the state it leaves is offered as the session's next, for the server to keep or not
    (`keeper.offer_state`).
    """
    if job is None:
        os._exit(1)
    wire, workdir, figures, harvest, images, tables, toolchannel = siblings.run
    if job.keeper:
        _become_anchor(main, siblings, tmpfs, spawned)  # a limit of its own (`keeper.anchor`)
    keeper: Any = siblings.keeper if session else None  # loaded for a session only
    hold_cpu()  # before anything of the job's, as a call's before its state's code may run again
    if session:
        keeper.begin_call()  # from here on the state's own code may run again: this is the call
    add_provided(job.paths)
    if job.tools:
        toolchannel.offer_tools()
    try:
        if session:
            before = keeper.files_before(".", _identity("."))
            inputs = {**before, **keeper.write_call_files(wire.parse_inputs(job.inputs))} if job.inputs else before
        else:
            # Never run in a directory that still holds what another run put there.
            workdir.empty_directory(".")
            inputs = workdir.write_inputs(wire.parse_inputs(job.inputs)) if job.inputs else {}
    except (OSError, ValueError) as exc:
        os.write(2, b"the run's working directory could not be prepared: %s\n" % str(exc).encode())
        os._exit(1)
    filename = keeper.filename(keeper.SessionCarry.kept_calls) if session else FILENAME
    text = job.code.decode("utf-8", "replace").removeprefix("\ufeff")  # a BOM, as compile() of bytes allows
    # Seed linecache so tracebacks print the offending source lines of the run's code.
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    budgets = job.budgets
    shown = figures.Figures(budgets.images, budgets.image_bytes, images.MAX_PIXELS, keep_open=session)
    value: list[object] = [None]
    met = [""]  # the limit the code's uncaught exception met (`harvest.limit_met`)
    home = os.getcwd()  # the code may chdir: its files are looked for here, and only here
    home_info = os.stat(home)

    def gather() -> Report:
        report: Report = harvest.gather(
            budgets,
            value[0],
            shown,
            inputs,
            lambda: workdir.walk(home, (home_info.st_dev, home_info.st_ino)),
            lambda path, info, limit: workdir.read_regular(os.path.join(home, path), info, limit),
            images,
            tables,
        )
        return report

    def send(report: Report | None, status: int) -> None:
        harvest.close_output()
        if wire.same_socket(wire.CODE_FD, job):  # not a file the code opened where the socket was
            end = harvest.ended(status, tmpfs, spawned, met[0])
            harvest.send(wire.CODE_FD, (report or harvest.Report(budgets)).encode(end), job.tools)

    def kept() -> Callable[[], None] | None:
        # The last value goes now, in the call: held here, it would be freed as a kept call's frames
        # unwind (`keeper.Kept`), and its finaliser would run in the keeper.
        value[0] = None
        become: Callable[[], None] | None = keeper.offer_state(keeper.CHANNEL_FD)
        return become

    ending: Ending = (gather if budgets.any() else None, send, None)
    try:
        # The text, not the bytes: the tool takes a str, so a coding cookie must not re-decode it.
        if budgets.result_chars:
            code, last = harvest.split_last_expression(text, filename)
        else:
            code, last = compile(text, filename, "exec", dont_inherit=True), None
    except Exception as exc:  # SyntaxError, ValueError (NUL), RecursionError, MemoryError...
        met[0] = harvest.limit_met(exc, FILENAME)
        report(exc.with_traceback(None))
        finish(1, ending, session)
    shown.install()
    try:
        exec(code, main.__dict__)
        if last is not None:
            value[0] = eval(last, main.__dict__)  # noqa: S307  (the run's own code, as exec above)
    except SystemExit as exc:
        status = exit_status(exc)
        met[0] = "exit" if status else ""  # a failure it passes on may be a child's limit (wire.LIMITS_MET)
        finish(status, ending, session)  # in a session: a call that ended itself is not kept
    except BaseException as exc:
        met[0] = harvest.limit_met(exc, FILENAME)
        # Drop this module's frame so the traceback starts at the user's code.
        report(exc.with_traceback(exc.__traceback__.tb_next if exc.__traceback__ else None))
        if isinstance(exc, KeyboardInterrupt):
            # Mirror the interpreter: die by SIGINT so the exit status says so.
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        finish(1, ending, session)
    if session:
        # Nothing of the call's is left to this frame when a kept call's frames unwind in its keeper
        # (`keeper.Kept`): what dropping it would run (a finaliser, a weakref callback on the code)
        # runs here, in the call.
        code = last = None
    finish(0, (ending[0], ending[1], kept if session else None), session)


def _identity(path: str) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


def _become_anchor(main: types.ModuleType, siblings: Siblings, tmpfs: tuple[str, ...], spawned: bool) -> NoReturn:
    """This interpreter holds a session from now on (`keeper.anchor`); its first keeper holds `main`,
    still empty, and forks each call from it."""
    # What a keeper, or a call once it has offered its state (sealed), imports, imported before any code
    # of the session's: every keeper and call of it finds them loaded. Found by a review: a call that put
    # its directory first on sys.path, with a json.py there, had it run in its keeper, where the report
    # of its end imported json.
    import array  # noqa: F401
    import fcntl  # noqa: F401
    import json  # noqa: F401
    import socket  # noqa: F401

    keeper = siblings.keeper
    home = os.getcwd()
    keeper.anchor(
        3, home, lambda channel: serve_session(channel, home, main, siblings, tmpfs, spawned, first=True), tmpfs
    )
    os._exit(1)  # anchor never returns


def serve_session(
    channel: object,
    home: str,
    main: types.ModuleType,
    siblings: Siblings,
    tmpfs: tuple[str, ...],
    spawned: bool,
    *,
    first: bool = False,
) -> NoReturn:
    """A session's keeper (`keeper.serve_as_keeper`), and in each call it forks, the call (`run`). A state
    the server kept comes back here as the next keeper (`keeper.Kept`), its call's frames unwound."""
    wire, keeper = siblings.run[0], siblings.keeper
    keeper.SessionCarry.warm_up = lambda: warm_up(siblings.run, home)
    keeper.SessionCarry.home = home
    ready, fds = None, None
    while True:
        if fds is None:
            fds = keeper.serve_as_keeper(channel, first=first, ahead=ready)
        first = False
        keeper.enter_call(fds, home)
        ready, fds = None, None
        job = wire.read_job(wire.CODE_FD)  # handed its pipes ahead, the call may wait here a while
        try:
            run(job, main, siblings, tmpfs, spawned, session=True)
        except keeper.Kept as kept:
            channel, ready = kept.channel, kept.ready
            del kept
        except keeper.Forked as forked:  # a call, forked ahead by the one that was kept
            fds = forked.fds
            del forked


def exit_status(exc: SystemExit) -> int:
    """The status the interpreter would exit with for `exc` (printing a non-integer code, as it does)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        # The interpreter converts to a C long: what does not fit becomes -1, i.e. status 255.
        return exc.code & 0xFF if -(2**63) <= exc.code < 2**63 else 255
    try:
        sys.stderr.write(f"{exc.code}\n")
    except Exception:  # noqa: S110  (stderr closed by the run: nothing to report to)
        pass
    return 1


# Where the standard executors mark the interpreter's shutdown (no new thread from then on).
_EXECUTORS_SHUT = (("concurrent.futures.thread", "_shutdown"), ("concurrent.futures.process", "_global_shutdown"))


def _end_call_threads(threading: Any) -> None:
    """What `threading._shutdown` does at a run's end, for a session's call, minus its marks that a later
    call would inherit from the state this one leaves (found by a first hour: every later call's thread
    pool said "cannot schedule new futures after interpreter shutdown", its main thread was not alive,
    and its threads were not waited for): the callbacks threading runs at shutdown run (an executor
    left open lets its idle workers go), every other thread that is no daemon is waited for, and the
    executors' modules are told they may make threads again."""
    for callback in reversed(getattr(threading, "_threading_atexits", ())):
        callback()
    current = threading.current_thread()
    while True:  # again, until none is left: a thread joined may have started another (found by a review)
        # Started ones only: one being started is alive once its starter's start() returns, and its
        # starter is waited for here, or is a daemon (whose threads the interpreter's shutdown misses too).
        left = [t for t in threading.enumerate() if t is not current and not t.daemon and t.is_alive()]
        if not left:
            break
        for thread in left:
            thread.join()
    for module, mark in _EXECUTORS_SHUT:
        if hasattr(sys.modules.get(module), mark):
            setattr(sys.modules[module], mark, False)


def finish(status: int, ending: Ending | None = None, session: bool = False) -> NoReturn:
    """Leave as interpreter shutdown would, minus the heap teardown nothing can observe.

    Non-daemon threads are joined, what the run returns is gathered (`ending`: gather, send),
    atexit handlers run, and the standard streams are flushed and closed; the run then reports its
    own end, so the server can answer without waiting for the kernel to tear the process down, and
    os._exit skips finalizing every object, which costs milliseconds and, in a forked run, copies the
    whole inherited heap page by page. A `session` call runs no atexit handlers (its interpreter
    lives on in the next call), and offers the state it leaves as the session's next (`ending`'s
    third part: `keeper.offer_state`) once its streams are flushed, before it tells its end.
    """
    threading = sys.modules.get("threading")
    if threading is not None:
        if session:
            _end_call_threads(threading)
        else:
            threading._shutdown()
    report = None
    if ending is not None and ending[0] is not None:
        try:
            report = ending[0]()
        except Exception as exc:
            os.write(2, b"the run's images, files and result could not be gathered: %r\n" % exc)
    if not session:
        atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except Exception:
        # What the interpreter does when stdout cannot be flushed at exit.
        status = status or 120
    try:
        sys.stderr.flush()
    except Exception:  # noqa: S110  (a closed stderr has nothing left to flush)
        pass
    become = None
    if ending is not None and ending[2] is not None and status == 0:
        become = ending[2]()
    if ending is not None:
        try:
            ending[1](report, status)
        except Exception:  # noqa: S110  (the server then learns the end from the exit, as for a killed run)
            pass
    if become is not None:
        become()  # this call is the session's next state: kept (`keeper.Kept`) or killed
    os._exit(status)


def report(exc: BaseException) -> None:
    """Print an uncaught exception as the interpreter would, honouring a user-installed excepthook;
    never raises: with stderr closed (or a failing excepthook) there is nowhere to report to."""
    try:
        if sys.excepthook is not sys.__excepthook__:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        else:
            # The C-level hook reads source lines from disk; this one reads the seeded linecache.
            traceback.print_exception(exc)
    except Exception:  # noqa: S110  (nowhere left to report to)
        pass


def warm_up(siblings: tuple[types.ModuleType, ...] = (), workdir: str = "/") -> None:
    """Pay first-use costs before the code arrives: the first compile() of a process is ~1-10 ms, and
    in a forked run the first use of a function or class copies the zygote's pages it touches
    (reference counts, free lists): the first listdir() ~50 us, what a run does after its code ~0.3
    ms. With `siblings`, go through that once; nothing of it stays, `workdir` is only looked at.
    In a `sealed` process (a session's call forked ahead), the classes of the tree of "x" are the
    interpreter's own (`library.LIBRARY_CLASSES`), and `harvest` has bound them as it loaded (found by a
    second look: `_ast.Expr = C` ran the state's code there). Skipped, a session's call paid 0.5-2 ms."""
    exec(compile("pass", FILENAME, "exec", dont_inherit=True), {})
    os.listdir(workdir)
    if siblings:
        wire, directory, figures, harvest, images = siblings[:5]
        harvest.split_last_expression("x", FILENAME)
        figures.Figures(0, 0, images.MAX_PIXELS)
        home = os.stat(workdir)
        any(directory.walk(workdir, (home.st_dev, home.st_ino)))
        harvest.Report(wire.NO_RETURNS).encode(harvest.ended(0))
        wire.same_socket(wire.CODE_FD, wire.Job(bytearray(), b"", wire.NO_RETURNS, (home.st_dev, home.st_ino)))


def add_packages() -> None:
    """Put the package environment (RUNNER_PACKAGES, handed down as PYTHONPATH, which -I ignores)
    after the standard library on sys.path: a run cannot shadow a standard module with a package."""
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and entry not in sys.path:
            sys.path.append(entry)


def add_provided(paths: tuple[str, ...]) -> None:
    """Put the directories the server installed from its wheelhouse for this call after the package
    environment on sys.path (nothing there shadows it or the standard library), and on PYTHONPATH for a
    Python the code starts. In a session they stay for the calls after (a kept state has them)."""
    added = [path for path in paths if path not in sys.path]
    if not added:
        return
    sys.path.extend(added)
    os.environ["PYTHONPATH"] = os.pathsep.join([*filter(None, [os.environ.get("PYTHONPATH", "")]), *added])


def prepare_process(
    libc: types.ModuleType, syscalls: seccomp.Filter, *, namespaced_zygote: bool = False, uid: int | None = None
) -> None:
    """What every run needs once per interpreter, before any run's code: a forked run inherits it.

    Non-dumpable and no capabilities (both survive fork; a run can make only itself dumpable
    again, which exposes nothing but its own process, and can never regain a capability), the
    system calls no run may make refused (`syscalls`, seccomp filters, which survive fork and exec and
    cannot be lifted), the compiler warmed up, and a line-buffered stdout: -I ignores PYTHONUNBUFFERED, and a
    block-buffered stdout loses what a run printed before a timeout kill. Line buffering keeps every
    finished line, written whole (one write per line, so lines of concurrent processes do not
    interleave mid-line).

    A `namespaced_zygote` keeps its capabilities but its bounding set, and its `syscalls` let it make
    namespaces and mount: each run drops the capabilities and refuses the rest itself once its view
    is made (zygote.py). `libc` is `libc.py`, loaded by the caller. A spawned run of a root server
    becomes host `uid` on the way (`libc.privilege_dropper`).
    """
    libc.set_dumpable(False)
    add_packages()
    warm_up()
    libc.privilege_dropper(held=not namespaced_zygote)(uid)
    syscalls.install()  # after no_new_privs, or with the namespaced zygote's CAP_SYS_ADMIN
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]


def ready_for_code(wire: types.ModuleType, workdir: str, limits: list[int]) -> None:
    """Enter the working directory, apply the limits, say so on stdout (`wire.ready_line`): code may come."""
    # Anything the server's own parent passed down stops here (in a forked run: the zygote's
    # socket and the server's ends of the pipes); the job socket goes once the code is read.
    os.closerange(wire.CODE_FD + 1, MAX_FD)
    os.chdir(workdir)
    os.umask(0o077)
    # Lowering limits needs no capability, so the order against prepare_process() does not matter.
    os.write(1, wire.ready_line(apply_limits(*limits)))


# A spawned run's own cgroup: ``cgroup-fds=N`` says that fds 4 to 3+N are its cgroup.procs, one per
# hierarchy, opened by the server (runner/inrun/cgroups.py); bubblewrap's processes stay outside.
CGROUP_FDS = "cgroup-fds="


def give_home(workdir: str, uid: int) -> None:
    """A root server's sandboxed run, lent host `uid`: its working directory (its own tmpfs, HOME) is
    its own, as a plain run's is, before it becomes that uid."""
    os.chown(workdir, uid, uid)


def enter_cgroup(count: int) -> None:
    """Move into the run's cgroup through its `count` cgroup.procs fds after fd 3 (writing 0 moves
    the writer: the kernel checks the opener's credentials, the server's), first thing, and close them."""
    for fd in range(4, 4 + count):
        os.write(fd, b"0")
        os.close(fd)


def main() -> None:
    """A run interpreter: ``WORKDIR CPU AS NPROC FSIZE [TMPFS NETWORK [uid=UID] [cgroup-fds=N] [egress=PORT]
    [parent=PID]]`` (in a sandbox: TMPFS, the run's own tmpfs mounts, colon-separated; NETWORK, ``isolated``
    or ``shared``; UID, the host uid a root server's run becomes; N, its cgroup's fds; PORT, where its
    loopback holds the server's egress proxy; a plain run: PID, its server's); the zygote is `zygote.py`."""
    tmpfs = tuple(sys.argv[6].split(":")) if len(sys.argv) > 6 and sys.argv[6] else ()
    options = dict(arg.split("=", 1) for arg in sys.argv[8:] if "=" in arg)
    enter_cgroup(int(options.get(CGROUP_FDS.rstrip("="), 0)))
    libc, seccomp, *loaded = load_siblings(*SIBLINGS)
    siblings = Siblings(tuple(loaded), (libc, seccomp))
    if parent := int(options.get("parent", 0)):  # a plain run dies with its server (a sandboxed one: bwrap)
        libc.die_with(parent)
    wire = siblings.run[0]
    isolated = sys.argv[7:8] == ["isolated"]
    uid = int(options["uid"]) if "uid" in options else None
    if uid is not None:
        give_home(sys.argv[1], uid)
    egress = int(options.get("egress", 0)) if isolated else 0
    if egress:
        # Before the run's code exists: the port is the server's socket's, which no code can take first.
        # Bubblewrap made the namespace for this run alone, its loopback up.
        listener = wire.proxy_listener(egress)
        try:
            wire.hand_over_listener(listener)
        finally:
            os.close(listener)
    network = seccomp.PROXY_ONLY if egress else seccomp.NO_NETWORK if isolated else {}
    prepare_process(libc, seccomp.Filter({**seccomp.WHOLE, **network}), uid=uid)
    ready_for_code(wire, sys.argv[1], [int(arg) for arg in sys.argv[2:6]])
    warm_up(siblings.run, ".")
    main = new_main()
    run(wire.read_job(wire.CODE_FD), main, siblings, tmpfs, spawned=True)


if __name__ == "__main__":
    main()
