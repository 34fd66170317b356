"""What containment costs the language server per lint: a buffer linted in process, in the server's
worker process (`ResidentWorker` in `trainlint/engine/workers.py`) once warm, the worker's start,
the engine's pre-check alone, and the next lint after the worker crashed.

    python benchmarks/lsp_buffer_latency.py [--copies N] [--repeat R]

The buffer is the examples/ training scripts, concatenated N times. Figures are the best of R runs.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from trainlint.config import Settings
from trainlint.engine.lint import lint_source
from trainlint.lsp.analysis import lint_buffer
from trainlint.engine.workers import ResidentWorker, WorkerFailure
from trainlint.engine.precheck import refuse

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def best(repeat: int, action) -> float:
    """The shortest of `repeat` runs of `action`, in milliseconds."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    source = "\n".join(p.read_text() for p in sorted(EXAMPLES.glob("*.py"))) * args.copies
    settings = Settings()
    lint_source(source, "buffer.py", settings)  # load the rules once, as a running server has
    contained = ResidentWorker(preload=[lint_buffer.__module__])  # as the server starts it
    try:
        start = best(1, lambda: contained.call(lint_buffer, source, "buffer.py", settings))
        warm = best(args.repeat, lambda: contained.call(lint_buffer, source, "buffer.py", settings))
        try:
            contained.call(os.abort)  # a crash: the next call gets a fresh child
        except WorkerFailure:
            pass
        restart = best(1, lambda: contained.call(lint_buffer, source, "buffer.py", settings))
    finally:
        contained.close()
    in_process = best(args.repeat, lambda: lint_source(source, "buffer.py", settings))
    precheck = best(args.repeat, lambda: refuse(source, settings.limits()))
    print(f"buffer: {source.count(chr(10))} lines, {len(source.encode()):,} bytes")
    print(f"in process:           {in_process:8.0f} ms")
    print(f"contained, warm:      {warm:8.0f} ms  ({warm - in_process:+.0f} ms for the pipe and pickling)")
    print(f"contained, first call:{start:8.0f} ms  (starts the child)")
    print(f"after a crash:        {restart:8.0f} ms  (a fresh child)")
    print(f"pre-check:            {precheck:8.0f} ms")


if __name__ == "__main__":
    main()
