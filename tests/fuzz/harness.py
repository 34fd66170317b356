"""A fuzzing harness for the whole command: mutated real training files and generated pathological
sources, linted (and fixed, on copies) by `python -m trainlint` in batches.

A batch fails on a Python traceback, exit code 2, a run past its time limit (a hang), or a peak
memory (the process and its workers, from `os.wait4`) over the bound; `--fix` must also never turn
a file that compiles into one that does not. The same seed gives the same files.

Used by tests/fuzz/test_fuzz_short.py (a short seeded run in CI) and benchmarks/fuzz.py (the long run).
"""

from __future__ import annotations

import ast
import codecs
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import tokenize
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

ROOT = Path(__file__).resolve().parents[2]
MB = 1 << 20


# -- seeds: real training code -----------------------------------------------------------------------


def seed_sources(extra: Iterable[Path] = ()) -> list[str]:
    """Training code to mutate: the repository's examples, every rule's snippets, and `extra` files."""
    from trainlint.rules import ALL_RULES

    texts = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "examples").rglob("*.py"))]
    for rule in ALL_RULES:
        for snippet in (rule.example, rule.fixed_example, *rule.valid, *rule.invalid):
            if snippet and snippet.strip():
                texts.append(textwrap.dedent(snippet))
    for path in extra:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if len(data) < 400_000:
            texts.append(data.decode("utf-8", errors="replace"))
    return texts


# -- mutations of a real file --------------------------------------------------------------------------


def _tokens(text: str) -> list[str]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [t.string for t in tokenize.generate_tokens(iter(text.splitlines(True)).__next__) if t.string]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return text.split()


def truncate(rng: random.Random, text: str) -> bytes:
    data = text.encode()
    return data[: rng.randrange(len(data) + 1)]


def swap_tokens(rng: random.Random, text: str) -> bytes:
    """Swap, drop or duplicate tokens at the place of a random token (keeps lines mostly intact)."""
    lines = text.splitlines(True)
    for _ in range(rng.randint(1, 4)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        words = lines[i].split(" ")
        j = rng.randrange(len(words))
        action = rng.choice(("swap", "drop", "dup", "foreign"))
        if action == "swap" and len(words) > 1:
            k = rng.randrange(len(words))
            words[j], words[k] = words[k], words[j]
        elif action == "drop":
            del words[j]
        elif action == "dup":
            words.insert(j, words[j])
        else:
            words.insert(j, rng.choice(_tokens(text) or ["x"]))
        lines[i] = " ".join(words)
    return "".join(lines).encode()


def splice(rng: random.Random, text: str, other: str) -> bytes:
    """Lines of another training file dropped into this one, indented like the spot they land on."""
    lines, donor = text.splitlines(True), other.splitlines(True)
    if not donor:
        return text.encode()
    start = rng.randrange(len(donor))
    piece = donor[start : start + rng.randint(1, 12)]
    at = rng.randrange(len(lines) + 1)
    indent = ""
    if at < len(lines):
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    return "".join(lines[:at] + [indent + p.lstrip(" ") if rng.random() < 0.5 else p for p in piece] + lines[at:]).encode()


def invalid_utf8(rng: random.Random, text: str) -> bytes:
    data = bytearray(text.encode())
    for _ in range(rng.randint(1, 3)):
        data[rng.randrange(len(data) + 1) : 0] = rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80", b"\xfe\xff"))
    return bytes(data)


def with_bom(rng: random.Random, text: str) -> bytes:
    return codecs.BOM_UTF8 + text.encode()


def utf16(rng: random.Random, text: str) -> bytes:
    return text.encode(rng.choice(("utf-16", "utf-16-le", "utf-16-be")))


def line_endings(rng: random.Random, text: str) -> bytes:
    kind = rng.choice(("\r\n", "\r", "mixed"))
    if kind != "mixed":
        return text.replace("\n", kind).encode()
    return "".join(line.rstrip("\n") + rng.choice(("\n", "\r\n", "\r")) for line in text.splitlines(True)).encode()


def form_feeds(rng: random.Random, text: str) -> bytes:
    lines = text.splitlines(True)
    for _ in range(rng.randint(1, 5)):
        if lines:
            i = rng.randrange(len(lines))
            lines[i] = "\x0c" + lines[i] if rng.random() < 0.7 else lines[i].replace(" ", "\x0c", 1)
    return "".join(lines).encode()


def nul_bytes(rng: random.Random, text: str) -> bytes:
    data = bytearray(text.encode())
    for _ in range(rng.randint(1, 3)):
        data[rng.randrange(len(data) + 1) : 0] = b"\x00"
    return bytes(data)


def mixed_tabs(rng: random.Random, text: str) -> bytes:
    return "".join(
        line.replace("    ", "\t", 1) if line.startswith("    ") and rng.random() < 0.4 else line
        for line in text.splitlines(True)
    ).encode()


def encoding_cookie(rng: random.Random, text: str) -> bytes:
    name = rng.choice(("latin-1", "cp1252", "utf-8", "ascii", "no-such-codec", "utf-16"))
    return f"# -*- coding: {name} -*-\n".encode() + text.encode("latin-1", errors="replace")


MUTATIONS: dict[str, Callable[[random.Random, str], bytes]] = {
    f.__name__: f
    for f in (truncate, swap_tokens, invalid_utf8, with_bom, utf16, line_endings, form_feeds, nul_bytes,
              mixed_tabs, encoding_cookie)
}


# -- generated pathological files ------------------------------------------------------------------------

STEP = "for x in loader:\n    optimizer.zero_grad()\n    loss = model(x)\n    loss.backward()\n    optimizer.step()\n"


def long_line(rng: random.Random, size: int) -> bytes:
    """A long line inside a training script: a string literal or a comment of `size` characters."""
    line = "s = '" + "a" * size + "'\n" if rng.random() < 0.5 else "# " + "x" * size + "\n"
    return ("import torch\n" + line + STEP).encode()


def long_chain(rng: random.Random, length: int) -> bytes:
    """A flat chain of `length` links: a sum, a boolean chain, a comparison chain, implicit string concatenation."""
    kind = rng.choice(("sum", "and", "compare", "strings"))
    if kind == "sum":
        line = "total = " + " + ".join(["loss"] * length)
    elif kind == "and":
        line = "ok = " + " and ".join(f"a{i % 10}" for i in range(length))
    elif kind == "compare":
        line = "ok = " + " < ".join(["a"] * length)
    else:
        line = "s = (" + " ".join(["'ab'"] * length) + ")"
    return ("import torch\n" + line + "\n" + STEP).encode()


def big_file(rng: random.Random, size: int) -> bytes:
    """A file of `size` bytes of repeated training steps (over max-file-size: refused)."""
    unit = STEP.replace("x in loader", f"x{rng.randrange(9)} in loader")
    return ("import torch\n" + unit * (size // len(unit) + 1)).encode()[:size]


def deep_nesting(rng: random.Random, depth: int) -> bytes:
    """Nesting that the native parser recurses on: parentheses, lists, dicts, and/or, elif, calls."""
    kind = rng.choice(("parens", "list", "dict", "boolop", "elif", "call", "attr", "subscript", "lambda", "ifexp"))
    if kind == "parens":
        body = "x = " + "(" * depth + "1" + ")" * depth
    elif kind == "list":
        body = "x = " + "[" * depth + "]" * depth
    elif kind == "dict":
        body = "x = " + "{'a': " * depth + "1" + "}" * depth
    elif kind == "boolop":
        body = "x = " + " and ".join(f"(a{i} or b{i})" for i in range(depth))
    elif kind == "elif":
        body = "if a == 0:\n    pass\n" + "".join(f"elif a == {i}:\n    pass\n" for i in range(1, depth))
    elif kind == "call":
        body = "x = " + "f(" * depth + ")" * depth
    elif kind == "attr":
        body = "x = model" + ".a" * depth
    elif kind == "subscript":
        body = "x = y" + "[0]" * depth
    elif kind == "lambda":
        body = "f = " + "lambda: " * depth + "0"
    else:
        body = "x = " + "a if b else " * depth + "c"
    return ("import torch\n" + body + "\n" + STEP).encode()


def deep_json(rng: random.Random, depth: int) -> bytes:
    inner = rng.choice(("[", '{"a": ')) * depth
    closing = "".join("]" if c == "[" else "}" for c in reversed([ch for ch in inner if ch in "[{"]))
    return ('{"fp16": {"enabled": true}, "x": ' + inner + "1" * (inner.endswith(": ")) + closing + "}").encode()


def mutated_json(rng: random.Random, text: str) -> bytes:
    config = {"train_batch_size": 64, "fp16": {"enabled": rng.choice((True, False, "auto"))}}
    if rng.random() < 0.5:
        config["gradient_clipping"] = rng.choice((0, 1.0, "auto", None, [1], {"a": 1}))
    data = json.dumps(config).encode()
    return rng.choice((data, data[: rng.randrange(len(data) + 1)], codecs.BOM_UTF8 + data, data.replace(b"{", b"[", 1)))


# -- running --------------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str  # the file name in the batch folder
    kind: str  # which mutation or generator made it
    data: bytes


@dataclass
class Failure:
    kind: str  # "traceback", "exit-2", "hang", "memory", "fix-broke-file"
    detail: str
    files: list[str] = field(default_factory=list)


@dataclass
class Report:
    files: int = 0
    batches: int = 0
    peak_rss_mb: float = 0.0
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str) -> int:
        return sum(1 for f in self.failures if f.kind == kind)

    def summary(self) -> str:
        return (
            f"files {self.files}, batches {self.batches}, tracebacks {self.count('traceback')}, "
            f"exit-2 {self.count('exit-2')}, hangs {self.count('hang')}, over-memory {self.count('memory')}, "
            f"fixes that broke a file {self.count('fix-broke-file')}, peak memory {self.peak_rss_mb:.0f} MB, "
            f"{self.seconds:.0f} s"
        )


def make_cases(seed: int, count: int, sources: list[str], deep: bool, huge: bool) -> Iterator[Case]:
    """`count` files, made one at a time: about two thirds mutations of real files, the rest
    generated pathological ones."""
    rng = random.Random(seed)
    generators: list[tuple[str, Callable[[], tuple[str, bytes]]]] = [
        ("mutated_json", lambda: ("ds_config.json", mutated_json(rng, ""))),
        ("long_line_100k", lambda: ("train.py", long_line(rng, 100_000))),
        ("splice", lambda: ("train.py", splice(rng, rng.choice(sources), rng.choice(sources)))),
        ("nesting_shallow", lambda: ("train.py", deep_nesting(rng, rng.randint(20, 90)))),
    ]
    if huge:
        generators += [
            ("long_line_1mb", lambda: ("train.py", long_line(rng, MB))),
            ("long_chain_short", lambda: ("train.py", long_chain(rng, rng.choice((50, 200))))),
            ("big_file_20mb", lambda: ("train.py", big_file(rng, 20 * MB))),
        ]
    if deep:
        generators += [
            ("big_file_4mb", lambda: ("train.py", big_file(rng, 4 * MB))),
            ("long_chain", lambda: ("train.py", long_chain(rng, rng.choice((1_000, 10_000, 100_000))))),
            ("nesting_deep", lambda: ("train.py", deep_nesting(rng, rng.choice((1_000, 1_500, 3_000, 10_000))))),
            ("json_deep", lambda: ("ds_config.json", deep_json(rng, rng.choice((1_000, 10_000, 100_000))))),
        ]
    for i in range(count):
        if rng.random() < 0.68:
            kind = rng.choice(sorted(MUTATIONS))
            data = MUTATIONS[kind](rng, rng.choice(sources))
            name = "train.py"
        else:
            kind, make = rng.choice(generators)
            name, data = make()
        stem, _, ext = name.rpartition(".")
        yield Case(f"{i:05d}_{kind}_{stem}.{ext}" if ext == "py" else f"ds_{i:05d}_{kind}.json", kind, data)


def _session_rss_mb(session: int) -> float:
    """Resident memory (MB) of all processes of a session: the command and its workers together."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # field 6 of stat, counted after the command name
            total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return total / MB


def _run(args: list[str], cwd: Path, timeout: float) -> tuple[int | None, str, str, float]:
    """Run a command in its own session; (exit code or None on timeout, stdout, stderr, peak memory MB).

    The peak is the larger of `os.wait4`'s ru_maxrss (the largest single process, once the command
    has waited for its workers) and the session's summed resident memory, sampled while it runs.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        code: int | None = None
        peak = 0.0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                code = os.waitstatus_to_exitcode(status)
                break
            peak = max(peak, _session_rss_mb(proc.pid))
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.1)
        proc.returncode = -1 if code is None else code
        peak = max(peak, usage.ru_maxrss / 1024)
        out.seek(0)
        err.seek(0)
        return code, out.read().decode(errors="replace"), err.read().decode(errors="replace"), peak


def _compiles(data: bytes) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(data, "<fuzz>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False


def run_batch(cases: list[Case], workdir: Path, timeout: float, memory_mb: float, jobs: int, report: Report) -> None:
    """Lint one batch, then `--fix --unsafe-fixes` its copy; record every failure in `report`."""
    folder = workdir / f"batch{report.batches:04d}"
    folder.mkdir()
    for case in cases:
        (folder / case.name).write_bytes(case.data)
        report.kinds[case.kind] = report.kinds.get(case.kind, 0) + 1
        if len(case.data) > 2 * MB:
            # not kept: a forked child starts with this process's memory, which would count as its peak
            case.data = b""
    base = [sys.executable, "-m", "trainlint", ".", "--format", "json", "--select", "ALL", "-j", str(jobs)]
    for label, extra in (("lint", []), ("fix", ["--fix", "--unsafe-fixes"])):
        code, stdout, stderr, rss = _run(base + extra, folder, timeout)
        report.peak_rss_mb = max(report.peak_rss_mb, rss)
        names = [c.name for c in cases]
        where = f"{label} of {folder.name}"
        if code is None:
            report.failures.append(Failure("hang", f"{where}: still running after {timeout:.0f} s", names))
            continue
        if "Traceback (most recent call last)" in stderr:
            report.failures.append(Failure("traceback", f"{where}: {stderr[-3000:]}", names))
        elif code not in (0, 1):
            report.failures.append(Failure("exit-2", f"{where}: exit {code}: {stderr[-2000:]}{_internal(stdout)}", names))
        if rss > memory_mb:
            report.failures.append(Failure("memory", f"{where}: peak {rss:.0f} MB > {memory_mb:.0f} MB", names))
    for case in cases:
        if case.name.endswith(".py") and case.data and _compiles(case.data):
            fixed = (folder / case.name).read_bytes()
            if fixed != case.data and not _compiles(fixed):
                report.failures.append(Failure("fix-broke-file", f"--fix turned {case.name} into a file that does not compile", [case.name]))
    report.batches += 1
    report.files += len(cases)


def _internal(stdout: str) -> str:
    try:
        rows = json.loads(stdout or "[]")
    except ValueError:
        return ""
    return "".join(f"\n  {r['path']}: {r['message']}" for r in rows if "internal error" in r.get("message", ""))[:2000]


def pinpoint(failure: Failure, cases: dict[str, Case], workdir: Path, timeout: float, memory_mb: float) -> list[str]:
    """The files of a failed batch that fail alone (each linted and fixed by itself)."""
    culprits = []
    for name in failure.files[:200]:
        single = Report()
        sub = workdir / f"alone_{name}"
        sub.mkdir()
        run_batch([cases[name]], sub, timeout, memory_mb, 1, single)
        if single.failures:
            culprits.append(f"{name}: {single.failures[0].kind}")
        shutil.rmtree(sub, ignore_errors=True)
    return culprits


def fuzz(seed: int, count: int, batch: int = 100, deep: bool = False, huge: bool = False, extra: Iterable[Path] = (),
         timeout: float = 300, memory_mb: float = 2048, jobs: int = 2, find_culprits: bool = False,
         progress: Callable[[str], None] | None = None) -> Report:
    """Generate `count` files from `seed` and lint/fix them in batches of `batch`; the report says what failed."""
    started = time.monotonic()
    cases = make_cases(seed, count, seed_sources(extra), deep, huge)
    report = Report()
    with tempfile.TemporaryDirectory(prefix="trainlint-fuzz-") as tmp:
        workdir = Path(tmp)
        while chunk := list(itertools.islice(cases, batch)):
            before = len(report.failures)
            run_batch(chunk, workdir, timeout, memory_mb, jobs, report)
            shutil.rmtree(workdir / f"batch{report.batches - 1:04d}", ignore_errors=True)
            if find_culprits:
                by_name = {c.name: c for c in chunk}
                for failure in report.failures[before:]:
                    if len(failure.files) > 1:
                        failure.files = pinpoint(failure, by_name, workdir, timeout, memory_mb) or failure.files
            if progress:
                progress(report.summary())
    report.seconds = time.monotonic() - started
    return report
