"""The long fuzzing run: mutated real training files and generated pathological ones, linted and
fixed (on copies) by `python -m trainlint` in batches. Prints the files, tracebacks, exit-2s, hangs,
runs over the memory bound and peak memory; then the terminal-output check (tests/fuzz/terminal.py:
as many files, with control sequences in their lines and names, in every human-readable format)
counts control characters printed unescaped. Exits 1 when anything failed.

    python benchmarks/fuzz.py --files 5000 --seed 1
    python benchmarks/fuzz.py --files 5000 --seed 1 --no-deep        # without the nesting/chain generators
    python benchmarks/fuzz.py --files 2000 --corpus /work/corpus      # also mutate the .py files of a folder
    python benchmarks/fuzz.py --cache-corruption --files 500 --seed 1  # damage the result cache instead

The deep-nesting and long-chain generators (on by default here, off in the CI run) are what the
engine's per-file containment must survive.

`--cache-corruption` lints projects of generated files with a warm cache whose entries are damaged
in eleven ways (truncated, random bytes, a pickle that would run code, a FIFO, a folder, a link to
/dev/zero, wrong types, a huge file, no read permission, another format, another file's entry; see
tests/fuzz/cache_corruption.py) and counts crashes, hangs, outputs that differ from `--no-cache`
and entries whose code ran.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fuzz.harness import fuzz  # noqa: E402
from tests.fuzz.terminal import terminal_check  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=250, help="files per trainlint run")
    parser.add_argument("--deep", action=argparse.BooleanOptionalAction, default=True, help="deep nesting and long chains")
    parser.add_argument("--huge", action=argparse.BooleanOptionalAction, default=True, help="1 MB lines, 4 and 20 MB files")
    parser.add_argument("--corpus", type=Path, default=None, help="a folder of .py files to mutate too")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one batch may run")
    parser.add_argument("--memory-mb", type=float, default=2048, help="peak memory bound of one batch run")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--pinpoint", action="store_true", help="re-run a failed batch's files one by one")
    parser.add_argument("--terminal", action=argparse.BooleanOptionalAction, default=True, help="the terminal-output check")
    parser.add_argument("--cache-corruption", action="store_true", help="damage the result cache's entries instead")
    parser.add_argument("--project-files", type=int, default=25, help="with --cache-corruption: files per project")
    parser.add_argument("--rounds", type=int, default=5, help="with --cache-corruption: damaged runs per project")
    args = parser.parse_args()
    if args.cache_corruption:
        return corrupt_caches(args)
    extra = sorted(args.corpus.rglob("*.py")) if args.corpus else []
    report = fuzz(args.seed, args.files, args.batch, args.deep, args.huge, extra, args.timeout, args.memory_mb,
                  args.jobs, args.pinpoint, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(f"seed {args.seed}: {report.summary()}")
    print("generated: " + ", ".join(f"{k} {v}" for k, v in sorted(report.kinds.items())))
    for failure in report.failures:
        print(f"- {failure.kind}: {failure.detail.strip()[:1500]}")
        print(f"  files: {', '.join(failure.files[:20])}{' ...' if len(failure.files) > 20 else ''}")
    terminal = None
    if args.terminal:
        terminal = terminal_check(args.seed, args.files, args.batch, args.timeout, progress=lambda line: print(line, file=sys.stderr, flush=True))
        print(terminal.summary())
        for example in terminal.examples[:20]:
            print(f"- {example[:1500]}")
    return 1 if report.failures or (terminal and terminal.failed) else 0


def corrupt_caches(args: argparse.Namespace) -> int:
    from tests.fuzz.cache_corruption import fuzz_cache

    timeout = min(args.timeout, 120)
    report = fuzz_cache(args.seed, args.files, args.project_files, args.rounds, timeout=timeout, jobs=args.jobs,
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(f"seed {args.seed}: {report.summary()}")
    print("damaged: " + ", ".join(f"{k} {v}" for k, v in sorted(report.corrupted.items())))
    for failure in report.failures:
        print(f"- {failure.kind}: {failure.detail.strip()[:1500]}")
        print(f"  entries: {', '.join(failure.files[:20])}{' ...' if len(failure.files) > 20 else ''}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
