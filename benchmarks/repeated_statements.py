"""How analysis time grows with the number of repeated statements in one loop body.

    python benchmarks/repeated_statements.py [--counts 100,200,400,800] [--repeat 3]

Each file is a training loop whose body repeats one statement n times:

    for x in data:
        loss = model(x)
        total += loss        # n times (or another statement, below)
        loss.backward()
        optimizer.step()

Every repetition is a finding with a fix, so the per-finding work (where the finding is, whether its
fix is safe) is what grows. Printed per statement kind and n: the best of `--repeat` in-process
analyses (`lint_source`: parse, model, rules, positions; CPU seconds), the time per statement, and the
ratio to the previous n (2.0 for each doubling is linear, 4.0 quadratic).
"""

from __future__ import annotations

import argparse
import time

from trainlint.config import Settings
from trainlint.engine.lint import lint_source

STATEMENTS = {
    "total += loss": "    total += loss\n",
    "losses.append(loss)": "    losses.append(loss)\n",
    "t<i> += loss": "    t{i} += loss\n",  # a different accumulator each time
}


def source(statement: str, count: int) -> str:
    """The training loop with `statement` repeated `count` times in its body."""
    body = "".join(statement.format(i=i) for i in range(count))
    return "import torch\nfor x in data:\n    loss = model(x)\n" + body + "    loss.backward()\n    optimizer.step()\n"


def measure(text: str, repeat: int) -> tuple[float, int]:
    """Best CPU seconds of `repeat` analyses, and the number of findings."""
    best, found = float("inf"), 0
    for _ in range(repeat):
        start = time.process_time()
        result = lint_source(text, "train.py", Settings())
        best = min(best, time.process_time() - start)
        found = len(result.diagnostics)
    return best, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="100,200,400,800", help="repetitions, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="analyses per file (best is kept)")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    lint_source(source(STATEMENTS["total += loss"], 2), "train.py", Settings())  # imports, warm-up
    print(f"{'statement':<22}{'n':>6}{'findings':>10}{'seconds':>10}{'ms/stmt':>9}{'ratio':>7}")
    for name, statement in STATEMENTS.items():
        previous = None
        for count in counts:
            seconds, found = measure(source(statement, count), args.repeat)
            ratio = f"{seconds / previous:.1f}" if previous else ""
            print(f"{name:<22}{count:>6}{found:>10}{seconds:>10.3f}{1000 * seconds / count:>9.2f}{ratio:>7}")
            previous = seconds


if __name__ == "__main__":
    main()
