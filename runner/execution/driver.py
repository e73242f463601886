"""Driving one run to its end: code in, stdin fed, its output read (`output`), the deadline, the
kill, and the facts handed to `classify`.

The run's interpreter is ready (its limits applied) when it gets here. Whatever happens, its whole
process group has been sent SIGKILL when `drive` returns. A run that told its own end (once its
output was flushed and closed: `harvest.ended`) is answered without waiting for the kernel to tear
it down; the pool reaps it afterwards, while the run still holds its slot. Any other run is reaped
here. The driver closes the run's stdin once it is fed; closing the rest of its fds, removing its
cgroup and deleting its directory is the teardown's (`teardown.end_interpreter`, through
`Teardowns.end`), which the call's path (`calls.py`) takes on every way out of a run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable

import anyio

from runner.config import KeptConfig, LimitsConfig, ReturnsConfig
from runner.execution.capture import OutputCap, keep_bytes_for, render_stream
from runner.execution.channel import RunChannel
from runner.execution.classify import ProcessEnd, RunLimits, classify
from runner.execution.kept import OutputStore, Spool
from runner.execution.output import RunOutput
from runner.execution.report import Returned, parse_report
from runner.execution.toolcalls import ToolCalls
from runner.execution.usage import UsageSamples, wait_exit_sampling
from runner.fdio import write_all
from runner.inrun.wire import Budgets, frame_inputs, frame_job
from runner.logs import log_event
from runner.outcome import (
    Attachment,
    EgressGateway,
    Omitted,
    Progress,
    RunEgress,
    RunRequest,
    RunResult,
    RunTools,
    ToolGateway,
)
from runner.processes.child import Child

# How long output may still drain after the run's group is dead: only a process that left the
# group (setsid) can hold a pipe that long, and it does not get to keep the call waiting.
EXIT_GRACE = 0.25
KILL_GRACE = 2.0
# A run's tool calls must end this long after the run's own time (whose clock starts once it has its
# code, a moment after theirs): its timeout kills it first, cancelling them, so a run that waits on a
# tool ends `timeout`, naming it, and never a moment earlier on its own, told the call had no time left
# (found by a soak: 3 runs in 6,000, `error`, for the same code that timed out in the others).
TOOLS_AFTER_TIMEOUT = 1.0
# Progress: the first after a second, then at most once a second while output comes, and at least
# every PROGRESS_HEARTBEAT seconds when none does (a client that resets its timeout on progress then
# waits through a run that prints nothing). Each carries the latest lines of output, bounded.
PROGRESS_INTERVAL = 1.0
PROGRESS_HEARTBEAT = 4.0
PROGRESS_TAIL_LINES = 20
PROGRESS_TAIL_BYTES = 2048

ProgressCallback = Callable[[Progress], Awaitable[None]]


def returns_of(returns: ReturnsConfig, kept: KeptConfig) -> Budgets:
    """What a run may return besides its output: images (none without a byte budget), bytes per
    image, bytes in all, bytes of files that are not images, and the last value's characters."""
    images = returns.max_images if returns.max_returned_bytes else 0
    # What is over those is sent whole to be kept and linked, as far as one stream may be kept.
    kept_bytes = kept.per_call_bytes if returns.max_returned_bytes else 0
    return Budgets(
        images,
        returns.max_image_bytes,
        returns.max_returned_bytes,
        returns.max_files_bytes,
        returns.max_output_chars,
        kept_bytes,
    )


class RunDriver:
    """Drives runs under one configuration; `unresponsive` is called for a run that outlives SIGKILL."""

    def __init__(
        self,
        limits: LimitsConfig,
        returns: ReturnsConfig,
        kept: KeptConfig,
        logger: logging.Logger,
        unresponsive: Callable[[Child], Awaitable[None]],
        store: OutputStore | None = None,
        tools: ToolGateway | None = None,
        egress: EgressGateway | None = None,
    ) -> None:
        # The run's limits, what the answer returns, and what is kept beyond it.
        self._limits, self._returns = limits, returns
        self._store = store if store is not None and store.enabled else None
        self._log = logger
        self._unresponsive = unresponsive
        self._tools = tools  # code mode's broker, where the server has downstream tools
        self._egress = egress  # the egress proxy, where RUNNER_EGRESS_ALLOW lists hosts
        self._keep_bytes = keep_bytes_for(self._returns.max_output_chars)
        budgets = returns_of(self._returns, kept)
        # Nothing over the budgets is sent where nothing can be kept.
        self._budgets = budgets if self._store is not None else budgets.replace(kept_bytes=0)

    def run_limits(self, timeout: float) -> RunLimits:
        """The limits a run with this timeout is held to."""
        c = self._limits
        return RunLimits(timeout, c.max_cpu_seconds, c.max_memory_mb, c.max_file_size_mb, c.max_output_bytes)

    async def drive(
        self,
        child: Child,
        request: RunRequest,
        queue_wait: float,
        on_progress: ProgressCallback | None,
        paths: tuple[str, ...] = (),
    ) -> RunResult:
        """Run `request` in the ready interpreter `child` and return its result; a stream the result
        shows only the head and tail of is kept whole in the store, and the result links it. `paths`:
        the package directories provided for it (`provided`), for its sys.path."""
        store = self._store
        spools = (store.spool(), store.spool()) if store is not None else (None, None)
        try:
            result, linked = await self._drive(child, request, queue_wait, on_progress, spools, paths)
            if store is None:
                return result
            kept = []
            for name, spool, shown in (("stdout", spools[0], result.stdout), ("stderr", spools[1], result.stderr)):
                if spool is not None and shown.dropped_bytes:
                    stream = store.keep_stream(request.caller, name, spool)
                    if stream is not None:
                        kept.append(stream)
            lost = []
            for file in linked:
                one = store.keep_file(request.caller, file.name, file.data, file.mime_type, file.note)
                if one is not None:
                    kept.append(one)
                else:
                    lost.append(Omitted(file.name, len(file.data), f"{file.note}; and it could not be kept"))
            if not kept and not lost:
                return result
            return dataclasses.replace(result, kept=tuple(kept), omitted=(*result.omitted, *lost))
        finally:
            for spool in spools:
                if spool is not None:
                    spool.discard()  # what the store did not take

    async def _drive(
        self,
        child: Child,
        request: RunRequest,
        queue_wait: float,
        on_progress: ProgressCallback | None,
        spools: tuple[Spool | None, Spool | None],
        paths: tuple[str, ...],
    ) -> tuple[RunResult, tuple[Attachment, ...]]:
        out, err, timed_out = OutputCap(self._keep_bytes), OutputCap(self._keep_bytes), False
        deadline = anyio.current_time() + request.timeout + TOOLS_AFTER_TIMEOUT
        tools = self._tools.for_run(request.request_id, request.caller, deadline) if self._tools is not None else None
        # A table for a caller whose client shows one; else the budgets every call has.
        budgets = self._budgets.replace(table_rows=request.table_rows) if request.table_rows else self._budgets
        channel = RunChannel(budgets.report_bytes, tools.limit_bytes if tools is not None else 0)
        output = RunOutput(child, out, err, self._limits.max_output_bytes, channel, spools=spools)
        # Sampled only where wait4 cannot tell (see `usage`); then once while the interpreter still
        # waits for its code, so a run that ends within a millisecond still gets a number.
        samples = UsageSamples(child) if UsageSamples.needed(child) else None
        if samples is not None:
            samples.take()
        try:
            async with anyio.create_task_group() as tg:
                proxied = _serve_egress(self._egress, tg, child, request)
                with contextlib.suppress(BrokenPipeError):
                    # A run that died before reading all its code (say, out of memory) ends below
                    # like any other, with what it printed.
                    inputs = frame_inputs([(f.path, f.data) for f in request.files])
                    job = frame_job(request.code.encode("utf-8"), inputs, budgets, paths, tools is not None)
                    await write_all(child.code, job)
                started = anyio.current_time()
                # Logged once the run has its code, not before: the line's formatting and write then
                # overlap the run instead of lengthening the call (some 0.02-0.05 ms, caches cold).
                fields = child.log_fields()  # a session's call: its anchor's (`KeptCall`)
                log_event(self._log, logging.INFO, "run started", request.request_id, **fields, queue_wait=queue_wait)
                watching = child.cgroup is not None and child.cgroup.event >= 0
                if watching:
                    tg.start_soon(_end_at_oom, child)
                if request.stdin:
                    tg.start_soon(_feed_stdin, child, request.stdin.encode("utf-8"))
                else:
                    child.close_fd(child.stdin)  # EOF at once; no task needed
                reported = anyio.CancelScope()
                returned: list[Returned] = []
                if tools is not None:
                    output.on_tool = ToolCalls(tg, child, tools, self._log, request.request_id).take
                tg.start_soon(self._read_output, output, budgets, returned, reported)
                if on_progress is not None:
                    tg.start_soon(self._report_progress, request, started, out, err, on_progress, tools)
                with reported:
                    timed_out = not await wait_exit_sampling(child, samples, started + request.timeout)
                calling = tools.calling if timed_out and tools is not None else ""  # what its time ran out on
                if proxied is not None:
                    # The run is over: its proxy stops at once, not once its output has drained. In the
                    # namespaced mode the listener is its network namespace's, which a next run may be lent.
                    proxied[1].cancel()
                if timed_out:
                    child.kill_group()
                    await self._wait_after_kill(child)
                duration = anyio.current_time() - started
                # Whatever the run left in its group dies with it, before the leader is reaped (by the
                # pool, after the answer, when the run told its own end).
                child.kill_group()
                told = returned[0].end if reported.cancel_called and returned else None
                if told is not None:
                    returncode, cpu, reaped_peak = told.status, told.cpu_seconds, told.peak_memory_bytes
                else:
                    returncode, cpu, reaped_peak = child.reap()
                with anyio.move_on_after(EXIT_GRACE):
                    await output.done.wait()
                if (
                    request.stdin
                    or on_progress is not None
                    or watching
                    or tools is not None
                    or proxied is not None
                    or not output.done.is_set()
                ):
                    tg.cancel_scope.cancel()  # not free (anyio formats the task's repr): only if needed
        finally:
            if tools is not None:
                # Every worker is done: a call the run's end cancelled, or took before it began, is told.
                tools.end(timed_out)
        got = returned[0] if returned else parse_report(output.report, budgets)
        # wait4's count carries a spawned run's spawner's (usage.py); the run's own, when it sent one
        # (first or not), never does, and counts its tmpfs (harvest.ended).
        peak = reaped_peak if reaped_peak > child.inherited_peak else (samples.peak if samples else None)
        if got.end is not None:
            peak = max(peak or 0, got.end.peak_memory_bytes)
        cpu = max(cpu, samples.cpu if samples else 0.0)
        end = ProcessEnd(
            returncode,
            cpu,
            peak or 0,
            timed_out=timed_out,
            calling=calling,
            output_exceeded=output.output_exceeded,
            oom_kills=child.whole_run_oom_kills(),
            limit_met=got.end.limit if got.end is not None else None,
        )
        status, message = classify(end, err.parts()[1] or err.parts()[0], self.run_limits(request.timeout))
        result = RunResult(
            request_id=request.request_id,
            status=status,
            message=message,
            exit_code=returncode,
            stdout=render_stream(out, self._returns.max_output_chars),
            stderr=render_stream(err, self._returns.max_output_chars),
            duration=duration,
            cpu_seconds=cpu,
            peak_memory_bytes=peak,
            queue_wait=queue_wait,
            result=got.result,
            result_chars=got.result_chars,
            attachments=got.attachments,
            omitted=got.omitted,
            network=proxied[0].reached() if proxied is not None else (),
            table=got.table,
            note=proxied[0].spent() if proxied else "",
        )
        return result, got.linked

    async def _read_output(
        self, output: RunOutput, budgets: Budgets, returned: list[Returned], reported: anyio.CancelScope
    ) -> None:
        """Read the run's streams and report; once the report is whole and both streams are closed,
        if it tells the run's end, stop waiting for the exit (`reported`): the kernel's teardown of
        the process then happens after the answer."""
        await output.read_all()
        if output.report_whole:
            returned.append(parse_report(output.report, budgets))
            if returned[0].end is not None and not output.output_exceeded:
                reported.cancel()

    async def _wait_after_kill(self, child: Child) -> None:
        """Wait for a SIGKILLed run to be gone; one that is not is the source's to deal with."""
        with anyio.move_on_after(KILL_GRACE):
            await child.wait_exit()
        if child.still_running():
            await self._unresponsive(child)

    async def _report_progress(
        self,
        request: RunRequest,
        started: float,
        out: OutputCap,
        err: OutputCap,
        on_progress: ProgressCallback,
        tools: RunTools | None = None,
    ) -> None:
        sent_at, sent_total, sent_calling = -PROGRESS_HEARTBEAT, -1, ""
        while True:
            await anyio.sleep(PROGRESS_INTERVAL)
            now = anyio.current_time()
            calling = tools.calling if tools is not None else ""
            quiet = out.total + err.total == sent_total and calling == sent_calling
            if quiet and now - sent_at < PROGRESS_HEARTBEAT - PROGRESS_INTERVAL / 2:
                continue
            sent_calling = calling
            sent_at, sent_total = now, out.total + err.total
            # Both streams share the bytes when both have output.
            tail_bytes = PROGRESS_TAIL_BYTES // 2 if out.total and err.total else PROGRESS_TAIL_BYTES
            progress = Progress(
                elapsed=now - started,
                timeout=request.timeout,
                stdout_bytes=out.total,
                stderr_bytes=err.total,
                stdout_tail=out.latest_lines(PROGRESS_TAIL_LINES, tail_bytes),
                stderr_tail=err.latest_lines(PROGRESS_TAIL_LINES, tail_bytes),
                calling=calling,
            )
            try:
                await on_progress(progress)
            except Exception:
                # A client that cannot take notifications still gets its result.
                self._log.warning(
                    "progress report failed; no more for this run",
                    exc_info=True,
                    extra={"request_id": request.request_id, "fields": {}},
                )
                return


async def _end_at_oom(child: Child) -> None:
    """cgroup v1 (no memory.oom.group): when the kernel signals an OOM in the run's cgroup, the whole
    run ends (its group killed: bubblewrap and its namespace go, and everything in it)."""
    assert child.cgroup is not None
    while True:
        await anyio.wait_readable(child.cgroup.event)
        if child.cgroup.out_of_memory():
            child.kill_group()
            return


def _serve_egress(
    gateway: EgressGateway | None, tg: anyio.abc.TaskGroup, child: Child, request: RunRequest
) -> tuple[RunEgress, anyio.CancelScope] | None:
    """The run's connections through the egress proxy, served on the listener its interpreter handed
    over until the scope returned is cancelled, at the run's end (every connection closes with it);
    None without egress."""
    listener = child.listener_for_run() if gateway is not None else None
    if gateway is None or listener is None:
        return None
    egress = gateway.for_run(request.request_id, request.caller)
    serving = anyio.CancelScope()

    async def serve() -> None:
        with serving:
            await egress.serve(listener)

    tg.start_soon(serve)
    return egress, serving


async def _feed_stdin(child: Child, data: bytes) -> None:
    try:
        await write_all(child.stdin, data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the run closed its stdin or ended: what it did not read is not our problem
    finally:
        child.close_fd(child.stdin)
