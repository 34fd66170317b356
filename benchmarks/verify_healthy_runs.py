"""`trainlint verify run` on healthy training scripts: every problem it reports there is a false alarm.
Prints one row per run and the count of false alarms.

Two sets. `own`: the small scripts of `benchmarks/healthy_scripts/` (an MLP regression whose loss falls
from 8 to 0.005, a classifier, a character language model, a GAN's alternating steps, a fine-tune with a
frozen backbone, LoRA adapters, a VAE, gradient accumulation, a warm-up schedule, DataLoader workers...),
each run for 200 and for 1,000 steps: a whole run, with the large gradients of its first steps and the
converged end. `realworld`: scripts from the pinned repositories of `benchmarks/realworld/` (extracted by
`benchmarks/realworld/extract.py` into `~/.cache/trainlint-realworld`), each run unmodified on the CPU
with small settings and synthetic data where it reads a dataset (written here, in a scratch folder):

    python benchmarks/verify_healthy_runs.py [--set own|realworld|all] [--cache DIR] [--only NAME] [--steps N]

Scripts that need packages this machine lacks (torchvision, gym, matplotlib: pytorch/examples' mnist, dcgan,
imagenet, time_sequence_prediction) are not in the set; pytorch/examples' word_language_model updates its
weights by hand (no optimizer step to count).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

CACHE = Path.home() / ".cache" / "trainlint-realworld"
OWN = Path(__file__).resolve().parent / "healthy_scripts"
OWN_STEPS = (200, 1000)  # each of the own scripts runs this many steps, once each


def _nanogpt_data(work: Path) -> None:
    """Token files for `--dataset=synthetic`: a repeating pattern with noise, vocabulary 64."""
    import numpy as np

    rng = np.random.default_rng(0)
    folder = work / "data" / "synthetic"
    folder.mkdir(parents=True)
    for name, n in (("train.bin", 200_000), ("val.bin", 20_000)):
        tokens = (np.arange(n) * 7 % 64 + rng.integers(0, 3, n)) % 64
        tokens.astype(np.uint16).tofile(folder / name)
    import pickle

    with open(folder / "meta.pkl", "wb") as meta:
        pickle.dump({"vocab_size": 64}, meta)


def _char_text(work: Path) -> None:
    """chargpt reads `input.txt`: a few hundred kB of repetitive text."""
    words = ["the", "model", "learns", "to", "predict", "next", "character", "of", "this", "text"]
    lines = [" ".join(words[(i * j) % len(words)] for j in range(12)) for i in range(4000)]
    lines.append("O God, O God!")  # the prompt it samples from at its first iteration
    (work / "input.txt").write_text("\n".join(lines), encoding="utf-8")


@dataclass
class Case:
    name: str
    repo: str
    folder: str  # copied to the scratch folder, which becomes the working directory
    script: str
    args: list[str] = field(default_factory=list)
    steps: int = 20
    prepare: Callable[[Path], None] | None = None
    pythonpath: bool = False  # the repository root on PYTHONPATH (a package the script imports)
    own: bool = False  # a script of benchmarks/healthy_scripts/, not of a pinned repository


CASES = [
    Case("nanoGPT train.py", "karpathy__nanoGPT", ".", "train.py", [
        "--dataset=synthetic", "--device=cpu", "--compile=False", "--dtype=float32", "--batch_size=8", "--block_size=64",
        "--n_layer=2", "--n_head=2", "--n_embd=64", "--max_iters=200", "--eval_interval=1000", "--eval_iters=2", "--log_interval=10",
        "--always_save_checkpoint=False"], steps=40, prepare=_nanogpt_data),
    Case("minGPT projects/adder", "karpathy__minGPT", ".", "projects/adder/adder.py", [
        "--model.model_type=gpt-nano", "--trainer.batch_size=32", "--trainer.num_workers=0"], steps=40, pythonpath=True),
    Case("minGPT projects/chargpt", "karpathy__minGPT", ".", "projects/chargpt/chargpt.py", [
        "--model.model_type=gpt-nano", "--trainer.batch_size=16", "--trainer.num_workers=2", "--data.block_size=64"],
        steps=30, prepare=_char_text, pythonpath=True),
    Case("jcjohnson nn/two_layer_net_optim.py", "jcjohnson__pytorch-examples", "nn", "two_layer_net_optim.py", steps=60),
    Case("jcjohnson nn/two_layer_net_module.py", "jcjohnson__pytorch-examples", "nn", "two_layer_net_module.py", steps=60),
    Case("jcjohnson nn/dynamic_net.py", "jcjohnson__pytorch-examples", "nn", "dynamic_net.py", steps=60),
    # reference solutions of training exercises: AMP, accumulation, schedulers, validation, early stopping
    *(Case(f"interview_prep {name}", "gapatron__interview_prep", f"practice/week4_pytorch/{folder}", f"{name}.py", steps=50)
      for folder, name in (("06_level3_advanced", "solution_mixed_precision"), ("06_level3_advanced", "solution_gradient_accumulation"),
                           ("07_level4_industry", "solution_lr_scheduler"),
                           ("05_level2_intermediate", "solution_train_val_loop"), ("07_level4_industry", "solution_early_stopping"))),
]


# the own scripts: each trains for 1,200 steps, so that both runs stop at their step count
OWN_CASES = [Case(f"own {path.stem}", "", ".", path.name, own=True) for path in sorted(OWN.glob("*.py"))]


def run_case(case: Case, cache: Path, steps: int | None) -> dict[str, object]:
    source = OWN if case.own else cache / case.repo
    with tempfile.TemporaryDirectory(prefix="trainlint-healthy-") as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(source / case.folder, work)
        if case.prepare is not None:
            case.prepare(work)
        env = dict(os.environ)
        if case.pythonpath:
            env["PYTHONPATH"] = str(work) + os.pathsep + env.get("PYTHONPATH", "")
        command = [sys.executable, "-m", "trainlint", "verify", "run", case.script, "--device", "cpu", "--format", "json",
                   "--steps", str(steps or case.steps), "--timeout", "300", "--", *case.args]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        took = time.perf_counter() - start
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return {"case": case.name, "exit": done.returncode, "error": done.stderr[-500:], "seconds": took}
    return {
        "case": case.name, "exit": done.returncode, "steps": report.get("steps"), "skipped": report.get("skipped_steps"), "seconds": took,
        "message": report.get("message"), "problems": [f"{p['code']} {p['message'][:150]}" for p in report.get("problems") or []],
        "information": [f"{p['code']} {p['message'][:100]}" for p in report.get("information") or []],
        "confirmed": [f"{f['code']} line {f['line']}: {f['verification']['summary'][:110]}" for f in report.get("findings") or []
                      if (f.get("verification") or {}).get("status") == "confirmed"],
        "error": report.get("error"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=("own", "realworld", "all"), default="all", help="which scripts (default: all)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the pinned repositories are extracted")
    parser.add_argument("--only", help="run the cases whose name contains this")
    parser.add_argument("--steps", type=int, help="override each case's steps")
    options = parser.parse_args()
    cases = [(c, s) for c in OWN_CASES for s in ((options.steps,) if options.steps else OWN_STEPS)] if options.set != "realworld" else []
    cases += [(c, options.steps or c.steps) for c in CASES] if options.set != "own" else []
    cases = [(c, s) for c, s in cases if not options.only or options.only in c.name]
    false_alarms = runs = 0
    for case, steps in cases:
        if not case.own and not (options.cache / case.repo).is_dir():
            print(f"{case.name}: skipped, {options.cache / case.repo} is missing (run benchmarks/realworld/extract.py)")
            continue
        row = run_case(case, options.cache, steps)
        runs += 1
        problems = row.get("problems") or []
        false_alarms += len(problems)  # type: ignore[arg-type]
        print(f"{case.name} --steps {steps}: exit {row['exit']}, {row.get('steps')} steps ({row.get('skipped') or 0} skipped), "
              f"{row['seconds']:.1f} s: {row.get('message')}")
        for line in problems:  # type: ignore[union-attr]
            print(f"  PROBLEM {line}")
        for line in row.get("confirmed") or []:  # type: ignore[union-attr]
            print(f"  static finding confirmed: {line}")
        for line in row.get("information") or []:  # type: ignore[union-attr]
            print(f"  info {line}")
        if row.get("error"):
            print(f"  error: {row['error']}")
    scripts = len({c.name for c, _ in cases})
    print(f"\n{scripts} healthy scripts, {runs} runs, {false_alarms} problem(s) reported (each a false alarm)")


if __name__ == "__main__":
    main()
