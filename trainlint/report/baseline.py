"""Baselines: adopt trainlint on a big codebase by recording today's findings outside the code.

`--write-baseline FILE` records each finding's fingerprint (`report/fingerprint.py`: code, path,
offending code and its line, so it survives lines moving, unrelated edits and a renamed enclosing
function); `--baseline FILE` (or `baseline = "FILE"` in the configuration, which pre-commit and the
language server read too) then reports only findings not in it. Paths are stored relative to the
baseline's folder, so the file means the same from any working directory. Fixing a recorded finding
shrinks what the baseline hides; rewriting it drops what was fixed.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from trainlint.diagnostics import Diagnostic
from trainlint.report.fingerprint import fingerprints

if TYPE_CHECKING:
    from trainlint.report.text import SourceLines

VERSION = 1


class BaselineError(ValueError):
    """A baseline file that cannot be read."""


def _relative(path: str, folder: Path) -> str:
    try:
        return Path(os.path.relpath(Path(path).resolve(), folder.resolve())).as_posix()
    except ValueError:  # another drive
        return Path(path).as_posix()


def _keyed(diagnostics: Sequence[Diagnostic], sources: SourceLines, folder: Path) -> list[str]:
    """Fingerprints computed on paths relative to the baseline's folder."""
    moved = [replace(d, path=_relative(d.path, folder)) for d in diagnostics]
    relative_sources = {(_relative(path, folder), cell): lines for (path, cell), lines in sources.items()}
    return fingerprints(moved, relative_sources)


def write_baseline(file: Path, diagnostics: Sequence[Diagnostic], sources: SourceLines) -> int:
    """Record `diagnostics` in `file`; the number recorded (TL000s, which say a file could not be read, are not)."""
    kept = [d for d in diagnostics if d.code != "TL000"]
    folder = file.resolve().parent
    entries = [
        {"fingerprint": fp, "code": d.code, "path": _relative(d.path, folder), "line": d.line, "message": d.message}
        for d, fp in zip(kept, _keyed(kept, sources, folder))
    ]
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps({"version": VERSION, "findings": entries}, indent=1) + "\n", encoding="utf-8")
    return len(entries)


def read_baseline(file: Path) -> frozenset[str]:
    """The fingerprints a baseline file holds; raises BaselineError when it is not one."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BaselineError(f"{file}: cannot read the baseline: {exc}") from exc
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("findings"), list):
        raise BaselineError(f"{file}: not a trainlint baseline (expected {{\"version\": {VERSION}, \"findings\": [...]}})")
    return frozenset(str(f.get("fingerprint")) for f in data["findings"] if isinstance(f, dict))


def new_findings(diagnostics: Sequence[Diagnostic], sources: SourceLines, file: Path, known: frozenset[str]) -> tuple[list[Diagnostic], int]:
    """The findings not in the baseline, and how many it hid."""
    folder = file.resolve().parent
    kept = [d for d, fp in zip(diagnostics, _keyed(diagnostics, sources, folder)) if d.code == "TL000" or fp not in known]
    return kept, len(diagnostics) - len(kept)
