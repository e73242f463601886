"""Numbers from samples: the nearest-rank percentile, the summary every table reads (p50, p90, p99,
mean, min, max, n) and a ratio that is None when a side is missing, NaN, or a zero divisor.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0-100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    """p50, p90, p99, mean, min, max, n."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "mean": statistics.fmean(values),
        "min": min(values),
        "max": max(values),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing."""
    if a is None or b is None or b == 0 or a != a or b != b:
        return None
    return a / b
