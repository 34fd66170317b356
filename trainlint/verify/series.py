"""Per-step series of a run as its report holds them: their summary figures and whether they grow.
No torch here."""

from __future__ import annotations

import statistics
from typing import Any

Report = dict[str, Any]


def series_summary(values: list[float | None]) -> Report:
    """The values with the steps where they were non-finite, and their first, last, median and max finite values."""
    finite = [v for v in values if v is not None and v == v and abs(v) != float("inf")]
    nonfinite = [i + 1 for i, v in enumerate(values) if v is not None and not (v == v and abs(v) != float("inf"))]
    return {
        "values": values,
        "nonfinite_steps": nonfinite,
        "first": finite[0] if finite else None,
        "last": finite[-1] if finite else None,
        "median": statistics.median(finite) if finite else None,
        "max": max(finite) if finite else None,
    }


def growth(values: list[int]) -> float:
    """Growth per step over steps 2..N when the series rises at least 80% of the time, else 0."""
    tail = values[1:] if len(values) > 2 else values
    if len(tail) < 2 or tail[-1] <= tail[0]:
        return 0.0
    rises = sum(1 for a, b in zip(tail, tail[1:]) if b > a)
    return (tail[-1] - tail[0]) / (len(tail) - 1) if rises >= 0.8 * (len(tail) - 1) else 0.0
