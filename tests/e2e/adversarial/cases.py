"""The hostile snippets: each with the status it must end with and what else its result must show.

Placeholders in a snippet are filled in per run: @TMP@ (the test's own temporary directory, as a
string literal), @TOKEN@ (a string literal unique to the run), @SERVER_PID@ (this process's pid),
@PORT@ (a loopback port this process listens on, for cases with `listener=True`).

Every loop that creates processes or threads is bounded: the tests run as root in CI, where
RLIMIT_NPROC is not enforced, so only these bounds and the timeout stop a bomb.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runner.config import MIB
from runner.outcome import RunResult, Status

# The test's own bounds: limits of the shared pool (conftest.small_limits).
OUTPUT_BUDGET = 4 * MIB
MAX_CODE_BYTES = 1 * MIB


@dataclass(frozen=True)
class Context:
    """What a case's snippet and checks may refer to."""

    tmp: Path
    token: str
    server_pid: int
    port: int
    mode: str
    environ_digest: str
    capabilities: int


Check = Callable[[RunResult, Context], None]
Applies = Callable[[Context], bool]


@dataclass(frozen=True)
class Hole:
    """A known hole: where `applies(context)`, the case fails for `reason`, and every problem the
    harness finds must contain one of `signatures` (anything else is a real failure)."""

    reason: str
    applies: Applies
    signatures: tuple[str, ...]


@dataclass(frozen=True)
class Case:
    id: str
    code: str
    expect: frozenset[Status]
    timeout: float = 5.0  # generous: only a case that hangs waits for it; timeout cases set their own
    stdin: str = ""
    needs_pid_namespace: bool = False  # could reach this process or every process without one
    listener: bool = False
    stdout: str | None = None
    stdout_has: tuple[str, ...] = ()
    stdout_lacks: tuple[str, ...] = ()
    stderr: str | None = None
    stderr_has: tuple[str, ...] = ()
    stderr_lacks: tuple[str, ...] = ()
    exit_code: int | None = None
    signal: str | None = None
    stdout_truncated: bool | None = None
    stderr_truncated: bool | None = None
    max_call_seconds: float | None = None  # wall-clock bound on the whole call
    check: Check | None = None
    probe_after: bool = False  # run a trivial snippet afterwards: the pool must still serve
    holes: tuple[Hole, ...] = field(default_factory=tuple)

    def render(self, context: Context) -> str:
        return (
            self.code.replace("@TMP@", repr(str(context.tmp)))
            .replace("@TOKEN@", repr(context.token))
            .replace("@SERVER_PID@", str(context.server_pid))
            .replace("@PORT@", str(context.port))
        )


def case(id: str, code: str, expect: Status | frozenset[Status], **extra: object) -> Case:
    statuses = expect if isinstance(expect, frozenset) else frozenset({expect})
    return Case(id=id, code=textwrap.dedent(code).strip("\n") + "\n", expect=statuses, **extra)  # type: ignore[arg-type]


# --- conditions of known holes -------------------------------------------------------------------

CAP_SYS_PTRACE = 19
CAP_SYS_RESOURCE = 24


# The modes that give each run namespaces of its own (see tests/helpers.py).
SANDBOXED = ("bwrap", "namespaces")


def plain(context: Context) -> bool:
    return context.mode not in SANDBOXED


NO_FILESYSTEM_ISOLATION = Hole(
    "plain mode does not confine the filesystem: a run writes wherever the server's uid may (docs/security.md)",
    plain,
    ("outside the run's directory", "left in the pool's base directory"),
)
NO_NETWORK_ISOLATION = Hole(
    "plain mode does not isolate the network: a run reaches the server's loopback (docs/security.md)",
    plain,
    ("'connected\\n'", "the listener on the server's loopback got a connection"),
)


# --- checks -----------------------------------------------------------------------------------


def fail(message: str) -> None:
    raise AssertionError(message)


def cpu_at_least(seconds: float) -> Check:
    def check(result: RunResult, context: Context) -> None:
        assert result.cpu_seconds is not None
        assert result.cpu_seconds >= seconds, f"cpu_seconds {result.cpu_seconds} < {seconds}"

    return check


def flooded(stream: str) -> Check:
    """The stream blew the budget, and the server stopped reading soon after."""

    def check(result: RunResult, context: Context) -> None:
        text = getattr(result, stream)
        assert text.truncated
        assert text.total_bytes > OUTPUT_BUDGET // 2, text.total_bytes
        assert result.stdout.total_bytes + result.stderr.total_bytes < OUTPUT_BUDGET + MIB, "reading stops at once"

    return check


def started_fewer_than(limit: int) -> Check:
    def check(result: RunResult, context: Context) -> None:
        counts = [int(line.split()[1]) for line in result.stdout.text.splitlines() if line.startswith("started ")]
        assert counts, result.stdout.text
        assert counts[-1] < limit, f"all {limit} started: nothing but the timeout bounded them"

    return check


def threads_bounded_where_the_process_limit_holds(result: RunResult, context: Context) -> None:
    """A root server's sandboxed run has a host uid of its own, whose RLIMIT_NPROC (RUNNER_MAX_PROCESSES,
    threads counted) stops the bomb; a plain root run's is not enforced, and all 300 start."""
    counts = [int(line.split()[1]) for line in result.stdout.text.splitlines() if line.startswith("started ")]
    assert counts, result.stdout.text
    if os.geteuid() != 0:
        return  # a share of the uid's common budget: how many start depends on what else runs
    if context.mode in SANDBOXED:
        assert "stopped: can't start new thread" in result.stdout.text, result.stdout.text
        assert counts[-1] < 300, "all 300 started: the run's own uid's process limit did not hold"
    else:
        assert counts[-1] == 300, result.stdout.text


def environ_not_leaked(result: RunResult, context: Context) -> None:
    # Reading its parent's environment is no leak in a sandbox, where the parent is the sandbox's init.
    assert context.environ_digest not in result.stdout.text, "the run read the server's environment"


def minimal_environment(result: RunResult, context: Context) -> None:
    names = set(result.stdout.text.split())
    # bubblewrap adds PWD; the package environment (RUNNER_PACKAGES) adds PYTHONPATH and MPLCONFIGDIR;
    # nothing of the server's own environment may show.
    minimal = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONUNBUFFERED", "MALLOC_ARENA_MAX", "PWD"}
    numeric = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MPLBACKEND"}
    numeric |= {"ARROW_DEFAULT_MEMORY_POOL", "ARROW_IO_THREADS"}  # pyarrow: malloc's memory, two I/O threads
    assert names <= minimal | numeric | {"PYTHONPATH", "MPLCONFIGDIR"}, names
    assert {"PATH", "HOME", "TMPDIR"} <= names, names


def no_escapes_in_text(result: RunResult, context: Context) -> None:
    assert result.stdout.truncated
    assert "\\x" not in result.stdout.text, "a multibyte character was cut in half"
    assert "\ufffd" not in result.stdout.text


# --- the cases --------------------------------------------------------------------------------

S = Status
FORK_DAEMON = """
    import os, time
    if os.fork() == 0:
        os.setsid()
        pid = os.fork()
        if pid:
            print(f"pid={pid}", flush=True)
            os._exit(0)
        for fd in (0, 1, 2):
            os.close(fd)
        time.sleep(20)
        os._exit(0)
    os.wait()
    print("parent done")
"""

TIME_AND_CPU = [
    case(
        "a cpu loop is stopped by the cpu limit",
        "while True: pass",
        S.CPU_LIMIT,
        timeout=8,  # CPU seconds, not wall-clock ones: a loaded machine gives them slowly
        signal="SIGXCPU",
        # The kernel's CPU timer and the rusage the run is measured by differ: on a loaded machine
        # the run was reported at 0.86 s when SIGXCPU came at the 1 s limit.
        check=cpu_at_least(0.5),
    ),
    case(
        "a cpu loop that catches sigxcpu is killed at the hard limit",
        """
        import signal
        signal.signal(signal.SIGXCPU, lambda *args: print("caught SIGXCPU", flush=True))
        while True: pass
        """,
        S.CPU_LIMIT,
        timeout=10,
        signal="SIGKILL",
        stdout_has=("caught SIGXCPU",),
        check=cpu_at_least(1),
    ),
    case(
        "a cpu loop that ignores sigxcpu is killed at the hard limit",
        """
        import signal
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        while True: pass
        """,
        S.CPU_LIMIT,
        timeout=10,
        signal="SIGKILL",
        check=cpu_at_least(1),
    ),
    case(
        # RLIMIT_CPU is per process: forked spinners each get their own second; the wall clock
        # is what bounds the whole run.
        "cpu loops in forked children are stopped by the timeout",
        """
        import os, time
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                while True: pass
            print(f"pid={pid}", flush=True)
        time.sleep(30)
        """,
        S.TIMEOUT,
        timeout=1.5,
        signal="SIGKILL",
    ),
    case(
        "sleeping past the timeout is killed",
        """
        import time
        print("start", flush=True)
        time.sleep(60)
        """,
        S.TIMEOUT,
        timeout=1,
        signal="SIGKILL",
        stdout="start\n",
    ),
    case(
        "ignoring sigterm and sleeping past the timeout is still killed",
        """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        time.sleep(60)
        """,
        S.TIMEOUT,
        timeout=1,
        signal="SIGKILL",
    ),
    case(
        "blocking every signal and sleeping past the timeout is still killed",
        """
        import signal, time
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        time.sleep(60)
        """,
        S.TIMEOUT,
        timeout=1,
        signal="SIGKILL",
    ),
    case(
        "a run that stops itself with sigstop is killed at the timeout",
        """
        import os, signal
        print("stopping", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        print("resumed")
        """,
        S.TIMEOUT,
        timeout=1,
        stdout="stopping\n",
        signal="SIGKILL",
    ),
    case(
        "an atexit handler that never returns is killed at the timeout",
        """
        import atexit, time
        atexit.register(time.sleep, 60)
        print("main done", flush=True)
        """,
        S.TIMEOUT,
        timeout=1,
        stdout="main done\n",
    ),
    case(
        "output printed without a flush before a timeout is kept",
        """
        import sys, time
        print("before, line buffered:", sys.stdout.line_buffering)
        time.sleep(60)
        """,
        S.TIMEOUT,
        timeout=1,
        stdout="before, line buffered: True\n",
    ),
    case(
        "a thread printing after the main thread ends keeps the run going until the timeout",
        """
        import threading, time
        def tick():
            while True:
                print("tick", flush=True)
                time.sleep(0.05)
        threading.Thread(target=tick).start()
        print("main done", flush=True)
        """,
        S.TIMEOUT,
        timeout=1,
        stdout_has=("main done\n", "tick\n"),
    ),
]

MEMORY = [
    case(
        "a bytearray bomb hits the memory limit",
        "x = bytearray(4 * 1024 ** 3)",
        S.MEMORY_LIMIT,
        exit_code=1,
        stderr_has=("MemoryError",),
    ),
    case("a list bomb hits the memory limit", "x = [0] * 10 ** 9", S.MEMORY_LIMIT, stderr_has=("MemoryError",)),
    case(
        "a growing list hits the memory limit",
        """
        x = []
        while True:
            x.append([0] * 100_000)
        """,
        S.MEMORY_LIMIT,
        stderr_has=("MemoryError",),
    ),
    case(
        "a doubling string hits the memory limit",
        """
        s = "x"
        while True:
            s += s
        """,
        S.MEMORY_LIMIT,
        stderr_has=("MemoryError",),
    ),
    case(
        "a huge mmap is refused by the memory limit",
        """
        import mmap
        m = mmap.mmap(-1, 1 << 34)
        """,
        S.MEMORY_LIMIT,
        stderr_has=("OSError: [Errno 12]",),
    ),
    case(
        # epicbox's test_run_memory_limit; found by a new user's first hour (it ended `error`)
        "a child interpreter that meets the memory limit is the memory limit when its status is passed on",
        """
        import subprocess, sys
        r = subprocess.run([sys.executable, '-c', '[1] * 10 ** 8'])
        sys.exit(r.returncode)
        """,
        S.MEMORY_LIMIT,
        stderr_has=("MemoryError",),
    ),
    case(
        "a raised memoryerror is not reported as the memory limit",
        "raise MemoryError",
        S.ERROR,
        stderr_has=("MemoryError",),
    ),
    case(
        "a memoryerror raised in a function of the run's own is not the memory limit either",
        """
        def check(n):
            if n > 10:
                raise MemoryError(f"{n} is too many")
        check(11)
        """,
        S.ERROR,
        stderr_has=("MemoryError: 11 is too many",),
    ),
    case(
        "a memoryerror caught and raised again is still the memory limit",
        """
        try:
            x = bytearray(1 << 40)
        except MemoryError:
            print("out of memory")
            raise
        """,
        S.MEMORY_LIMIT,
        stdout_has=("out of memory",),
    ),
    case(
        "an exception that names memoryerror in its message is not the memory limit",
        "raise ValueError('MemoryError')",
        S.ERROR,
    ),
    case(
        "deep recursion is a recursion error",
        """
        def f():
            return f()
        f()
        """,
        S.ERROR,
        stderr_has=("RecursionError",),
        stderr_lacks=("bootstrap",),
    ),
    case(
        "deep recursion in c with the limit raised is a segfault",
        """
        import functools, sys
        sys.setrecursionlimit(10 ** 8)
        @functools.lru_cache(None)
        def f(n):
            return f(n + 1)
        f(0)
        """,
        S.SIGNAL,
        signal="SIGSEGV",
    ),
]

PROCESSES = [
    case(
        "a thread bomb is bounded by the address space limit",
        """
        import threading, time
        started = 0
        try:
            for _ in range(300):
                threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
                started += 1
        except RuntimeError as exc:
            print("stopped:", exc)
        print("started", started, flush=True)
        time.sleep(60)
        """,
        S.TIMEOUT,
        timeout=1,
        stdout_has=("can't start new thread",),
        check=started_fewer_than(300),
    ),
    case(
        "a thread bomb with small stacks dies with its process",
        """
        import threading, time
        threading.stack_size(64 * 1024)
        try:
            for _ in range(300):
                threading.Thread(target=time.sleep, args=(60,)).start()
        except RuntimeError as exc:
            print("stopped:", exc)
        print("started", threading.active_count() - 1, flush=True)
        """,
        S.TIMEOUT,
        timeout=2,
        check=threads_bounded_where_the_process_limit_holds,
    ),
    case(
        "an os fork bomb is stopped by the timeout",
        """
        import os, time
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError as exc:
                print("stopped:", exc, flush=True)
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            print(f"pid={pid}", flush=True)
        time.sleep(30)
        """,
        S.TIMEOUT,
        timeout=1.5,
        stdout_has=("pid=",),
    ),
    case(
        "an exponential fork bomb is stopped by the timeout",
        """
        import os, time
        for _ in range(7):  # at most 128 processes
            try:
                os.fork()
            except OSError:
                pass
        print(f"pid={os.getpid()}", flush=True)
        time.sleep(30)
        """,
        S.TIMEOUT,
        timeout=1.5,
        stdout_has=("pid=",),
    ),
    case(
        "a subprocess bomb is stopped by the timeout",
        """
        import subprocess, time
        for _ in range(100):
            try:
                child = subprocess.Popen(["sleep", "30"])
            except OSError as exc:
                print("stopped:", exc, flush=True)
                break
            print(f"pid={child.pid}", flush=True)
        time.sleep(30)
        """,
        S.TIMEOUT,
        timeout=1.5,
        stdout_has=("pid=",),
    ),
    case(
        "a shell background job dies with the run",
        """
        import subprocess
        subprocess.run(["sh", "-c", "sleep 30 & echo pid=$!"], check=True)
        """,
        S.OK,
        stdout_has=("pid=",),
    ),
    case(
        "a child left in the group is killed when the main process exits",
        """
        import os, time
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        print(f"pid={pid}")
        """,
        S.OK,
        stdout_has=("pid=",),
    ),
    case(
        "a setsid double fork daemon is killed after the run",
        FORK_DAEMON,
        S.OK,
        stdout_has=("pid=", "parent done\n"),
    ),
    case(
        "a setpgid child holding stdout cannot hold the call",
        """
        import os, time
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)
            for _ in range(400):  # at most 20 s
                try:
                    print("late", flush=True)
                except OSError:
                    pass
                time.sleep(0.05)
            os._exit(0)
        print(f"pid={pid}", flush=True)
        time.sleep(0.1)
        print("parent done", flush=True)
        """,
        S.OK,
        timeout=5,
        stdout_has=("pid=", "parent done\n"),
        max_call_seconds=3,  # well before the timeout: the child's stdout does not hold the call
    ),
    case(
        "a new session started with subprocess is killed after the run",
        """
        import subprocess
        child = subprocess.Popen(["sleep", "20"], start_new_session=True)
        print(f"pid={child.pid}")
        """,
        S.OK,
        stdout_has=("pid=",),
    ),
    case(
        "a daemon that clears its environment and execs is still killed",
        """
        import os
        if os.fork() == 0:
            os.setsid()
            pid = os.fork()
            if pid:
                print(f"pid={pid}", flush=True)
                os._exit(0)
            os.closerange(0, 3)
            os.execve("/bin/sh", ["sh", "-c", "sleep 20"], {})
        os.wait()
        print("parent done")
        """,
        S.OK,
        stdout_has=("pid=", "parent done\n"),
    ),
    case(
        "a daemon that keeps forking new generations is still killed",
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            for _ in range(200):  # a new process every 50 ms, for at most 10 s
                if os.fork():
                    os._exit(0)
                time.sleep(0.05)
            os._exit(0)
        os.wait()
        print("started")
        """,
        S.OK,
        stdout="started\n",
    ),
    case(
        "an atexit handler that forks a daemon leaves nothing",
        """
        import atexit, os, time
        def linger():
            if os.fork() == 0:
                os.setsid()
                pid = os.fork()
                if pid:
                    print(f"pid={pid}", flush=True)
                    os._exit(0)
                time.sleep(20)
                os._exit(0)
            os.wait()
        atexit.register(linger)
        print("main done")
        """,
        S.OK,
        stdout_has=("main done\n", "pid="),
    ),
    case(
        "unreaped zombies of a run leave nothing",
        """
        import os
        for _ in range(20):
            if os.fork() == 0:
                os._exit(0)
        print("left 20 zombies")
        """,
        S.OK,
        stdout="left 20 zombies\n",
    ),
    case(
        "an exec of a shell reports the shell's exit code",
        """
        import os
        os.execv("/bin/sh", ["sh", "-c", "echo from sh; exit 3"])
        """,
        S.ERROR,
        exit_code=3,
        stdout="from sh\n",
    ),
    case(
        "killing its own process group ends the run by sigkill",
        """
        import os, signal
        print("bye", flush=True)
        os.killpg(0, signal.SIGKILL)
        """,
        S.SIGNAL,
        signal="SIGKILL",
        stdout="bye\n",
    ),
]

# Without a PID namespace these reach this very process (the server) or every process on the machine.
SERVER_REACH = [
    case(
        # In bwrap's namespace the parent is the sandbox's init: the kill is ignored (the run goes on, ok)
        # or takes the sandbox down (the run ends by SIGKILL). In the zygote's, the parent is out of
        # sight (getppid() is 0): kill(0) ends the run's own group. Either way the server is unharmed.
        "killing the parent does not reach the server",
        """
        import os, signal, time
        try:
            os.kill(os.getppid(), signal.SIGKILL)
            print("sent", flush=True)
        except OSError as exc:
            print("refused", type(exc).__name__, flush=True)
        time.sleep(0.2)
        print("still here")
        """,
        frozenset({S.OK, S.SIGNAL}),
        needs_pid_namespace=True,
        probe_after=True,
    ),
    case(
        "kill of every process does not reach the server",
        """
        import os, signal, time
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        time.sleep(0.2)
        print("survived")
        """,
        S.OK,
        stdout="survived\n",
        needs_pid_namespace=True,
        probe_after=True,
    ),
    case(
        "the server's process group is out of reach",
        """
        import os, signal
        try:
            os.killpg(os.getpgid(@SERVER_PID@), signal.SIGKILL)
            print("sent")
        except OSError as exc:
            print("refused", type(exc).__name__)
        """,
        S.OK,
        stdout_has=("refused",),
        needs_pid_namespace=True,
        probe_after=True,
    ),
    case(
        # PTRACE_SEIZE does not stop the tracee, but an attach to the test runner is not worth the risk.
        "ptrace of the server is refused",
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PTRACE_SEIZE = 0x4206
        rc = libc.ptrace(PTRACE_SEIZE, @SERVER_PID@, None, None)
        print("attached" if rc == 0 else f"refused errno={ctypes.get_errno()}")
        """,
        S.OK,
        stdout_has=("refused",),
        needs_pid_namespace=True,
        probe_after=True,
    ),
]

OUTPUT = [
    case(
        "a stdout flood with newlines hits the output budget",
        "while True: print('x' * 99)",
        S.OUTPUT_LIMIT,
        signal="SIGKILL",
        check=flooded("stdout"),
    ),
    case(
        "a stdout flood without newlines hits the output budget",
        """
        import sys
        while True:
            sys.stdout.write("x" * 65536)
        """,
        S.OUTPUT_LIMIT,
        check=flooded("stdout"),
    ),
    case(
        "a stderr flood with newlines hits the output budget",
        """
        import sys
        while True:
            print("e" * 99, file=sys.stderr)
        """,
        S.OUTPUT_LIMIT,
        check=flooded("stderr"),
    ),
    case(
        "a stderr flood without newlines hits the output budget",
        """
        import sys
        while True:
            sys.stderr.write("e" * 65536)
        """,
        S.OUTPUT_LIMIT,
        check=flooded("stderr"),
    ),
    case(
        "floods on both streams at once hit the output budget",
        """
        import sys, threading
        both = threading.Barrier(2)  # each stream has had its first write before either floods on
        def flood(stream):
            stream.write("y" * 65536)
            stream.flush()
            both.wait()
            while True:
                stream.write("y" * 65536)
        threading.Thread(target=flood, args=(sys.stderr,), daemon=True).start()
        flood(sys.stdout)
        """,
        S.OUTPUT_LIMIT,
        stdout_truncated=True,
        check=lambda result, context: flooded("stdout" if result.stdout.total_bytes > 2 * MIB else "stderr")(
            result, context
        ),
    ),
    case(
        "one 200 mib write hits the output budget",
        """
        import sys
        sys.stdout.buffer.write(b"x" * (200 << 20))
        """,
        S.OUTPUT_LIMIT,
        check=flooded("stdout"),
    ),
    case(
        "one 200 mib writev of a small buffer hits the output budget",
        """
        import os
        os.writev(1, [b"v" * (1 << 20)] * 200)
        """,
        S.OUTPUT_LIMIT,
        check=flooded("stdout"),
    ),
    case(
        "a bounded print flood is truncated but ok",
        """
        for i in range(100_000):
            print(i)
        """,
        S.OK,
        stdout_truncated=True,
        check=lambda result, context: (
            None
            if result.stdout.text.startswith("0\n1\n2\n") and result.stdout.text.endswith("\n99998\n99999\n")
            else fail(f"head or tail lost: {result.stdout.text[:40]!r} ... {result.stdout.text[-40:]!r}")
        ),
    ),
    case(
        "a multibyte flood is cut on character boundaries",
        "print('\u00e9' * 1_000_000, end='')",
        S.OK,
        check=no_escapes_in_text,
    ),
    case(
        "binary invalid utf8 and nul output is escaped",
        r"""
        import sys
        sys.stdout.buffer.write(b"ok\xff\xfe\x00end\n")
        """,
        S.OK,
        stdout="ok\\xff\\xfe\\x00end\n",
    ),
    case(
        "terminal control sequences are escaped",
        r"print('\x1b[2J\x1b]0;title\x07bell\rcr\x7f')",
        S.OK,
        stdout="\\x1b[2J\\x1b]0;title\\x07bell\rcr\\x7f\n",
    ),
    case(
        "a printed lone low surrogate comes out as an escaped byte",
        r"print('\udcff')",
        S.OK,
        stdout="\\xff\n",
    ),
    case(
        "a printed lone high surrogate is a unicode error",
        r"print('\ud800')",
        S.ERROR,
        stderr_has=("UnicodeEncodeError", "surrogates not allowed"),
    ),
    case(
        "closing fds 1 and 2 and exiting is ok",
        """
        import os
        os.close(1)
        os.close(2)
        """,
        S.OK,
        stdout="",
        stderr="",
    ),
    case(
        "closing fds 1 and 2 then printing a line is an error",
        """
        import os
        os.close(1)
        os.close(2)
        print("nowhere")
        """,
        S.ERROR,
        exit_code=1,  # stdout is line-buffered: the print itself fails (EBADF)
    ),
    case(
        "closing fds 1 and 2 then printing a partial line exits with 120",
        """
        import os
        os.close(1)
        os.close(2)
        print("nowhere", end="")
        """,
        S.ERROR,
        exit_code=120,  # as the interpreter does when it cannot flush stdout at exit
    ),
    case(
        "closing fds 1 and 2 then sleeping is still killed at the timeout",
        """
        import os, time
        os.close(1)
        os.close(2)
        time.sleep(60)
        """,
        S.TIMEOUT,
        timeout=1,
    ),
    case(
        "output from a daemon thread after the main thread ends is cut off cleanly",
        """
        import threading, time
        ticked = threading.Event()
        def tick():
            while True:
                print("tick", flush=True)
                ticked.set()
                time.sleep(0.001)
        threading.Thread(target=tick, daemon=True).start()
        ticked.wait()
        time.sleep(0.05)
        print("main done", flush=True)
        """,
        S.OK,
        stdout_has=("tick\n", "main done\n"),
    ),
    case(
        "a run that floods before reading a large stdin does not deadlock",
        """
        import sys
        sys.stdout.write("o" * 2_000_000)
        sys.stdout.flush()
        data = sys.stdin.buffer.read()
        print()
        print("read", len(data))
        """,
        S.OK,
        stdin="i" * 1_000_000,
        check=lambda result, context: (
            None if result.stdout.text.endswith("\nread 1000000\n") else fail(result.stdout.text[-80:])
        ),
    ),
]

EXITS = [
    case("os exit with code 3 is an error", "import os\nos._exit(3)", S.ERROR, exit_code=3),
    case("os exit with code 255 is an error", "import os\nos._exit(255)", S.ERROR, exit_code=255),
    case(
        # The kernel keeps the low 8 bits of an exit status: 256 is 0.
        "os exit with code 256 wraps to zero",
        "import os\nos._exit(256)",
        S.OK,
        exit_code=0,
    ),
    case(
        "sys exit with a message is an error with the message on stderr",
        "import sys\nsys.exit('bye')",
        S.ERROR,
        exit_code=1,
        stderr="bye\n",
    ),
    case("sys exit with none is ok", "import sys\nprint('x')\nsys.exit(None)", S.OK, exit_code=0, stdout="x\n"),
    case(
        "keyboard interrupt ends the run by sigint",
        "raise KeyboardInterrupt",
        S.SIGNAL,
        signal="SIGINT",
        stderr_has=("KeyboardInterrupt",),
        stderr_lacks=("bootstrap",),
    ),
    case(
        "a segfault through ctypes is reported as sigsegv",
        "import ctypes\nctypes.string_at(0)",
        S.SIGNAL,
        signal="SIGSEGV",
    ),
    case("os abort is reported as sigabrt", "import os\nos.abort()", S.SIGNAL, signal="SIGABRT"),
    case(
        "a self sent sigkill is a signal",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
        S.SIGNAL,
        signal="SIGKILL",
    ),
    case(
        "a self sent sigxcpu is not reported as the cpu limit",
        "import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)",
        S.SIGNAL,
        signal="SIGXCPU",
    ),
    case(
        "atexit handlers run after the main code",
        "import atexit\natexit.register(print, 'bye')\nprint('main')",
        S.OK,
        stdout="main\nbye\n",
    ),
]

LIMITS_AND_FILES = [
    case(
        "raising its own cpu limit does not free it from the wall clock",
        """
        import resource
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            print("raised", flush=True)
        except (ValueError, OSError):
            print("refused", flush=True)
        while True: pass
        """,
        # cpu_limit where the kernel refuses to raise a hard limit (no CAP_SYS_RESOURCE); timeout
        # where the run may raise it (root with every capability), or where a loaded machine does
        # not give it a second of CPU within the timeout.
        frozenset({S.CPU_LIMIT, S.TIMEOUT}),
        timeout=2.5,
    ),
    case(
        "raising its own memory limit is refused",
        """
        import resource
        try:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            print("raised", flush=True)
        except (ValueError, OSError):
            print("refused", flush=True)
        block = bytearray(1 << 30)
        print("allocated 1 GiB")
        """,
        S.MEMORY_LIMIT,
        stdout="refused\n",
    ),
    case(
        "raising its own file size limit is refused",
        """
        import resource
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            print("raised", flush=True)
        except (ValueError, OSError):
            print("refused", flush=True)
        with open("big", "wb") as f:
            f.write(b"x" * (2 << 20))
        """,
        S.FILE_SIZE_LIMIT,
        stdout="refused\n",
    ),
    case(
        "a file over the size limit is a file size error",
        "open('big', 'wb').write(b'x' * (2 << 20))",
        S.FILE_SIZE_LIMIT,
        exit_code=1,
        stderr_has=("File too large",),
    ),
    case(
        "a sparse file past the size limit is a file size error",
        """
        with open("sparse", "wb") as f:
            f.seek(10 << 20)
            f.write(b"x")
        """,
        S.FILE_SIZE_LIMIT,
        stderr_has=("File too large",),
    ),
    case(
        "a file over the size limit with sigxfsz restored is killed by sigxfsz",
        """
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        open("big", "wb").write(b"x" * (2 << 20))
        """,
        S.FILE_SIZE_LIMIT,
        signal="SIGXFSZ",
    ),
    case(
        "many files filling the working directory are removed afterwards",
        """
        import os
        for i in range(500):  # (1,000 and 20 MiB passed the 1 s of CPU once, in a clean clone on a busy host)
            with open(f"small-{i}", "w") as f:
                f.write("x")
        block = b"z" * (1 << 20)
        for i in range(10):
            with open(f"big-{i}", "wb") as f:
                f.write(block)
        os.makedirs("/".join(["deep"] * 60))
        print(len(os.listdir(".")))
        """,
        S.OK,
        stdout="511\n",
    ),
    case(
        "a deep locked directory tree is removed afterwards",
        """
        import os
        path = "."
        for i in range(100):
            path = os.path.join(path, f"d{i}")
            os.mkdir(path)
            open(os.path.join(path, "f"), "w").close()
        for _ in range(101):
            os.chmod(path, 0)
            path = os.path.dirname(path) or "."
        print("locked")
        """,
        S.OK,
        stdout="locked\n",
    ),
    case(
        "writing outside the working directory is refused",
        """
        import os
        targets = [
            os.path.join(@TMP@, "escaped.txt"),
            "/tmp/adversarial-" + @TOKEN@,
            os.path.join(os.environ["HOME"], "..", "escaped-" + @TOKEN@),
        ]
        for path in targets:
            try:
                with open(path, "w") as f:
                    f.write("escaped")
                print("written", path)
            except OSError as exc:
                print("refused", path, type(exc).__name__)
        """,
        # Whether a write escaped is judged on this side: in a sandbox /tmp is the run's own directory.
        S.OK,
        holes=(NO_FILESYSTEM_ISOLATION,),
    ),
    case(
        "symlinks out of the working directory are not followed by the clean-up",
        """
        import os
        os.symlink(@TMP@, "tmp-link")
        os.symlink("/tmp", "slash-tmp-link")
        os.mkdir("locked")
        os.symlink(@TMP@, "locked/inner-link")
        os.chmod("locked", 0)
        print("links made")
        """,
        S.OK,
        stdout="links made\n",
    ),
    case(
        "a working directory replaced by a symlink is cleaned up without following it",
        """
        import os
        home = os.environ["HOME"]
        os.chdir("/")
        try:
            os.rmdir(home)
        except OSError as exc:  # in a sandbox it is a mount point
            print("kept", type(exc).__name__)
        else:
            os.symlink(os.path.join(@TMP@, "decoy"), home)
            print("replaced")
        """,
        S.OK,
    ),
    case(
        "a run that deletes its own working directory is fine",
        """
        import os
        home = os.environ["HOME"]
        os.chdir("/")
        try:
            os.rmdir(home)
            print("gone")
        except OSError as exc:  # in a sandbox it is a mount point
            print("kept", type(exc).__name__)
        """,
        S.OK,
    ),
]

STDIN = [
    case(
        "reading stdin gets the given text",
        "import sys\nprint(sys.stdin.read().upper(), end='')",
        S.OK,
        stdin="h\u00e9llo\nworld\n",
        stdout="H\u00c9LLO\nWORLD\n",
    ),
    case(
        "reading stdin when none was given gets eof",
        "input()",
        S.ERROR,
        stderr_has=("EOFError",),
    ),
    case(
        "reading a megabyte of stdin gets all of it",
        "import sys\nprint(len(sys.stdin.buffer.read()))",
        S.OK,
        stdin="s" * 1_000_000,
        stdout="1000000\n",
    ),
    case(
        "a child process reads the run's stdin",
        "import subprocess\nsubprocess.run(['cat'], check=True)",
        S.OK,
        stdin="from stdin\n",
        stdout="from stdin\n",
    ),
]

CODE_INPUT = [
    case(
        "code with a lone surrogate is rejected as invalid arguments",
        "print('\ud800')",
        S.INVALID_ARGUMENTS,
        check=lambda result, context: None if "lone surrogate" in result.message else fail(result.message),
    ),
    case(
        "stdin with a lone surrogate is rejected as invalid arguments",
        "print(input())",
        S.INVALID_ARGUMENTS,
        stdin="\udcff\n",
    ),
    case(
        # What an invalid UTF-8 byte becomes once a client decodes it: a valid character, run as is.
        "code with the replacement character runs",
        "print('\ufffd')",
        S.OK,
        stdout="\ufffd\n",
    ),
    case(
        "code over the size cap is rejected as invalid arguments",
        "#" * (MAX_CODE_BYTES + 1),
        S.INVALID_ARGUMENTS,
        check=lambda result, context: None if "more than the limit" in result.message else fail(result.message),
    ),
    case(
        "code over the size cap in utf8 bytes is rejected as invalid arguments",
        "#" + "\u00e9" * (MAX_CODE_BYTES // 2),
        S.INVALID_ARGUMENTS,
    ),
    case(
        "huge code just under the size cap runs",
        "x = '" + "a" * (MAX_CODE_BYTES - 100) + "'\nprint(len(x))",
        S.OK,
        stdout=f"{MAX_CODE_BYTES - 100}\n",
    ),
    case(
        "code with nul bytes is a syntax error",
        "print(1)\x00print(2)",
        S.ERROR,
        stderr_has=("null bytes",),
        stderr_lacks=("bootstrap",),
    ),
    case(
        "a syntax error is reported without runner frames",
        "def f(:\n    pass",
        S.ERROR,
        exit_code=1,
        stderr_has=("SyntaxError",),
        stderr_lacks=("bootstrap", "/runner/"),
    ),
    case(
        "an indentation error is reported without runner frames",
        "if True:\nprint(1)",
        S.ERROR,
        stderr_has=("IndentationError",),
        stderr_lacks=("bootstrap",),
    ),
    case(
        "too many nested parentheses is a syntax error",
        "x = " + "(" * 1000 + "1" + ")" * 1000,
        S.ERROR,
        stderr_has=("too many nested parentheses",),
        stderr_lacks=("bootstrap",),
    ),
    case(
        "an expression too deep to compile is reported without runner frames",
        "x = " + "+".join(["1"] * 100_000),
        S.ERROR,
        stderr_has=("RecursionError",),
        stderr_lacks=("bootstrap", "/runner/"),
    ),
    case(
        "a coding cookie does not re-decode the code",
        "# -*- coding: latin-1 -*-\nprint('\u00e9')",
        S.OK,
        stdout="\u00e9\n",
    ),
    case(
        "a byte order mark at the start of the code is accepted",
        "\ufeffprint(1)",
        S.OK,
        stdout="1\n",
    ),
]

ISOLATION = [
    case(
        "listing inherited fds shows the three streams and the run's own job socket, nothing else",
        """
        import os, resource, stat, socket
        def is_open(fd):
            try:
                os.fstat(fd)
            except OSError:
                return False
            return True
        found = [fd for fd in range(min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 65536)) if is_open(fd)]
        # fd 3 is where the job came in and the report goes out: a Unix socket to the server, not
        # inherited by what the code starts.
        job = socket.socket(fileno=os.dup(3))
        print(found, stat.S_ISSOCK(os.fstat(3).st_mode), job.family == socket.AF_UNIX, os.get_inheritable(3))
        """,
        S.OK,
        stdout="[0, 1, 2, 3] True True False\n",
    ),
    case(
        "the run sees only its minimal environment",
        "import os\nprint(*sorted(os.environ))",
        S.OK,
        check=minimal_environment,
    ),
    case(
        "reading the server's environment is refused",
        """
        import hashlib, os
        for pid in sorted({@SERVER_PID@, os.getppid()}):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    print("read", hashlib.sha256(f.read()).hexdigest())
            except OSError as exc:
                print("refused", type(exc).__name__)
        """,
        S.OK,
        check=environ_not_leaked,
    ),
    case(
        "a network connect to the server's loopback is refused",
        """
        import socket
        try:
            socket.create_connection(("127.0.0.1", @PORT@), timeout=1).close()
            print("connected")
        except OSError as exc:
            print("blocked", type(exc).__name__)
        """,
        S.OK,
        listener=True,
        stdout_has=("blocked",),
        holes=(NO_NETWORK_ISOLATION,),
    ),
]


def plain_as_root(context: Context) -> bool:
    return plain(context) and os.geteuid() == 0


PLAIN_ROOT_WRITES_KERNEL_SETTINGS = Hole(
    "plain mode does not confine the file system: a root server's run writes /proc/sys as root does (docs/security.md)",
    plain_as_root,
    ("stdout has 'writable'",),
)
PLAIN_READS_THE_KEYS = Hole(
    "plain mode shows /proc as the server's uid sees it, the kernel's keys included (docs/security.md)",
    lambda context: plain(context) and Path("/proc/keys").read_text() != "",
    ("stdout '/proc/keys ",),
)

# What reaches the kernel beyond the run: the review's reproductions (issue 22), each refused now.
KERNEL = [
    case(
        "a user namespace of its own to mount a cgroup2 file system in is refused",
        """
        import ctypes, errno, os
        libc = ctypes.CDLL(None, use_errno=True)
        CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWCGROUP = 0x10000000, 0x00020000, 0x02000000
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP) != 0:
            print(errno.errorcode[ctypes.get_errno()])
        else:
            os.makedirs("cg", exist_ok=True)
            print("mounted" if libc.mount(b"cgroup2", b"cg", b"cgroup2", 0, None) == 0 else "unshared")
        """,
        S.OK,
        stdout="EPERM\n",
    ),
    case(
        "io_uring and userfaultfd are refused",
        """
        import ctypes, errno, os
        libc = ctypes.CDLL(None, use_errno=True)
        io_uring_setup, userfaultfd = {"x86_64": (425, 323), "aarch64": (425, 282)}[os.uname().machine]
        params = ctypes.create_string_buffer(120)
        for result in (libc.syscall(io_uring_setup, 8, params), libc.syscall(userfaultfd, 0)):
            print(errno.errorcode[ctypes.get_errno()] if result < 0 else "allowed")
        """,
        S.OK,
        stdout="EPERM\nEPERM\n",
    ),
    case(
        "inotify and fanotify are refused",
        """
        import ctypes, errno
        libc = ctypes.CDLL(None, use_errno=True)
        for result in (libc.inotify_init1(0), libc.fanotify_init(0, 0)):
            print(errno.errorcode[ctypes.get_errno()] if result < 0 else "allowed")
        """,
        S.OK,
        stdout="EPERM\nEPERM\n",
    ),
    case(
        "memfds holding memory outside the memory limit are refused",
        """
        import os
        held = []
        try:
            for n in range(40):
                fd = os.memfd_create(f"m{n}")
                os.posix_fallocate(fd, 0, 15 << 20)
                held.append(fd)
        except OSError as exc:
            print(type(exc).__name__, len(held))
        """,
        S.OK,
        stdout="PermissionError 0\n",
    ),
    case(
        "sysv shared memory and message queues outside the memory limit are refused",
        """
        import ctypes, errno
        libc = ctypes.CDLL(None, use_errno=True)
        for result in (libc.shmget(0, 100 << 20, 0o1600), libc.msgget(0, 0o1600), libc.semget(0, 1, 0o1600)):
            print(errno.errorcode[ctypes.get_errno()] if result < 0 else "allowed")
        """,
        S.OK,
        stdout="EPERM\nEPERM\nEPERM\n",
    ),
    case(
        "socket buffers asked for past the default are not given",
        """
        import socket
        default = int(open("/proc/sys/net/core/wmem_default").read())
        pairs, queued = [], 0
        for _ in range(100):
            a, b = socket.socketpair()
            pairs.append((a, b))
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 20)
            a.setblocking(False)
            try:
                while True:
                    queued += a.send(bytes(65536))
            except BlockingIOError:
                pass
        print("bounded" if queued <= len(pairs) * 2 * default else f"{queued >> 20} MiB queued")
        """,
        S.OK,
        stdout="bounded\n",
    ),
    case(
        "the kernel's core pattern cannot be opened for writing",
        """
        import os
        for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/printk_ratelimit_burst"):
            try:
                os.close(os.open(path, os.O_WRONLY))
                print("writable", path)
            except OSError as exc:
                print(type(exc).__name__)
        """,
        S.OK,
        stdout_lacks=("writable",),
        holes=(PLAIN_ROOT_WRITES_KERNEL_SETTINGS,),
    ),
    case(
        "the kernel's keys are not listed",
        """
        for path in ("/proc/keys", "/proc/key-users"):
            text = open(path).read()
            print(path, len(text.splitlines()), "lines") if text else None
        print("none")
        """,
        S.OK,
        stdout="none\n",
        holes=(PLAIN_READS_THE_KEYS,),
    ),
]

CASES = TIME_AND_CPU + MEMORY + PROCESSES + SERVER_REACH + OUTPUT + EXITS + LIMITS_AND_FILES + STDIN + CODE_INPUT
CASES += ISOLATION + KERNEL
