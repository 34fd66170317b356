"""Applying fixes: non-overlapping edits, re-parsed before anything is written, written atomically."""

from __future__ import annotations

import difflib
import os
import tempfile
from pathlib import Path
from typing import Sequence

import libcst as cst

from trainlint.diagnostics import Applicability, Diagnostic, Edit


def _offsets(source: str) -> list[int]:
    starts = [0]
    for i, ch in enumerate(source):
        if ch == "\n":
            starts.append(i + 1)
    return starts


def applicable(diagnostics: Sequence[Diagnostic], unsafe: bool) -> list[Diagnostic]:
    """Diagnostics whose fix may be applied: safe ones, and unsafe ones when asked for."""
    return [
        d
        for d in diagnostics
        if d.fix is not None and (unsafe or d.fix.applicability is Applicability.SAFE)
    ]


def apply_fixes(source: str, diagnostics: Sequence[Diagnostic]) -> tuple[str, list[Diagnostic]]:
    """Apply the diagnostics' fixes; a fix whose edits overlap an earlier one is skipped whole.

    Returns the new source and the diagnostics whose fixes were applied. If the result does not
    parse, the source is returned unchanged with no fixes applied.
    """
    starts = _offsets(source)

    def offset(line: int, column: int) -> int:
        return min(starts[line - 1] + column - 1, len(source)) if line - 1 < len(starts) else len(source)

    spans: list[tuple[int, int, str]] = []
    applied: list[Diagnostic] = []
    for d in sorted(diagnostics, key=Diagnostic.sort_key):
        assert d.fix is not None
        edits = [(offset(e.line, e.column), offset(e.end_line, e.end_column), e.content) for e in d.fix.edits]
        if any(s < e2 and s2 < e or (s == e == s2 == e2) for s, e, _ in edits for s2, e2, _ in spans):
            continue
        spans.extend(edits)
        applied.append(d)
    new = source
    for start, end, content in sorted(spans, key=lambda s: (s[0], s[1]), reverse=True):
        new = new[:start] + content + new[end:]
    if new == source:
        return source, []
    try:
        cst.parse_module(new)
    except cst.ParserSyntaxError:
        return source, []
    return new, applied


def unified_diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


def write_atomic(path: Path, text: str, encoding: str = "utf-8") -> None:
    """Replace a file's content in one rename, keeping its permissions."""
    mode = path.stat().st_mode
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".trainlint")
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


__all__ = ["Edit", "applicable", "apply_fixes", "unified_diff", "write_atomic"]
