"""Every hostile snippet ends with its expected status, and leaves nothing behind.

Per case, on top of the case's own expectations:
- the result validates against the tool's output schema, and the call returns within its timeout
  plus a little;
- processes: within 5 s no live process carries the pool's base directory in its environment or
  command line, every pid the snippet printed is dead (plain mode: they are our pids), and this
  process has no new child, not even a zombie;
- files: the pool's base directory holds nothing new; this test's own directories (with a decoy
  file in each) and a decoy file at the top level of /tmp are as they were; so are the repository
  (the files git lists, tracked or not ignored, and the entries of their directories) and the
  entries at the top level of /tmp. Those two are shared with the rest of the machine, so a change
  there counts only if it still holds 0.5 s after the run (nothing of the run is alive to change
  anything any more) and the same kind of change (same path, or same name up to a random
  temporary suffix) comes back on three runs of the case in a row;
- the server process holds the same file descriptors as before;
- after a case that signals its parent or everything (PID namespace only), the pool still serves.

Cases that expose a known hole in a mode are strict xfails there, with the hole as the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from runner.api import run_code
from runner.errors import ArgumentError
from runner.execution.kept import KEPT_PREFIX
from runner.outcome import RunRequest, RunResult, Status
from runner.protocol.arguments import ArgumentParser
from tests.conftest import REPO
from tests.e2e.adversarial import leaks
from tests.e2e.adversarial.cases import CASES, SANDBOXED, Case, Context
from tests.e2e.adversarial.conftest import Target
from tests.helpers import checked, pids_in

pytestmark = pytest.mark.anyio

LEAK_DEADLINE = 5.0  # the stray sweep kills what left the run's group within about a second
POLL = 0.02
CALL_SLACK = 2.0  # a call may outlast its timeout by this much (kill, reap, drain)
ESCAPE_PREFIX = "/tmp/adversarial-"
SHARED_ATTEMPTS = 3  # runs of a case that must all change the repository or /tmp before it counts
SETTLE = 0.5  # how long a change to the repository or /tmp must hold to be the run's


def _id(case: Case) -> str:
    return case.id.replace("'", "").replace(" ", "_")


@contextlib.contextmanager
def _listener(wanted: bool) -> Iterator[socket.socket | None]:
    if not wanted:
        yield None
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        yield server


def _connections(listener: socket.socket | None) -> int:
    accepted = 0
    while listener is not None:
        try:
            connection, _ = listener.accept()
        except BlockingIOError:
            break
        connection.close()
        accepted += 1
    return accepted


async def _call(target: Target, case: Case, code: str) -> RunResult:
    """What a tools/call does: parse the arguments against the schema and caps, then run."""
    arguments = {"code": code, "timeout": case.timeout, "stdin": case.stdin}
    try:
        args = ArgumentParser(target.config).parse(arguments)
    except ArgumentError:
        # Rejected before any process exists; the public API gives the same result.
        return await run_code(code, case.timeout, "0badc0de", case.stdin, target.config)
    request = RunRequest("0badc0de", args.code, args.timeout, args.stdin)
    return await target.pool.run(request)


def _expectations(case: Case, result: RunResult, context: Context, seconds: float) -> list[str]:
    problems = []
    if result.status not in case.expect:
        problems.append(
            f"status {result.status.value} ({result.message!r}), expected {sorted(s.value for s in case.expect)}"
        )
    if result.request_id != "0badc0de":
        problems.append(f"request_id {result.request_id}")
    if result.status is Status.INVALID_ARGUMENTS and result.exit_code is not None:
        problems.append("a rejected call ran something")
    limit = case.max_call_seconds or case.timeout + CALL_SLACK
    if seconds > limit:
        problems.append(f"the call took {seconds:.2f}s, more than {limit:g}s")
    fields = {
        "stdout": (case.stdout, result.stdout.text),
        "stderr": (case.stderr, result.stderr.text),
        "exit_code": (case.exit_code, result.exit_code),
        "signal": (case.signal, result.signal),
        "stdout_truncated": (case.stdout_truncated, result.stdout.truncated),
        "stderr_truncated": (case.stderr_truncated, result.stderr.truncated),
    }
    for name, (wanted, got) in fields.items():
        if wanted is not None and wanted != got:
            problems.append(f"{name} {_short(got)}, expected {_short(wanted)}")
    for stream, has, lacks in (
        ("stdout", case.stdout_has, case.stdout_lacks),
        ("stderr", case.stderr_has, case.stderr_lacks),
    ):
        text = getattr(result, stream).text
        problems += [f"{stream} lacks {part!r}: {_short(text)}" for part in has if part not in text]
        problems += [f"{stream} has {part!r}: {_short(text)}" for part in lacks if part in text]
    if case.check is not None:
        try:
            case.check(result, context)
        except AssertionError as exc:
            problems.append(f"check {case.check.__qualname__}: {exc}")
    return problems


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 300 else text[:150] + " ... " + text[-150:]


async def _leftover_processes(
    target: Target, infrastructure: set[tuple[int, int]], children_before: set[int], reported: list[int]
) -> list[str]:
    """Wait until nothing of the run lives; return what was still there at the deadline."""

    def survivors() -> list[str]:
        found = [
            f"process {leaks.describe(pid)} of the run"
            for pid, _ in sorted(leaks.processes_marked(target.markers) - infrastructure)
        ]
        found += [f"new child {leaks.describe(pid)}" for pid in leaks.new_children(children_before)]
        if target.mode not in SANDBOXED:  # inside a PID namespace the printed pids are not ours
            found += [f"printed pid {leaks.describe(pid)}" for pid in leaks.reported_survivors(reported)]
        return found

    with anyio.move_on_after(LEAK_DEADLINE):
        while survivors():
            await anyio.sleep(POLL)
    return [f"{what} alive {LEAK_DEADLINE:g}s after the call" for what in survivors()]


def _kill_marked(target: Target, infrastructure: set[tuple[int, int]]) -> None:
    """Leave nothing to the next case even when this one failed (the pool's own processes stay)."""
    for pid, _ in leaks.processes_marked(target.markers) - infrastructure:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


def _clear_new(directory: Path, before: set[str]) -> list[str]:
    """Remove and name what appeared in `directory` (the pool's own entries were there before)."""
    left = sorted(entry.name for entry in directory.iterdir() if entry.name not in before)
    for name in left:
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return left


def _private_trees(target: Target, tmp: Path) -> list[leaks.Tree]:
    """Directories nothing but this test writes to."""
    # The server's kept output (a flood's whole stdout, runner/execution/kept.py) is the server's doing.
    kept = tuple(path for path in target.work_dir.iterdir() if path.name.startswith(KEPT_PREFIX))
    return [leaks.Tree(tmp), leaks.Tree(target.work_dir, exclude=(target.base_dir, *kept))]


def _shared_snapshot(target: Target) -> dict[str, leaks.Entry]:
    """Places other processes of the machine may change at the same time (people editing the
    checkout, other jobs using /tmp)."""
    tmp = leaks.Tree(
        Path("/tmp"), recursive=False, noise=leaks.NOISY_TMP_ENTRIES, own=leaks.OWN_TMP_ENTRIES, contents=False
    )
    if target.checkout is None:
        return leaks.snapshot([leaks.Tree(REPO), tmp])
    return target.checkout.snapshot() | leaks.snapshot([tmp])


async def _lasting_changes(target: Target, before: dict[str, leaks.Entry]) -> list[str]:
    """Changes to the shared places that still hold a moment later. Nothing of the run lives any
    more, so what keeps changing (a log someone appends to, a temporary file someone removes) is
    another process's doing."""
    changes = leaks.file_changes(before, _shared_snapshot(target))
    if changes:
        await anyio.sleep(SETTLE)
        later = set(leaks.file_changes(before, _shared_snapshot(target)))
        changes = [change for change in changes if change in later]
    return changes


class KnownHole(AssertionError):
    """Every problem of the case is explained by a known hole of this mode (an expected failure)."""


@dataclass
class Attempt:
    problems: list[str]
    shared_changes: list[str]  # in the repository or /tmp: possibly another process's doing


async def _attempt(target: Target, case: Case, tmp: Path) -> Attempt:
    """Run the case once with every check around it."""
    token = leaks.SUITE_ID + uuid.uuid4().hex[:12]  # escaped writes to /tmp are told apart by SUITE_ID
    await target.pool.quiesced()  # an earlier run's teardown, after its answer, still holds its pidfd
    fds_before = leaks.open_fds()
    with _listener(case.listener) as listener:
        context = _context(target, tmp, token, listener.getsockname()[1] if listener else 0)
        private = _private_trees(target, tmp)
        private_before = leaks.snapshot(private, target.decoys)
        shared_before = _shared_snapshot(target)
        # The pool's own processes and entries (a fork server, pooled interpreters) are there before.
        infrastructure = leaks.processes_marked(target.markers)
        base_before = {entry.name for entry in target.base_dir.iterdir()}
        children_before = set(leaks.children())
        started = anyio.current_time()
        try:
            with anyio.fail_after(case.timeout + 30):
                result = checked(await _call(target, case, case.render(context)))
                # A run that told its own end was answered before it was reaped: what it leaves is
                # judged once its teardown, which still holds its slot, is done.
                await target.pool.quiesced()
            problems = _expectations(case, result, context, anyio.current_time() - started)
            if _connections(listener):
                problems.append("the listener on the server's loopback got a connection")
            reported = pids_in(result.stdout.text)
            problems += await _leftover_processes(target, infrastructure, children_before, reported)
        finally:
            _kill_marked(target, infrastructure)
    try:
        problems += [f"left in the pool's base directory: {name}" for name in _clear_new(target.base_dir, base_before)]
        problems += [
            f"file outside the run's directory: {change}"
            for change in leaks.file_changes(private_before, leaks.snapshot(private, target.decoys))
        ]
        shared_changes = await _lasting_changes(target, shared_before)
        if leaks.open_fds() != fds_before:
            problems.append(f"server fds {fds_before} -> {leaks.open_fds()}")
        if case.probe_after:
            probe = checked(await target.pool.run(RunRequest("0badc0de", "print('alive')", 5.0)))
            if (probe.status, probe.stdout.text) != (Status.OK, "alive\n"):
                problems.append(f"the pool no longer serves: {probe.status.value} {probe.message}")
    finally:
        for path in Path("/tmp").glob(f"{Path(ESCAPE_PREFIX).name}{token}*"):
            path.unlink(missing_ok=True)
    return Attempt(problems, shared_changes)


def _context(target: Target, tmp: Path, token: str = "", port: int = 0) -> Context:
    return Context(
        tmp=tmp,
        token=token,
        server_pid=target.server_pid,
        port=port,
        mode=target.mode,
        environ_digest=target.environ_digest,
        capabilities=target.capabilities,
    )


@pytest.mark.parametrize("case", CASES, ids=_id)
async def test_a_hostile_run_ends_as_expected_and_leaves_nothing(
    case: Case, target: Target, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if case.needs_pid_namespace and target.mode not in SANDBOXED:
        pytest.skip("without a PID namespace this would signal or trace the test runner or every process")
    if case.needs_pid_namespace and not target.own_pid_namespace:
        pytest.fail(f"sandbox mode {target.mode!r} but runs share this process's PID namespace: not running this")
    holes = [hole for hole in case.holes if hole.applies(_context(target, tmp_path))]
    for hole in holes:
        request.applymarker(pytest.mark.xfail(strict=True, raises=KnownHole, reason=hole.reason))
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "keep.txt").write_text("a run must not change this\n")
    attempt = await _attempt(target, case, tmp_path)
    problems = attempt.problems
    kinds = {leaks.change_kind(change) for change in attempt.shared_changes}
    for _ in range(SHARED_ATTEMPTS - 1):
        if not kinds:
            break
        # The repository and /tmp are shared with the rest of the machine. A snippet does the same
        # thing every time, so a change that is its doing shows up again, in kind, on every run;
        # one that does not was another process's.
        attempt = await _attempt(target, case, tmp_path)
        problems += [problem for problem in attempt.problems if problem not in problems]
        kinds &= {leaks.change_kind(change) for change in attempt.shared_changes}
    problems += [
        f"file outside the run's directory, alike on {SHARED_ATTEMPTS} runs in a row: {change}"
        for change in attempt.shared_changes
        if leaks.change_kind(change) in kinds
    ]
    report = "\n".join([f"{case.id}:", *problems])
    signatures = [signature for hole in holes for signature in hole.signatures]
    if problems and all(any(signature in problem for signature in signatures) for problem in problems):
        raise KnownHole(report)
    assert not problems, report
