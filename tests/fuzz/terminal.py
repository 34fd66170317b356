"""The terminal-output check of the fuzzing run: files whose names and lines hold control sequences
(seed training files and the harness's mutated and generated files), linted in every human-readable
format (`text` and `concise` with and without colour, `github`, `--show-files`, `--fix --show-fixes`).
What trainlint prints must hold no control character but the newline, the tab and, with
`--color always`, its own colours; and no run may crash, exit 2 or hang.

The `verify` reports run the user's script, so they are checked by tests/test_verify_run.py instead.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tests.fuzz.harness import make_cases, seed_sources

# What a terminal acts on: retitle, clear, move the cursor, erase a line, carriage return, backspace,
# bell, C1 CSI and NEL, DEL, bidirectional overrides and isolates, the line separator. None ends in
# `m`: the colours of `--color always` are stripped before counting, and would hide an injected one.
SEQUENCES = (
    "\x1b]0;pwned\x07", "\x1b[2J", "\x1b[1A\x1b[2K", "\x1b[H", "\r", "\x08\x08", "\x07", "\x9b2J", "\x85", "\x7f",
    "\u202e", "\u2066", "\u200f", "\u2028", "\x1bP+q\x1b\\", "\x0b\x0c", "\x1c",
)
# file names: the same, without `/` and NUL, plus bytes that are not UTF-8 (lone surrogates in Python)
NAME_SEQUENCES = (*SEQUENCES, "\udcff", "\udced\udca0\udc80", "\n", "\t")
COLOURS = re.compile("\x1b\\[[0-9;]*m")
UNESCAPED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
RUNS = (
    ("text, no colour", ["--format", "text", "--color", "never"]),
    ("text, colour", ["--format", "text", "--color", "always"]),
    ("concise, no colour", ["--format", "concise", "--color", "never"]),
    ("concise, colour", ["--format", "concise", "--color", "always"]),
    ("github", ["--format", "github"]),
    ("show-files", ["--show-files"]),
    ("fix", ["--format", "concise", "--color", "never", "--fix", "--unsafe-fixes", "--show-fixes"]),  # last: it writes
)


@dataclass
class TerminalReport:
    files: int = 0
    runs: int = 0
    crashes: int = 0  # a traceback or exit code 2
    hangs: int = 0
    unescaped: int = 0  # control characters printed as they are
    examples: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"terminal output: files {self.files}, runs {self.runs}, crashes {self.crashes}, hangs {self.hangs}, "
            f"unescaped control characters {self.unescaped}"
        )

    @property
    def failed(self) -> bool:
        return bool(self.crashes or self.hangs or self.unescaped)


def inject(rng: random.Random, data: bytes) -> bytes:
    """Control sequences put into a file: in comments (where a code frame shows them), in string
    literals, or anywhere in a line (a syntax error, whose message may quote the line)."""
    lines = data.split(b"\n")
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(lines))
        seq = rng.choice(SEQUENCES).encode()
        where = rng.choice(("comment", "comment", "string", "anywhere"))
        line = lines[i]
        if where == "comment":
            lines[i] = line + b"  # " + seq
        elif where == "string":
            body = line.lstrip(b" ")
            lines[i] = line[: len(line) - len(body)] + b"s = '" + seq + b"'; " + body
        else:
            at = rng.randrange(len(line) + 1)
            lines[i] = line[:at] + seq + line[at:]
    return b"\n".join(lines)


def _run(args: list[str], cwd: Path, timeout: float) -> tuple[int | None, str]:
    """Exit code (None after `timeout`: the whole session is killed) and stdout + stderr, bytes that
    are not UTF-8 kept as lone surrogates (counted as unescaped)."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(args, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
        out.seek(0)
        return code, out.read().decode("utf-8", errors="surrogateescape")


def check_batch(names_and_data: list[tuple[str, bytes]], folder: Path, timeout: float, report: TerminalReport) -> None:
    folder.mkdir()
    for name, data in names_and_data:
        (folder / name).write_bytes(data)
    cache = folder.parent / f"{folder.name}.cache"
    for label, options in RUNS:
        args = [sys.executable, "-m", "trainlint", ".", "--select", "ALL", "-j", "2", "--cache-dir", str(cache), *options]
        code, output = _run(args, folder, timeout)
        report.runs += 1
        if code is None:
            report.hangs += 1
            report.examples.append(f"{folder.name} {label}: still running after {timeout:.0f} s")
            continue
        if code not in (0, 1) or "Traceback (most recent call last)" in output:
            report.crashes += 1
            report.examples.append(f"{folder.name} {label}: exit {code}: {output[-1500:]!r}")
        shown = COLOURS.sub("", output) if "always" in options else output
        found = UNESCAPED.findall(shown)
        if found:
            report.unescaped += len(found)
            line = next(line for line in shown.splitlines() if UNESCAPED.search(line))
            report.examples.append(f"{folder.name} {label}: {len(found)} unescaped, e.g. in {line[:300]!r}")
    report.files += len(names_and_data)


def terminal_check(seed: int, count: int, batch: int = 100, timeout: float = 300,
                   progress: Callable[[str], None] | None = None) -> TerminalReport:
    """`count` files from `seed` (half seed files, half the harness's cases, all with control
    sequences injected, a third with one in their name), checked in batches of `batch`."""
    rng = random.Random(seed)
    sources = seed_sources()
    cases = make_cases(seed, count, sources, deep=False, huge=False)
    report = TerminalReport()
    files: list[tuple[str, bytes]] = []
    with tempfile.TemporaryDirectory(prefix="trainlint-terminal-") as tmp:
        for i, case in enumerate(cases):
            data = case.data if rng.random() < 0.5 else rng.choice(sources).encode()
            ext = ".json" if case.name.endswith(".json") else ".py"
            name = f"{i:05d}{rng.choice(NAME_SEQUENCES) if rng.random() < 0.33 else ''}{ext}"
            files.append((name, inject(rng, data)))
            if len(files) == batch or i == count - 1:
                check_batch(files, Path(tmp) / f"batch{i // batch:04d}", timeout, report)
                files = []
                if progress:
                    progress(report.summary())
    return report

