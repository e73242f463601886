"""The first code every run interpreter executes: stdlib only, applies the limits before any user code.

Started as ``python -I -S -X utf8 bootstrap.py WORKDIR CPU AS NPROC FSIZE`` with the run's pipes on
fds 0-2 and the code pipe on fd 3. It closes every other inherited fd, enters WORKDIR, applies the
rlimits, reports readiness as one line on stdout (before any user output can exist), then waits for
the code on fd 3, closes it and runs the code as ``__main__``. This file must not import the
``runner`` package: it runs under ``-I -S`` with nothing but the standard library.
"""

import linecache
import os
import signal
import sys
import traceback
import types

CODE_FD = 3
FILENAME = "<run_python>"
READY_PREFIX = b"\x00runner-ready"
PR_SET_DUMPABLE = 4


def apply_limits(cpu: int, address_space: int, nproc: int, fsize: int) -> list[str]:
    """Apply every rlimit it can; return the names of those the OS refused (e.g. RLIMIT_AS on macOS)."""
    try:
        import resource
    except ImportError:
        return ["RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CORE"]
    # CPU hard sits one second above soft: SIGXCPU at soft, SIGKILL at hard if code catches SIGXCPU.
    wanted = [
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_CPU", cpu, cpu + 1),
        ("RLIMIT_AS", address_space, address_space),
        ("RLIMIT_NPROC", nproc, nproc),
        ("RLIMIT_FSIZE", fsize, fsize),
    ]
    refused = []
    for name, soft, hard in wanted:
        which = getattr(resource, name, None)
        if which is None:
            refused.append(name)
            continue
        try:
            _, current_hard = resource.getrlimit(which)
            if current_hard != resource.RLIM_INFINITY:
                # An unprivileged process can only lower its hard limit.
                hard = min(hard, current_hard)
                soft = min(soft, hard)
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            refused.append(name)
    return refused


def make_undumpable() -> None:
    """Close this process's /proc entries and ptrace to other processes of the same uid (Linux).

    A pre-spawned interpreter waits for its code while processes left behind by earlier runs may
    still live under the same uid; without this they could open /proc/<pid>/fd/1 of the next run
    and write into its output.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def read_code() -> bytes:
    """Read the code until the server closes the pipe."""
    chunks = []
    while True:
        chunk = os.read(CODE_FD, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(CODE_FD)
    return b"".join(chunks)


def run(source: bytes) -> None:
    """Run `source` as the ``__main__`` module, with tracebacks that show the user's lines only."""
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    sys.argv = [""]
    text = source.decode("utf-8", "replace")
    # Seed linecache so tracebacks print the offending source lines of the run's code.
    linecache.cache[FILENAME] = (len(text), None, text.splitlines(True), FILENAME)
    try:
        code = compile(source, FILENAME, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        report(exc.with_traceback(None))
        sys.exit(1)
    try:
        exec(code, main.__dict__)
    except SystemExit:
        raise
    except BaseException as exc:
        # Drop this module's frame so the traceback starts at the user's code.
        report(exc.with_traceback(exc.__traceback__.tb_next if exc.__traceback__ else None))
        if isinstance(exc, KeyboardInterrupt):
            # Mirror the interpreter: die by SIGINT so the exit status says so.
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        sys.exit(1)


def report(exc: BaseException) -> None:
    """Print an uncaught exception as the interpreter would, honouring a user-installed excepthook."""
    if sys.excepthook is not sys.__excepthook__:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    else:
        # The C-level hook reads source lines from disk; this one reads the seeded linecache.
        traceback.print_exception(exc)


def main() -> None:
    """Set the process up, report readiness, then run the code that arrives on fd 3."""
    workdir, cpu, address_space, nproc, fsize = sys.argv[1], *map(int, sys.argv[2:6])
    # Anything the server's own parent passed down stops here; fd 3 goes once the code is read.
    os.closerange(CODE_FD + 1, 1 << 20)
    os.chdir(workdir)
    os.umask(0o077)
    make_undumpable()
    refused = apply_limits(cpu, address_space, nproc, fsize)
    os.write(1, READY_PREFIX + b" " + ",".join(refused).encode() + b"\n")
    run(read_code())


if __name__ == "__main__":
    main()
