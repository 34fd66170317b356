"""Sparklines: a series of numbers as one line of block characters, with markers under it."""

from __future__ import annotations

import math
from typing import Sequence

BLOCKS = "▁▂▃▄▅▆▇█"
WIDTH = 40


def sparkline(values: Sequence[float | None], width: int = WIDTH) -> str:
    """`values` as at most `width` blocks (each the largest value of its share of the steps);
    `·` where nothing was measured, `×` where the value is not finite."""
    if not values:
        return ""
    buckets = _buckets(len(values), width)
    finite = [v for v in values if v is not None and math.isfinite(v)]
    low, high = (min(finite), max(finite)) if finite else (0.0, 0.0)
    out = []
    for start, end in buckets:
        chunk = values[start:end]
        if any(v is not None and not math.isfinite(v) for v in chunk):
            out.append("×")
            continue
        present = [v for v in chunk if v is not None]
        if not present:
            out.append("·")
            continue
        level = 0 if high == low else round((max(present) - low) / (high - low) * (len(BLOCKS) - 1))
        out.append(BLOCKS[level])
    return "".join(out)


def marker_column(step: int, count: int, width: int = WIDTH) -> int:
    """The column of the sparkline of `count` values that shows `step` (1-based)."""
    for column, (start, end) in enumerate(_buckets(count, width)):
        if start < step <= end:
            return column
    return 0


def _buckets(count: int, width: int) -> list[tuple[int, int]]:
    """[start, end) index ranges: one per value when they fit, else `width` even shares."""
    if count <= width:
        return [(i, i + 1) for i in range(count)]
    return [(i * count // width, (i + 1) * count // width) for i in range(width)]
