"""One line more for a run that failed in a way a model would otherwise repeat: a module this server
cannot give it, so that it does not try `pip install` next (what the module is not, in the package
environment, in the wheelhouse, and what the wheelhouse offers instead, bounded); or IPython's syntax,
which notebooks taught it (`!cmd`, `%magic`, `display()`, a top-level `await`), so that it writes plain
Python next; or a network its sandbox has not got, so that it does not retry the URL (what runs have:
nothing, or the server's proxy to the hosts listed); or a limit it met that its error does not name (a
thread or process it could not start, its /tmp full, a file too large), so that it does not retry as it was.

The stderr a run wrote is read here as hostile text, only its last lines, by anchored patterns (pure
functions); a run that prints such lines itself gets the same note, which only says what the server
has, or what plain Python is. `Hints` applies them to a result, looking the module up only on that path.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from runner.outcome import RunResult, Status

# The interpreter's last line for an uncaught ModuleNotFoundError; a dotted name's first part is the
# distribution's module. Only the stream's end is looked at: stderr is capped, not trusted.
_MISSING = re.compile(r"(?:^|\n)ModuleNotFoundError: No module named '([A-Za-z_]\w{0,99})(?:\.[\w.]{0,200})?'\n?\Z")
TAIL_CHARS = 400
SHOWN = 20


# What pandas ends on where an optional dependency is missing (found by a first hour: `to_markdown`, and
# `to_parquet`, whose engines' errors follow its own line, ended without the note `to_excel` had).
_OPTIONAL = re.compile(
    r"(?:^|\n)ImportError: (?:`Import ([A-Za-z_]\w{0,99})` failed\.|Missing optional dependency '([A-Za-z_]\w{0,99})')"
    r"[^\n]{0,300}\n?\Z"
)
_ENGINE = re.compile(r"(?:^|\n)ImportError: Unable to find a usable engine; tried using: '([A-Za-z_]\w{0,99})'")
ENGINE_TAIL_CHARS = 1_200  # the engines' own errors follow that line


def missing_module(stderr: str) -> str | None:
    """The top-level module an uncaught ModuleNotFoundError at the end of `stderr` names, or the one
    pandas says it could not import (the first engine it tried, where pandas says its import failed:
    found by a second look, an engine there that did not fit the run's memory was said not installed),
    or None."""
    found = _MISSING.search(stderr[-TAIL_CHARS:]) or _OPTIONAL.search(stderr[-TAIL_CHARS:])
    if found:
        return found[1] or found[2]
    tail = stderr[-ENGINE_TAIL_CHARS:]
    engine = _ENGINE.search(tail)
    return engine[1] if engine and f"\n - `Import {engine[1]}` failed." in tail else None


# IPython's syntax, as the interpreter ends its error here: the offending line (shown indented by
# four) starting with ! or %, a top-level await, or IPython's display(), each on the stream's last lines.
_SHELL_OR_MAGIC = re.compile(r"\n    [!%][^\n]{0,300}\n +\^+\nSyntaxError: invalid syntax\n?\Z")
_TOP_LEVEL_AWAIT = re.compile(r"(?:^|\n)SyntaxError: 'await' outside function\n?\Z")
_DISPLAY = re.compile(r"(?:^|\n)NameError: name 'display' is not defined[^\n]{0,100}\n?\Z")
_MATPLOTLIB_MAGIC = re.compile(r"\n    %matplotlib\b[^\n]{0,300}\n +\^+\nSyntaxError: invalid syntax\n?\Z")
NOTEBOOK_NOTES = (
    (
        _MATPLOTLIB_MAGIC,
        "%matplotlib is not needed here: drop the line, and the figures the code makes come back as images",
    ),
    (
        _SHELL_OR_MAGIC,
        "a line starting with ! or % is neither a shell command nor a magic; for a command call "
        "subprocess.run([...]), for a package just import it",
    ),
    (
        _TOP_LEVEL_AWAIT,
        "await works only inside a coroutine; wrap the code in async def main() and asyncio.run(main())",
    ),
    (_DISPLAY, "display() is not defined; end the code with the expression to get its repr() back, or print() it"),
)


def notebook_note(stderr: str) -> str:
    """The note for a run whose error at the end of `stderr` is IPython's syntax, or ""."""
    tail = stderr[-TAIL_CHARS:]
    return next(
        ("this is plain Python, not IPython: " + said for found, said in NOTEBOOK_NOTES if found.search(tail)), ""
    )


# What a run's last line says when it tried the network where its sandbox has none: a name not resolved
# (no resolver in its own network namespace), no route (only its own loopback), or a loopback address
# refused (its own loopback, not the host's: found by a first hour, a raw socket to the proxied host's
# 127.0.0.1 ended on a bare ConnectionRefusedError), as Python, urllib, requests and httpx end on it.
_NO_NETWORK = re.compile(
    r"(?:^|\n)[^\n]*(?:Temporary failure in name resolution|Name or service not known|Network is unreachable"
    r"|No address associated with hostname|\[Errno 111\] Connection refused)[^\n]*\n?\Z"
)


def network_note(stderr: str, said: str) -> str:
    """`said` (what runs' network is, `no_network_note`) for a run whose error at the end of `stderr` is
    the network it has not got, or ""."""
    return said if said and _NO_NETWORK.search(stderr[-TAIL_CHARS:]) else ""


def no_network_note(egress: Sequence[str]) -> str:
    """What a sandboxed run without a network of its own is told when it tried one: none at all, or the
    server's proxy and the hosts it lets through (`egress`: RUNNER_EGRESS_ALLOW's entries), bounded."""
    if not egress:
        return "runs have no network on this server (each is sandboxed without one; RUNNER_EGRESS_ALLOW is unset)"
    shown = ", ".join(egress[:SHOWN]) + (f" and {len(egress) - SHOWN} more" if len(egress) > SHOWN else "")
    return (
        "runs reach the network only through the server's proxy (HTTP_PROXY and HTTPS_PROXY are set: urllib, "
        f"requests, httpx and pip use it; raw sockets and DNS do not), to these hosts alone: {shown}"
    )


# A limit the run met, as its last line says it: a thread or a process it could not start (RLIMIT_NPROC
# counts threads too: "can't start new thread", or EAGAIN from a fork), its /tmp full, or a file past
# RLIMIT_FSIZE (Python ignores SIGXFSZ: the write fails). A run's own EAGAIN elsewhere (a non-blocking
# socket) ends on the same BlockingIOError: only one raised where a process is made is taken.
_NO_THREAD = re.compile(r"(?:^|\n)RuntimeError: can't start new thread\n?\Z")
_NO_FORK = re.compile(
    r"(?:fork|_fork_exec|posix_spawn|_launch)\b[^\n]{0,200}\n(?:[^\n]{0,300}\n){0,3}"
    r"BlockingIOError: \[Errno 11\] Resource temporarily unavailable\n?\Z"
)
_DISK_FULL = re.compile(r"(?:^|\n)[^\n]{0,100}\[Errno 28\] No space left on device[^\n]{0,300}\n?\Z")
_FILE_TOO_LARGE = re.compile(r"(?:^|\n)[^\n]{0,100}\[Errno 27\] File too large[^\n]{0,300}\n?\Z")
# A library the address space had no room for (RLIMIT_AS counts every library a process maps: found by a
# first hour, scikit-learn, statsmodels, seaborn and pyarrow in one run at 256 MiB).
# pandas lists each engine's own error on a line of its own (" - ..."), before the end; pyarrow's
# allocator says ArrowMemoryError.
_NO_ROOM = re.compile(
    r"(?:^|\n)(?:ImportError: |OSError: | - )[^\n]{0,300}(?:failed to map segment from shared object"
    r"|cannot map zero-fill pages|[Cc]annot allocate memory)[^\n]{0,300}\n(?:[^\n]{0,400}\n){0,3}[^\n]{0,400}\Z"
    r"|(?:^|\n)pyarrow\.lib\.ArrowMemoryError: [^\n]{0,300}\n?\Z"
)


@dataclass(frozen=True)
class LimitNotes:
    """What a run that met one of its limits is told of it (0: not said): its processes and threads,
    its /tmp's MiB (a sandboxed run's own tmpfs; 0 where /tmp is the host's), one file's MiB, and its
    memory's, where a library found no room."""

    processes: int = 0
    tmp_mb: int = 0
    file_mb: int = 0
    memory_mb: int = 0

    def note(self, stderr: str) -> str:
        """The note for a run whose error at the end of `stderr` is one of these limits, or ""."""
        tail = stderr[-TAIL_CHARS:]
        if self.processes and (_NO_THREAD.search(tail) or _NO_FORK.search(tail)):
            return (
                f"the run reached its {self.processes} processes and threads (RUNNER_MAX_PROCESSES): "
                "each thread counts; use fewer, or a pool of a few workers"
            )
        if self.tmp_mb and _DISK_FULL.search(tail):
            return (
                f"the run's files filled its /tmp ({self.tmp_mb} MiB for all of them, RUNNER_SANDBOX_TMP_MB): "
                "write less, or delete what it no longer needs"
            )
        if self.file_mb and _FILE_TOO_LARGE.search(tail):
            return f"a file passed {self.file_mb} MiB, the most one file of a run may hold (RUNNER_MAX_FILE_SIZE_MB)"
        if self.memory_mb and _NO_ROOM.search(stderr[-ENGINE_TAIL_CHARS:]):
            return (
                f"a library did not fit in the run's {self.memory_mb} MiB of address space (RUNNER_MAX_MEMORY_MB: "
                "every library a process loads counts): import fewer large libraries in one run"
            )
        return ""


def missing_module_note(
    module: str,
    present: Callable[[str], bool],
    wheelhouse: Mapping[str, str],
    offered: Sequence[str],
    packaged: bool = True,
) -> str:
    """The note for a run that could not import `module`: "" when it is there (`present`: in the
    standard library or the package environment; what failed was within it); else whether the
    wheelhouse has it (`wheelhouse`: module -> distribution) but the call did not ask for it, or that
    nothing here has it, with at most SHOWN of the modules the wheelhouse `offered`."""
    if present(module):
        return ""
    if module in wheelhouse:
        return (
            f"{module!r} is in the wheelhouse ({wheelhouse[module]}) but was not installed for this call: "
            f"the code imports it by a name no import statement shows; name {wheelhouse[module]!r} in 'packages'"
        )
    if not packaged and not offered:  # a first hour: "neither in the package environment" of a server with none
        return (
            f"no module {module!r} here: this server's runs have the standard library only (RUNNER_PACKAGES "
            "and RUNNER_WHEELHOUSE are empty); nothing can be installed"
        )
    said = f"no module {module!r} here: it is neither in the package environment nor in the wheelhouse"
    if not offered:
        return said + ", and this server has no wheelhouse; nothing can be installed"
    shown = ", ".join(offered[:SHOWN]) + (f" and {len(offered) - SHOWN} more" if len(offered) > SHOWN else "")
    return f"{said}, and nothing else can be installed; the wheelhouse offers {shown}"


@dataclass(frozen=True)
class Hints:
    """What a result's note is made from, decided when the pool opens: the package environment's
    site-packages, the wheelhouse's module -> distribution map, what it offers a user, what runs
    are told of their network when they tried one they have not got ("" where they have the host's),
    and of the limits they met (`LimitNotes`)."""

    site: str = ""
    wheelhouse: Mapping[str, str] = dataclasses.field(default_factory=dict)
    offered: tuple[str, ...] = ()
    network: str = ""
    limits: LimitNotes = LimitNotes()

    def noted(self, result: RunResult) -> RunResult:
        """`result`, with a note when it is an error that ended on a module this server cannot give, on
        IPython's syntax, or on a network the run has not got (found in a first hour: `!ls`, `%pip`,
        `display(df)` and a top-level await ended on a bare SyntaxError or NameError, a URL on a bare
        "Temporary failure in name resolution")."""
        if result.status is not Status.ERROR:
            return result
        module = missing_module(result.stderr.text)
        present, house, offered = self._present, self.wheelhouse, self.offered
        note = missing_module_note(module, present, house, offered, bool(self.site)) if module else ""
        note = note or notebook_note(result.stderr.text) or network_note(result.stderr.text, self.network)
        note = note or self.limits.note(result.stderr.text)
        # After what the server said already (the network budget spent), not instead.
        return dataclasses.replace(result, note="; ".join(filter(None, (result.note, note)))) if note else result

    def _present(self, module: str) -> bool:
        if module in sys.stdlib_module_names:
            return True
        return bool(self.site) and importlib.machinery.PathFinder.find_spec(module, [self.site]) is not None
