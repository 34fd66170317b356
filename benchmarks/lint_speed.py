"""Lint a directory and print files, lines, seconds and lines/second.

    python benchmarks/lint_speed.py PATH [--jobs N]

Runs the engine in-process (no output rendering) so the figure is the analysis cost; the whole
command (`trainlint PATH`) adds start-up and printing.
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from pathlib import Path

from trainlint.config import Settings
from trainlint.discovery import discover
from trainlint.engine import lint_paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", type=Path)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    settings = Settings()
    targets = discover([args.path], settings.root)
    lines = 0
    for t in targets:
        try:
            with open(t.path, "rb") as fh:
                lines += sum(1 for _ in fh)
        except OSError:
            pass
    start = time.perf_counter()
    results = lint_paths([(t.path, settings) for t in targets], args.jobs)
    elapsed = time.perf_counter() - start
    counts = collections.Counter(d.code for r in results for d in r.diagnostics)
    internal = sum(r.internal_error for r in results)
    print(f"files          {len(targets)}")
    print(f"lines          {lines}")
    print(f"jobs           {args.jobs}")
    print(f"seconds        {elapsed:.2f}")
    print(f"lines/second   {lines / elapsed:,.0f}")
    print(f"internal errs  {internal}")
    print("findings       " + (", ".join(f"{c}={n}" for c, n in sorted(counts.items())) or "none"))


if __name__ == "__main__":
    main()
