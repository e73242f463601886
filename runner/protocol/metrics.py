"""What /metrics says, in the Prometheus text format: the calls as they end, and the pool as it is.

Counters and histograms are updated by the handlers once per call, from the call's `RunResult`;
the pool's gauges are refreshed from a `PoolState` at every scrape, and every `REFRESH_SECONDS`
where several workers serve one port. There prometheus_client's multiprocess mode (its
`PROMETHEUS_MULTIPROC_DIR`, set by the supervisor) adds up every worker's numbers, so a scrape that
reaches any worker reports the whole server. The sessions' memory in that state is the pool's to
measure: off the event loop, at most every few seconds however many scrapes come (`/metrics` needs no
token, so a scrape must cost the server the same whatever the sessions hold).

A registry of our own, not the library's global one: no module-level state, and two servers in one
process (the tests) do not mix their numbers.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from runner.outcome import PoolState, RunResult, SessionsState

# Seconds: a trivial run takes milliseconds, a data run a few hundred, the longest RUNNER_MAX_TIMEOUT.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0)
ANONYMOUS = "-"  # the caller label of a call without a token (stdio, or HTTP without auth)
REFRESH_SECONDS = 1.0
MULTIPROCESS_DIRECTORY = "PROMETHEUS_MULTIPROC_DIR"


class Metrics:
    """The server's metrics (one worker's share of them, with several workers)."""

    def __init__(self, pool_state: Callable[[], Awaitable[PoolState]], max_concurrent: int, pool_size: int) -> None:
        self._state = pool_state
        self.registry = CollectorRegistry()
        self.multiprocess = bool(os.environ.get(MULTIPROCESS_DIRECTORY))
        r = self.registry
        self._calls = Counter(
            "runner_calls", "tools/call results, by status and caller", ["status", "caller"], registry=r
        )
        self._duration = Histogram(
            "runner_run_duration_seconds", "Wall time of runs that started", buckets=DURATION_BUCKETS, registry=r
        )
        self._queue_wait = Histogram(
            "runner_queue_wait_seconds", "Time calls waited for a run slot", buckets=QUEUE_BUCKETS, registry=r
        )
        self._dropped = Counter(
            "runner_output_dropped_bytes", "Bytes of stdout and stderr runs wrote beyond the cap", registry=r
        )
        self._restarts = Counter(
            "runner_zygote_restarts", "Fork-server zygotes started again after one failed", registry=r
        )
        self._tool_calls = Counter(
            "runner_tool_calls",
            "Tool calls runs made through mcp_tools (code mode), by server, tool and status",
            ["server", "tool", "status"],
            registry=r,
        )
        self._tool_duration = Histogram(
            "runner_tool_call_duration_seconds",
            "Wall time of tool calls runs made through mcp_tools, by server",
            ["server"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._egress_refusals = Counter(
            "runner_egress_refusals",
            "Requests runs made through the egress proxy that it refused, by reason (not_listed, address, "
            "malformed, unreachable, busy, budget)",
            ["reason"],
            registry=r,
        )
        self._egress_bytes = Counter(
            "runner_egress_bytes",
            "Bytes runs received (in) and sent (out) through the egress proxy",
            ["direction"],
            registry=r,
        )
        self._restarts_seen = 0
        self._sessions_seen = SessionsState()
        self._session_counts = {
            name: Counter(f"runner_sessions_{name}", documentation, registry=r)
            for name, documentation in (
                ("created", "Sessions started"),
                ("expired", "Sessions ended after RUNNER_SESSION_IDLE_SECONDS unused or RUNNER_SESSION_MAX_SECONDS"),
                ("closed", "Sessions ended by close_session or the server's stop"),
                ("lost", "Sessions ended because their state was lost (a call killed their keeper)"),
                ("rolled_back", "Calls of a session that did not end ok, so the session is as it was before them"),
            )
        }

        def gauge(name: str, documentation: str) -> Gauge:
            return Gauge(name, documentation, registry=r, multiprocess_mode="livesum")

        self._in_flight = gauge("runner_runs_in_flight", "Runs in progress")
        self._queued = gauge("runner_queue_depth", "Calls waiting for a run slot")
        self._ready = gauge("runner_pool_ready", "Interpreters ready for code now")
        self._sessions_open = gauge("runner_sessions_open", "Sessions open now")
        self._session_memory = gauge(
            "runner_sessions_memory_bytes",
            "Proportional set size of the open sessions' processes (pages shared with the zygote counted in part)",
        )
        gauge("runner_max_concurrent", "Runs allowed at once").set(max_concurrent)
        gauge("runner_pool_size", "Interpreters kept ready (RUNNER_POOL_SIZE)").set(pool_size)

    def observe(self, result: RunResult, caller: str | None) -> None:
        """Count one call that ended with `result`."""
        self._calls.labels(status=result.status.value, caller=caller or ANONYMOUS).inc()
        if result.duration:
            self._duration.observe(result.duration)
            self._queue_wait.observe(result.queue_wait)
        dropped = result.stdout.dropped_bytes + result.stderr.dropped_bytes
        if dropped:
            self._dropped.inc(dropped)

    def tool_call(self, server: str, tool: str, status: str, seconds: float) -> None:
        """Count one brokered tool call (code mode)."""
        self._tool_calls.labels(server=server, tool=tool, status=status).inc()
        self._tool_duration.labels(server=server).observe(seconds)

    def egress_refused(self, reason: str) -> None:
        self._egress_refusals.labels(reason=reason).inc()

    def egress_bytes(self, direction: str, count: int) -> None:
        self._egress_bytes.labels(direction=direction).inc(count)

    async def refresh(self) -> None:
        """The pool's gauges from its state now (the sessions' memory as of its last measurement)."""
        state = await self._state()
        self._in_flight.set(state.running)
        self._queued.set(state.waiting)
        self._ready.set(state.ready)
        if state.source_restarts > self._restarts_seen:
            self._restarts.inc(state.source_restarts - self._restarts_seen)
            self._restarts_seen = state.source_restarts
        sessions, seen = state.sessions, self._sessions_seen
        self._sessions_open.set(sessions.open)
        self._session_memory.set(sessions.memory_bytes)
        for name, counter in self._session_counts.items():
            if getattr(sessions, name) > getattr(seen, name):
                counter.inc(getattr(sessions, name) - getattr(seen, name))
        self._sessions_seen = sessions

    async def refresh_forever(self) -> None:
        """Keep this worker's gauges fresh for scrapes that reach another worker."""
        while True:
            await self.refresh()
            await anyio.sleep(REFRESH_SECONDS)

    async def exposition(self) -> bytes:
        """The text a scrape gets: every worker's numbers added up, where there are several."""
        await self.refresh()
        if not self.multiprocess:
            return generate_latest(self.registry)
        combined = CollectorRegistry()
        MultiProcessCollector(combined)  # type: ignore[no-untyped-call]  # untyped in prometheus_client
        return generate_latest(combined)
