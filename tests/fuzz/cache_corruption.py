"""Cache corruption: a warm result cache damaged in one of the ways a shared or hostile cache folder
can be, after which a run must print exactly what `--no-cache` prints, with no traceback, no hang,
and no code from an entry run.

Each project is a batch of generated files (see harness.py) plus a training script that imports a
local module (so that entries record dependencies). It is linted once without the cache (the
reference) and once to fill the cache; then, round after round, a random share of its entries is
damaged, each in a random way of `CORRUPTIONS`, and the project is linted again.

Used by benchmarks/fuzz.py (`--cache-corruption`).
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tests.fuzz.harness import Failure, _run, make_cases, seed_sources
from trainlint.engine.cache import FORMAT, MAX_ENTRY_BYTES, sealed
from trainlint.engine.cache_folder import load_key

MARKER = "entry-code-ran"
LOCAL_MODULE = "import torch\n\nclass StepTimer:\n    def click(self):\n        torch.cuda.synchronize()\n"
SCRIPT = (
    "import torch\nfrom timing import StepTimer\n\ntimer = StepTimer()\nfor x, y in loader:\n"
    "    loss = criterion(model(x.to(device)), y)\n    loss.backward()\n    optimizer.step()\n"
    "    optimizer.zero_grad()\n    timer.click()\n    print(loss.item())\n"
)


class _Payload:
    """Unpickling this runs `code`."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        return (exec, (self.code,))


def _content(entry: Path) -> Any:
    """An entry's JSON: a result's behind the line that holds its MAC, a group's (named by its hash) whole."""
    raw = entry.read_bytes()
    return json.loads(raw if raw.startswith(b"{") else raw.split(b"\n", 1)[1])


def _signed(entry: Path, data: Any) -> None:
    """Write `data` as the entry, a result signed with the runs' key: damage that only the JSON checks
    can catch (a MAC they lack is a miss before any of them)."""
    text = json.dumps(data).encode()
    entry.write_bytes(text if entry.read_bytes().startswith(b"{") else sealed(load_key(), entry.name, text))


def _replace(entry: Path) -> None:
    """Remove an entry (or a folder put in its place) so that something else can take its place."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


def _truncate(rng: random.Random, entry: Path, folder: Path) -> None:
    data = entry.read_bytes()
    entry.write_bytes(data[: rng.randrange(max(1, len(data)))])


def _random_bytes(rng: random.Random, entry: Path, folder: Path) -> None:
    entry.write_bytes(bytes(rng.randrange(256) for _ in range(rng.choice((1, 16, 300, 5000)))))


def _pickle(rng: random.Random, entry: Path, folder: Path) -> None:
    code = f"open({str(folder / MARKER)!r}, 'a').write('ran'); raise SystemExit(3)"
    payload = pickle.dumps(_Payload(code), protocol=rng.choice((2, 4, 5)))
    entry.write_bytes(payload)
    old = entry.parents[2] / f"v{FORMAT - 1}" / entry.parent.name / entry.name  # an earlier format's place
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_bytes(payload)


def _fifo(rng: random.Random, entry: Path, folder: Path) -> None:
    _replace(entry)
    os.mkfifo(entry)


def _directory(rng: random.Random, entry: Path, folder: Path) -> None:
    data = entry.read_bytes()
    _replace(entry)
    entry.mkdir()
    (entry / "inside").write_bytes(data)


def _dev_zero(rng: random.Random, entry: Path, folder: Path) -> None:
    _replace(entry)
    entry.symlink_to("/dev/zero")


def _wrong_types(rng: random.Random, entry: Path, folder: Path) -> None:
    """One value somewhere in the entry replaced by a value of another type (or a list shortened)."""
    data = _content(entry)
    slots: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            slots.append((node, key))
            walk(value)

    walk(data)
    others = ["3", 3, -1, 10**12, 2.5, True, None, [], {}, [1, 2], {"a": 1}, "error", float("nan")]
    if not slots or rng.random() < 0.1:
        data = rng.choice(others)
    else:
        node, key = rng.choice(slots)
        old = node[key]
        # of another type, and not an integer or a list where None was (an absent cell or fix):
        # that would be a well-formed entry saying something else, a forgery rather than damage
        node[key] = rng.choice([v for v in others if type(v) is not type(old) and not (old is None and type(v) in (int, list))])
    _signed(entry, data)


def _huge(rng: random.Random, entry: Path, folder: Path) -> None:
    data = entry.read_bytes()
    with open(entry, "r+b") as fh:
        fh.truncate(MAX_ENTRY_BYTES + 1 + rng.randrange(1 << 20))  # sparse: costs no disk
        fh.seek(0)
        fh.write(data)


def _unreadable(rng: random.Random, entry: Path, folder: Path) -> None:
    entry.chmod(0)  # the owner (root) may still read it: then it is a good entry


def _old_version(rng: random.Random, entry: Path, folder: Path) -> None:
    data = _content(entry)
    data["trainlint"] = rng.choice((FORMAT - 1, FORMAT + 1, str(FORMAT), float(FORMAT)))
    _signed(entry, data)


def _other_entry(rng: random.Random, entry: Path, folder: Path) -> None:
    """A well-formed entry of another file (signed for its own name: a miss)."""
    others = [p for p in _entries(entry.parents[2]) if p != entry and p.stat().st_size <= MAX_ENTRY_BYTES]
    if others:
        entry.write_bytes(rng.choice(others).read_bytes())


CORRUPTIONS: dict[str, Callable[[random.Random, Path, Path], None]] = {
    "truncate": _truncate,
    "random-bytes": _random_bytes,
    "pickle": _pickle,
    "fifo": _fifo,
    "directory": _directory,
    "dev-zero": _dev_zero,
    "wrong-types": _wrong_types,
    "huge": _huge,
    "unreadable": _unreadable,
    "old-version": _old_version,
    "other-entry": _other_entry,
}


@dataclass
class CacheReport:
    projects: int = 0
    runs: int = 0
    corrupted: dict[str, int] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, kind: str) -> int:
        return sum(1 for f in self.failures if f.kind == kind)

    def summary(self) -> str:
        return (
            f"projects {self.projects}, damaged runs {self.runs}, entries damaged {sum(self.corrupted.values())}, "
            f"crashes {self.count('crash')}, hangs {self.count('hang')}, mismatches {self.count('mismatch')}, "
            f"entry code run {self.count('code-ran')}, {self.seconds:.0f} s"
        )


def _entries(cache: Path) -> list[Path]:
    """The entries that are regular files (a FIFO or a folder left by an earlier round stays as it is)."""
    folder = cache / f"v{FORMAT}"
    return sorted(p for p in folder.glob("*/*") if not p.name.startswith(".tmp") and p.is_file() and not p.is_symlink())


def _lint(folder: Path, cache: Path | None, jobs: int, timeout: float) -> tuple[int | None, str, str]:
    args = [sys.executable, "-m", "trainlint", ".", "--format", "json", "-j", str(jobs)]
    args += ["--cache-dir", str(cache)] if cache is not None else ["--no-cache"]
    code, out, err, _ = _run(args, folder, timeout)
    return code, out, err


def fuzz_cache(seed: int, count: int, per_project: int = 25, rounds: int = 5, share: float = 0.4,
               timeout: float = 120, jobs: int = 2, progress: Callable[[str], None] | None = None) -> CacheReport:
    """`count` generated files in projects of `per_project`, each cache damaged `rounds` times."""
    started = time.monotonic()
    rng = random.Random(seed)
    cases = make_cases(seed, count, seed_sources(), deep=False, huge=False)
    report = CacheReport()
    with tempfile.TemporaryDirectory(prefix="trainlint-cache-fuzz-") as tmp:
        while chunk := list(itertools.islice(cases, per_project)):
            folder, cache = Path(tmp) / f"project{report.projects:04d}", Path(tmp) / f"cache{report.projects:04d}"
            folder.mkdir()
            (folder / "pyproject.toml").write_text("")
            (folder / "timing.py").write_text(LOCAL_MODULE)
            (folder / "loop.py").write_text(SCRIPT)
            for case in chunk:
                (folder / case.name).write_bytes(case.data)
            reference = _lint(folder, None, jobs, timeout)
            _lint(folder, cache, jobs, timeout)  # fills the cache
            for _ in range(rounds):
                damaged = []
                for entry in _entries(cache):
                    if rng.random() < share:
                        kind = rng.choice(sorted(CORRUPTIONS))
                        try:
                            CORRUPTIONS[kind](rng, entry, folder)
                        except (OSError, ValueError, IndexError, KeyError, TypeError):  # already damaged in a way this one cannot build on
                            continue
                        report.corrupted[kind] = report.corrupted.get(kind, 0) + 1
                        damaged.append(f"{entry.name[:12]}:{kind}")
                run = _lint(folder, cache, jobs, timeout)
                report.runs += 1
                _check(report, folder, reference, run, damaged)
            report.projects += 1
            shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(cache, ignore_errors=True)
            if progress:
                progress(report.summary())
    report.seconds = time.monotonic() - started
    return report


def _check(report: CacheReport, folder: Path, reference: tuple[int | None, str, str], run: tuple[int | None, str, str],
           damaged: list[str]) -> None:
    where = f"{folder.name}, {len(damaged)} entries damaged"
    code, out, err = run
    if (folder / MARKER).exists():
        report.failures.append(Failure("code-ran", f"{where}: an entry's code ran", damaged))
        (folder / MARKER).unlink()
    if code is None:
        report.failures.append(Failure("hang", f"{where}: still running after the timeout", damaged))
    elif "Traceback (most recent call last)" in err or code not in (0, 1):
        report.failures.append(Failure("crash", f"{where}: exit {code}: {err[-2000:]}", damaged))
    elif (code, out) != reference[:2]:
        report.failures.append(Failure("mismatch", f"{where}: exit {code} vs {reference[0]}, output differs", damaged))
