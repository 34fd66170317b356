"""How fast trainlint lints, against libcst's own parse of the same files (and TorchFix).

    python benchmarks/lint_speed.py PATH [--jobs N]            in-process lint: files, lines, seconds
    python benchmarks/lint_speed.py PATH --vs-parse [--torchfix] [--one-file FILE]

`--vs-parse` prints, in one run on the same files and cores:
- parse: libcst `parse_module` of every file in a process pool of N workers (start-up included);
- cold: the whole command `trainlint PATH -j N --no-cache`, and its ratio to the parse (`--repeat K`:
  both K times, alternating; medians);
- warm: the whole command again with every file in the cache;
- the prefilter: files parsed, and parsed files that end with no finding;
- one file, whole process, cold (`--no-cache`) and warm: FILE, or the training script of PATH (a loop
  that calls `.backward(` and `.step(`) nearest 300 lines; best of 3;
- scaling: that file concatenated to 1k, 10k and 50k lines, analysed in-process (parse, and the rest);
- peak memory: the largest resident size of the cold command's whole process tree (sampled);
- `--torchfix`: `torchfix --select ALL PATH` in the same run (`--torchfix-bin` names the executable;
  TorchFix pins an older libcst, so install it in its own virtual environment);
- `--baseline SRC`: the cold command again with another checkout's package on PYTHONPATH (the last
  release: `git worktree add /tmp/release a3d15c3`), alternating with this one, with its ratio.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from trainlint.config import Settings
from trainlint.engine.discovery import discover
from trainlint.engine.lint import lint_paths, lint_source, rules_for

ROOT = Path(__file__).resolve().parent.parent


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


def _parse(path: str) -> int:
    import libcst

    try:
        libcst.parse_module(Path(path).read_text(encoding="utf-8"))
        return 1
    except Exception:
        return 0


def _parse_all(files: list[Path], jobs: int) -> tuple[float, float]:
    """Wall and CPU seconds of parsing every file with libcst in a pool of `jobs` processes."""
    cpu = _cpu_children()
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(_parse, [str(f) for f in files], chunksize=4))
    return time.perf_counter() - start, _cpu_children() - cpu


def _tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            children[int(fields[1])].append(int(entry))
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            pass
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += rss.get(current, 0)
        stack.extend(children.get(current, ()))
    return total / 2**20


def _cpu_children() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _command(args: list[str], env: dict[str, str] | None = None, sample: bool = False, src: Path = ROOT) -> tuple[float, float, str]:
    """Wall seconds, peak tree memory (MB, when sampled) and stdout of a command (trainlint from `src`)."""
    global LAST_CPU
    cpu = _cpu_children()
    start = time.perf_counter()
    # (run from the checkout's own root: `python -m` puts the working folder first on sys.path, so a
    # baseline run from this checkout would import this checkout's package, whatever PYTHONPATH says)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=src,
                            env={**os.environ, "PYTHONPATH": str(src), **(env or {})})
    peak = [0.0]
    if sample and os.path.isdir("/proc"):
        def watch() -> None:
            while proc.poll() is None:
                peak[0] = max(peak[0], _tree_rss_mb(proc.pid))
                time.sleep(0.05)

        threading.Thread(target=watch, daemon=True).start()
    out, _ = proc.communicate()
    LAST_CPU = _cpu_children() - cpu
    return time.perf_counter() - start, peak[0], out


LAST_CPU = 0.0  # CPU seconds (user + system, all processes) of the last command


def _trainlint(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainlint", *args]


def _best(times: int, args: list[str], env: dict[str, str] | None = None) -> float:
    return min(_command(args, env)[0] for _ in range(times))


def _training_file(files: list[Path]) -> Path:
    """A training script: a file with a loop that backpropagates and steps an optimizer, nearest 300 lines."""

    def trains(f: Path) -> bool:
        text = f.read_text(encoding="utf-8", errors="replace")
        return ".backward(" in text and ".step(" in text and re.search(r"^\s*for\b", text, re.MULTILINE) is not None

    candidates = [f for f in files if trains(f)]
    named = [f for f in candidates if "train" in f.stem]  # a script, not a library module that mentions both
    return min(named or candidates or files, key=lambda f: (abs(_lines(f) - 300), str(f)))


def vs_parse(args: argparse.Namespace, files: list[Path], lines: int) -> None:
    jobs = args.jobs
    print(f"files            {len(files)}")
    print(f"lines            {lines:,}")
    print(f"jobs             {jobs}")
    # the parse and the cold run alternate, `--repeat` times; the medians are compared
    parses, colds, baselines = [], [], []
    cold_args = _trainlint(str(args.path), "--no-cache", "-j", str(jobs), "--format", "json")
    for _ in range(args.repeat):
        parses.append(_parse_all(files, jobs))
        cold, peak, out = _command(cold_args, sample=True)
        colds.append((cold, LAST_CPU))
        if args.baseline:
            base_wall, base_peak, _ = _command(cold_args, sample=True, src=args.baseline)
            baselines.append((base_wall, LAST_CPU, base_peak))
    parse, parse_cpu = (statistics.median(p[i] for p in parses) for i in (0, 1))
    cold, cold_cpu = (statistics.median(c[i] for c in colds) for i in (0, 1))
    each = f" (median of {args.repeat}; ratios run by run: " + ", ".join(f"{c[1] / p[1]:.2f}" for p, c in zip(parses, colds)) + ")" if args.repeat > 1 else ""
    print(f"parse (libcst)   {parse:.2f} s wall, {parse_cpu:.1f} CPU-s  ({lines / parse:,.0f} lines/s)")
    print(f"cold             {cold:.2f} s wall, {cold_cpu:.1f} CPU-s  = {cold / parse:.2f} x parse (wall), {cold_cpu / parse_cpu:.2f} x (CPU){each}")
    print(f"peak memory      {peak:.0f} MB (whole process tree, cold, -j {jobs})")
    if baselines:
        base, base_cpu, base_peak = (statistics.median(b[i] for b in baselines) for i in (0, 1, 2))
        print(f"baseline cold    {base:.2f} s wall, {base_cpu:.1f} CPU-s, peak {base_peak:.0f} MB ({args.baseline}) = "
              f"{base / parse:.2f} x parse (wall); this checkout {cold / base:.2f} x the baseline (wall), {cold_cpu / base_cpu:.2f} x (CPU)")
    if args.torchfix:  # (beside the cold figures it is measured against, `--cold-only` or not)
        _torchfix(args, cold, cold_cpu)
    if args.cold_only:
        return
    with tempfile.TemporaryDirectory() as cache:
        env = {"TRAINLINT_CACHE_DIR": cache}
        _command(_trainlint(str(args.path), "-j", str(jobs), "--format", "json"), env)
        warm = _best(3, _trainlint(str(args.path), "-j", str(jobs), "--format", "json"), env)
        warm_cpu = LAST_CPU
        warm_text = _best(3, _trainlint(str(args.path), "-j", str(jobs)), env)
    print(f"warm             {warm:.2f} s wall ({warm_cpu:.2f} CPU-s) as json, {warm_text:.2f} s as text (stdout not a terminal)")

    settings = Settings()
    with_findings = {d["path"] for d in json.loads(out or "[]")}
    parsed = [f for f in files if f.suffix == ".py" and rules_for(f.read_text(encoding="utf-8", errors="replace"), str(f), settings)]
    clean = [f for f in parsed if str(f) not in with_findings]
    print(f"prefilter        {len(parsed)} of {len(files)} files parsed; {len(clean)} of those end with no finding")
    counts = collections.Counter(d["code"] for d in json.loads(out or "[]"))
    print("findings         " + (", ".join(f"{c}={n}" for c, n in sorted(counts.items())) or "none"))

    one = args.one_file or _training_file([f for f in files if f.suffix == ".py"])
    one_cold = _best(3, _trainlint(str(one), "--no-cache"))
    _command(_trainlint(str(one), "--no-cache"))
    one_cold_cpu = LAST_CPU
    with tempfile.TemporaryDirectory() as cache:
        env = {"TRAINLINT_CACHE_DIR": cache}
        _command(_trainlint(str(one)), env)
        one_warm = _best(3, _trainlint(str(one)), env)
        _command(_trainlint(str(one)), env)
        one_warm_cpu = LAST_CPU
    print(f"one file         {one} ({_lines(one)} lines), whole process: cold {one_cold:.2f} s wall ({one_cold_cpu:.2f} CPU-s), "
          f"warm {one_warm:.2f} s wall ({one_warm_cpu:.2f} CPU-s)")

    text = one.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        text += "\n"
    import gc

    from trainlint.model.parse import parse_module

    lint_source(text, "warm-up.py", Settings())  # what is computed once per process
    base: tuple[float, float] | None = None
    for target in (1_000, 10_000, 50_000):
        source = text * max(1, round(target / max(1, text.count("\n"))))
        n = source.count("\n")
        gc.collect()
        gc.disable()  # as the lint parses
        start = time.process_time()
        parse_module(source)
        parsed_s = time.process_time() - start
        gc.enable()
        start = time.process_time()
        found = lint_source(source, f"scaled{n}.py", Settings(max_file_size=10**9)).diagnostics
        total = time.process_time() - start
        base = base or (total, total - parsed_s)
        print(f"scaling          {n:>6,} lines: lint {total:6.2f} CPU-s = {total / base[0]:5.1f} x the smallest "
              f"(parse {parsed_s:5.2f} s; the rest {total - parsed_s:5.2f} s = {(total - parsed_s) / base[1]:5.1f} x), "
              f"{len(found)} findings")


def _torchfix(args: argparse.Namespace, cold: float, cold_cpu: float) -> None:
    """`torchfix --select ALL PATH`, timed as trainlint's cold run was."""
    exe = args.torchfix_bin or shutil.which("torchfix")
    if not exe:
        print("torchfix         not installed (pip install torchfix, in its own virtual environment)")
        return
    tf, tf_peak, _ = _command([exe, "--select", "ALL", str(args.path)], sample=True)
    print(f"torchfix         {tf:.2f} s wall, {LAST_CPU:.1f} CPU-s (--select ALL, peak {tf_peak:.0f} MB) = "
          f"{tf / cold:.1f} x trainlint cold (wall), {LAST_CPU / cold_cpu:.1f} x (CPU)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path)
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--vs-parse", action="store_true", help="compare with libcst's parse, warm runs, one file, scaling")
    parser.add_argument("--one-file", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=1, help="run the parse and the cold lint this many times; report medians")
    parser.add_argument("--torchfix", action="store_true", help="time TorchFix --select ALL on the same files")
    parser.add_argument("--torchfix-bin", default=None)
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout's root: its cold run beside this one's")
    parser.add_argument("--cold-only", action="store_true", help="stop after the cold runs (no warm runs, one file or scaling)")
    args = parser.parse_args()
    args.path = args.path.resolve()  # (the commands run from a checkout's root)
    args.one_file = args.one_file.resolve() if args.one_file else None
    args.baseline = args.baseline.resolve() if args.baseline else None
    settings = Settings()
    files = [t.path for t in discover([args.path], settings.root)]
    lines = sum(_lines(f) for f in files)
    if args.vs_parse:
        vs_parse(args, files, lines)
        return
    start = time.perf_counter()
    results = lint_paths([(f, settings) for f in files], args.jobs)
    elapsed = time.perf_counter() - start
    counts = collections.Counter(d.code for r in results for d in r.diagnostics)
    print(f"files          {len(files)}")
    print(f"lines          {lines}")
    print(f"jobs           {args.jobs}")
    print(f"seconds        {elapsed:.2f}")
    print(f"lines/second   {lines / elapsed:,.0f}")
    print(f"internal errs  {sum(r.internal_error for r in results)}")
    print("findings       " + (", ".join(f"{c}={n}" for c, n in sorted(counts.items())) or "none"))


if __name__ == "__main__":
    main()
