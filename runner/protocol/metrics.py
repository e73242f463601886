"""What /metrics says, in the Prometheus text format: the calls as they end, and the pool as it is.

Counters and histograms are updated by the handlers once per call, from the call's `RunResult`;
the pool's gauges are read at scrape time from a `PoolState`, so they cannot drift from the pool.
A registry of our own, not the library's global one: no module-level state, and two servers in one
process (the tests) do not mix their numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from runner.outcome import PoolState, RunResult

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds: a trivial run takes milliseconds, a data run a few hundred, the longest RUNNER_MAX_TIMEOUT.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0)
ANONYMOUS = "-"  # the caller label of a call without a token (stdio, or HTTP without auth)


class Metrics:
    """The server's metrics registry."""

    def __init__(self, pool_state: Callable[[], PoolState], max_concurrent: int, pool_size: int) -> None:
        self.registry = CollectorRegistry()
        self._calls = Counter(
            "runner_calls", "tools/call results, by status and caller", ["status", "caller"], registry=self.registry
        )
        self._duration = Histogram(
            "runner_run_duration_seconds",
            "Wall time of runs that started",
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self._queue_wait = Histogram(
            "runner_queue_wait_seconds",
            "Time calls waited for a run slot",
            buckets=QUEUE_BUCKETS,
            registry=self.registry,
        )
        self._dropped = Counter(
            "runner_output_dropped_bytes",
            "Bytes of stdout and stderr runs wrote beyond the cap",
            registry=self.registry,
        )
        self.registry.register(_PoolCollector(pool_state, max_concurrent, pool_size))

    def observe(self, result: RunResult, caller: str | None) -> None:
        """Count one call that ended with `result`."""
        self._calls.labels(status=result.status.value, caller=caller or ANONYMOUS).inc()
        if result.duration:
            self._duration.observe(result.duration)
            self._queue_wait.observe(result.queue_wait)
        dropped = result.stdout.dropped_bytes + result.stderr.dropped_bytes
        if dropped:
            self._dropped.inc(dropped)

    def exposition(self) -> bytes:
        """The text a scrape gets."""
        return generate_latest(self.registry)


class _PoolCollector(Collector):
    def __init__(self, pool_state: Callable[[], PoolState], max_concurrent: int, pool_size: int) -> None:
        self._state = pool_state
        self._max_concurrent = max_concurrent
        self._pool_size = pool_size

    def collect(self) -> Iterator[Metric]:
        state = self._state()
        yield GaugeMetricFamily("runner_runs_in_flight", "Runs in progress", value=state.running)
        yield GaugeMetricFamily("runner_queue_depth", "Calls waiting for a run slot", value=state.waiting)
        yield GaugeMetricFamily("runner_max_concurrent", "Runs allowed at once", value=self._max_concurrent)
        yield GaugeMetricFamily("runner_pool_size", "Interpreters kept ready (RUNNER_POOL_SIZE)", value=self._pool_size)
        yield GaugeMetricFamily("runner_pool_ready", "Interpreters ready for code now", value=state.ready)
        yield CounterMetricFamily(
            "runner_zygote_restarts", "Fork-server zygotes started again after one failed", value=state.source_restarts
        )
