"""How long `trainlint FILE` takes as pre-commit runs it: one ~300-line training script, whole process.

    python benchmarks/one_file_latency.py [--runs N] [--file FILE ...] [--python PYTHON]

- standalone, cold: the script alone in a folder, with an empty cache folder each run;
- standalone, warm: the same, its result already in the cache;
- in a project, warm: the script inside a generated 200-module project that it imports from, after
  one `trainlint .` has cached the project's summaries (the run checks every dependency it recorded);
- in a project, edited: the same after the script changed (its callers' summaries come from the cache).

Medians (and ranges) of N rounds, each timing every case once, of this checkout's `python -m trainlint`, or with `--python` of the
trainlint installed for that interpreter (a virtual environment with the built wheel installed, as
users have it: a development install's import hook alone costs a start-up ~15 ms). Start-up times
vary a lot between machines (and on a shared one, from minute to minute), so the same run also
prints this machine's `python -c pass` and `python -c "import libcst"`, and each case as a multiple
of the latter: compare figures across machines by those.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lsp_latency import DEFAULT_FILES, SCRIPTS, make_project, training_script  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "pass": "python -c pass",
    "libcst": "python -c 'import libcst'",
    "cold": "standalone, cold",
    "warm": "standalone, warm",
    "project": "in a 200-module project, warm",
    "edited": "in a 200-module project, edited",
}


def _wall(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr}")
    return elapsed


def _summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} s (range {min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--file", type=Path, nargs="*", help="the script (default: the ~300-line fixtures)")
    parser.add_argument("--python", help="an interpreter with trainlint installed (default: this checkout's)")
    args = parser.parse_args()
    script = training_script(args.file or [SCRIPTS / name for name in DEFAULT_FILES])
    env = {**os.environ} if args.python else {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # (start-up as installed: with bytecode)
    python = args.python or sys.executable
    trainlint = [python, "-m", "trainlint"]
    runs = args.runs

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # (in a folder of its own: a project without a marker reads the scripts beside its folder, which
        # the edited case below changes every round)
        alone = work / "standalone" / "alone"
        alone.mkdir(parents=True)
        (alone / "train.py").write_text(script)
        warm_env = {**env, "TRAINLINT_CACHE_DIR": str(work / "warm")}
        _wall([*trainlint, "train.py"], alone, warm_env)
        project = work / "project"
        path = make_project(project, script)
        project_env = {**env, "TRAINLINT_CACHE_DIR": str(work / "project-cache")}
        _wall([*trainlint, "."], project, project_env)
        _wall([*trainlint, path.name], project, project_env)

        # a round times every case once: a shared machine's slow minutes then weigh on all alike
        cases: dict[str, list[float]] = {name: [] for name in CASES}
        for i in range(runs):
            cases["pass"].append(_wall([python, "-c", "pass"], work, env))
            cases["libcst"].append(_wall([python, "-c", "import libcst"], work, env))
            cases["cold"].append(_wall([*trainlint, "train.py"], alone, {**env, "TRAINLINT_CACHE_DIR": str(work / f"cold{i}")}))
            cases["warm"].append(_wall([*trainlint, "train.py"], alone, warm_env))
            cases["project"].append(_wall([*trainlint, path.name], project, project_env))
            path.write_text(path.read_text() + f"\n# edit {i}\n")
            cases["edited"].append(_wall([*trainlint, path.name], project, project_env))
            _wall([*trainlint, path.name], project, project_env)  # (the next round's warm run finds this text)

        reference = statistics.median(cases["libcst"])
        for name, label in CASES.items():
            values = cases[name]
            line = f"{label:32s} {_summary(values)}"
            if name not in ("pass", "libcst"):  # each case also as a multiple of this machine's `import libcst`
                line += f" = {statistics.median(values) / reference:.2f}x import libcst"
            print(line + (f"   ({script.count(chr(10))} lines)" if name == "cold" else ""))


if __name__ == "__main__":
    main()
