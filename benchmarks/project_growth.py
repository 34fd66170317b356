"""Whether trainlint's time grows with the project linearly, and not with what a file does not import.

    python benchmarks/project_growth.py PROJECT [--jobs 2] [--runs 3] [--python PYTHON]

- doubled: PROJECT linted whole, cold, then the same project twice (two copies, each its own package
  under one root): the second should take at most 2.1x the first (the whole-program phase must not
  make every module pay for every other);
- unrelated modules: a one-file run of a module that imports nothing local, in a project of its own,
  then the same after 200 modules that import nothing are added beside it, cold (empty cache) and warm:
  each should stay within 0.05 s of the run without them.

Medians of `--runs` rounds; each line says whether its bound holds. `--python` times the trainlint
installed for another interpreter (a release in its own virtual environment) on the same inputs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARKER = "# the root of a generated project (benchmarks/project_growth.py)\n"
UNRELATED = '''"""A data helper that imports nothing of the project."""
import torch


def normalise(batch: torch.Tensor) -> torch.Tensor:
    mean = batch.mean(dim=0, keepdim=True)
    std = batch.std(dim=0, keepdim=True)
    return (batch - mean) / (std + 1e-6)


def train(model, loader, optimizer):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(normalise(x)), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''
FILLER = '''"""Module {i}: constants and a helper, importing nothing local."""
import math

SCALE_{i} = {i}


def scaled_{i}(x: float) -> float:
    return math.sqrt(x * SCALE_{i} + 1.0)
'''


def _run(python: str, args: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run([python, "-m", "trainlint", *args], cwd=cwd, capture_output=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"trainlint {' '.join(args)} exited {done.returncode}: {done.stderr.decode(errors='replace')[-2000:]}")
    return elapsed


def _median(times: list[float]) -> float:
    return statistics.median(times)


def _copy_python(src: Path, dest: Path) -> int:
    """Copy the Python files of `src` under `dest` (a package); returns the lines copied."""
    lines = 0
    for path in src.rglob("*.py"):
        if any(part.startswith(".") for part in path.relative_to(src).parts):
            continue
        target = dest / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = path.read_bytes()
        target.write_bytes(data)
        lines += data.count(b"\n")
    (dest / "__init__.py").touch()
    return lines


def doubled(python: str, project: Path, jobs: int, runs: int, work: Path) -> bool:
    """Time the project whole and the project twice over; print the ratio."""
    single, double = work / "single", work / "double"
    for root in (single, double):
        root.mkdir()
        (root / "pyproject.toml").write_text(MARKER)
    lines = _copy_python(project, single / "copy_a")
    _copy_python(project, double / "copy_a")
    _copy_python(project, double / "copy_b")
    one: list[float] = []
    two: list[float] = []
    for _ in range(runs):
        one.append(_run(python, [".", "--no-cache", "-j", str(jobs), "-q"], single))
        two.append(_run(python, [".", "--no-cache", "-j", str(jobs), "-q"], double))
    ratio = _median(two) / _median(one)
    holds = ratio <= 2.1
    print(f"project          {lines} lines: {_median(one):.2f} s cold -j {jobs}; doubled {_median(two):.2f} s")
    print(f"doubled / single {ratio:.2f}x (bound 2.1x: {'holds' if holds else 'FAILS'})")
    return holds


def unrelated(python: str, runs: int, work: Path) -> bool:
    """Time a one-file run with and without 200 modules that it does not import, cold and warm."""
    results: dict[tuple[bool, str], list[float]] = {}
    roots = {}
    for crowded in (False, True):
        root = work / ("crowded" if crowded else "alone")
        root.mkdir()
        (root / "pyproject.toml").write_text(MARKER)
        (root / "data_helpers.py").write_text(UNRELATED)
        if crowded:
            (root / "lib").mkdir()
            (root / "lib" / "__init__.py").touch()
            for i in range(200):
                (root / "lib" / f"module_{i}.py").write_text(FILLER.format(i=i))
        roots[crowded] = root
    for _ in range(runs):
        for crowded, root in roots.items():
            cache = root / ".bench-cache"
            shutil.rmtree(cache, ignore_errors=True)
            args = ["data_helpers.py", "--cache-dir", str(cache), "-q"]
            results.setdefault((crowded, "cold"), []).append(_run(python, args, root))
            results.setdefault((crowded, "warm"), []).append(_run(python, args, root))
    holds = True
    for phase in ("cold", "warm"):
        alone, crowded = _median(results[(False, phase)]), _median(results[(True, phase)])
        ok = crowded - alone <= 0.05
        holds &= ok
        print(f"one file, {phase:4}  {alone:.3f} s alone, {crowded:.3f} s beside 200 unrelated modules "
              f"({crowded - alone:+.3f} s; bound 0.05 s: {'holds' if ok else 'FAILS'})")
    return holds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("project", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose trainlint is timed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainlint-growth-") as tmp:
        work = Path(tmp)
        (work / "d").mkdir()
        (work / "u").mkdir()
        ok = doubled(args.python, args.project.resolve(), args.jobs, args.runs, work / "d")
        ok &= unrelated(args.python, args.runs, work / "u")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
