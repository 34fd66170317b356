"""Applying fixes so that they never hurt: on the analysed text only, each one re-checked, written
only over the bytes that were analysed, atomically.

`fix_source` is the whole policy. It lints the text itself (so edits always land on the text their
positions were computed on), applies the non-overlapping fixes, lints the result and keeps a fix
only if the fixed file parses, the fixed finding is gone and no other finding appeared; a batch
that fails is retried fix by fix, and a fix that fails alone is rejected with its reason. It goes
round until nothing is left to apply, so its result does not depend on how often it runs: two
`--fix` runs that race on one file write the same text, and `replace_if_unchanged` makes the
second one skip the file because it no longer holds the bytes it analysed.

The re-check (`recheck`) is the language server's too: its quick fixes are offered only where
the fix passes it alone (`checked`), its "fix all" applies `fix_source`'s first batch.
"""

from __future__ import annotations

import codecs
import difflib
import io
import os
import re
import tempfile
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from trainlint.dataclass_methods import import_libcst

import_libcst()  # (see dataclass_methods)
import libcst as cst  # noqa: E402

from trainlint.config import Settings
from trainlint.diagnostics import Applicability, Diagnostic, Edit
from trainlint.engine.results import FileResult
from trainlint.engine.lint import lint_source
from trainlint.reading import ReadError, read_source

# libcst numbers lines on all three: a CR-only file has as many lines as its LF twin
_NEWLINE = re.compile(r"\r\n|\r|\n")
MAX_PASSES = 8  # rounds of lint-apply-check; a fix that enables another is applied in the next round


def line_starts(source: str) -> list[int]:
    """Offsets of the first character of each line, lines ending in LF, CRLF or CR."""
    return [0, *(m.end() for m in _NEWLINE.finditer(source))]


def newline_of(source: str) -> str:
    """The file's line ending (its first one), LF for a file without any."""
    match = _NEWLINE.search(source)
    return match.group() if match else "\n"


def applicable(diagnostics: Sequence[Diagnostic], unsafe: bool) -> list[Diagnostic]:
    """Diagnostics whose fix may be applied: safe ones, and unsafe ones when asked for."""
    return [
        d
        for d in diagnostics
        if d.fix is not None and (unsafe or d.fix.applicability is Applicability.SAFE)
    ]


def _spans(source: str, starts: list[int], edits: Sequence[Edit]) -> list[tuple[int, int, str]]:
    """Character spans of edits; inserted line breaks take the file's own line ending."""
    newline = newline_of(source)

    def offset(line: int, column: int) -> int:
        if line - 1 >= len(starts):
            return len(source)
        end_of_line = starts[line] if line < len(starts) else len(source)
        return min(starts[line - 1] + column - 1, end_of_line)

    out = []
    for e in edits:
        content = e.content
        if newline != "\n" and "\n" in content:
            content = content.replace("\r\n", "\n").replace("\n", newline)
        out.append((offset(e.line, e.column), offset(e.end_line, e.end_column), content))
    return out


def apply_fixes(source: str, diagnostics: Sequence[Diagnostic]) -> tuple[str, list[Diagnostic]]:
    """Apply the diagnostics' fixes; a fix whose edits overlap an earlier one is skipped whole.

    Returns the new source and the diagnostics whose fixes were applied. If the result does not
    parse, the source is returned unchanged with no fixes applied.
    """
    starts = line_starts(source)
    spans: list[tuple[int, int, str]] = []
    applied: list[Diagnostic] = []
    for d in sorted(diagnostics, key=Diagnostic.sort_key):
        assert d.fix is not None
        edits = _spans(source, starts, d.fix.edits)
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
    except (cst.ParserSyntaxError, RecursionError, MemoryError):
        return source, []
    return new, applied


def apply_document_fixes(name: str, source: str, diagnostics: Sequence[Diagnostic]) -> tuple[str, list[Diagnostic]]:
    """`apply_fixes` for a Python file's text, or for a notebook's JSON (edits located in cells) by its name."""
    if name.endswith(".ipynb"):
        from trainlint.engine.notebook import apply_fixes as apply_to_notebook

        return apply_to_notebook(source, diagnostics, apply_fixes)
    return apply_fixes(source, diagnostics)


@dataclass
class FixOutcome:
    """What `fix_source` did: the new text, the fixes kept, those refused (with why), the findings left."""

    source: str
    applied: list[Diagnostic] = field(default_factory=list)
    rejected: list[tuple[Diagnostic, str]] = field(default_factory=list)
    remaining: FileResult | None = None


def _problem(before: FileResult, after: FileResult, fixed: Sequence[Diagnostic]) -> str | None:
    """Why a fixed text is not acceptable, or None: it must parse, lose the fixed findings, gain none."""
    if after.failed or after.internal_error:
        return "the fixed file could not be analysed"
    old = Counter(d.code for d in before.diagnostics)
    new = Counter(d.code for d in after.diagnostics)
    gone = Counter(d.code for d in fixed)
    for code in sorted(set(new) | set(gone)):
        if new[code] > old[code] - gone[code]:
            return f"{code} is still reported after the fix" if code in gone else f"the fix introduces a new {code} finding"
    return None


def _key(d: Diagnostic) -> tuple[str, str, str]:
    # positions move as other fixes land; the finding's words and its fix do not
    assert d.fix is not None
    return (d.code, d.message, d.fix.description)


Lint = Callable[[str, str, Settings], FileResult]
Apply = Callable[[str, Sequence[Diagnostic]], tuple[str, list[Diagnostic]]]


def recheck(
    source: str, name: str, settings: Settings, before: FileResult, fixes: Sequence[Diagnostic],
    apply: Apply = apply_fixes, lint: Lint = lint_source,
) -> tuple[str, list[Diagnostic], FileResult | None, str | None]:
    """The after-fix re-check, the one `--fix` and the language server both apply: the fixes are
    applied to `source` (whose lint is `before`) and the result linted. Returns the new text, the
    fixes applied, the new lint, and None when the text parses, the fixed findings are gone and no
    other finding appeared; else the reason it is refused."""
    new, applied = apply(source, fixes)
    if not applied:
        return source, [], None, "the fixed file does not parse"
    after = lint(new, name, settings)
    return new, applied, after, _problem(before, after, applied)


@dataclass
class FixRound:
    """One round of fixing: the text after it, its lint, the fixes kept and those refused (why)."""

    source: str
    result: FileResult
    applied: list[Diagnostic]
    rejected: list[tuple[Diagnostic, str]]


def fix_round(
    source: str, name: str, settings: Settings, result: FileResult, candidates: Sequence[Diagnostic],
    apply: Apply = apply_fixes, lint: Lint = lint_source,
) -> FixRound:
    """Apply the candidates (found on `source`, linted as `result`) together if they pass the
    re-check together; else try each alone, refuse those that fail alone, and when none fails
    alone take the first (the rest come in the next round)."""
    new, batch, after, reason = recheck(source, name, settings, result, candidates, apply, lint)
    if reason is None and after is not None:
        return FixRound(new, after, batch, [])
    rejected: list[tuple[Diagnostic, str]] = []
    good: tuple[str, Diagnostic, FileResult] | None = None
    for d in candidates:
        new, one, after, reason = recheck(source, name, settings, result, [d], apply, lint)
        if reason is not None:
            rejected.append((d, reason))
        elif good is None and after is not None:
            good = (new, d, after)
    if good is not None and not rejected:
        return FixRound(good[0], good[2], [good[1]], [])
    return FixRound(source, result, [], rejected)


def first_batch(
    source: str, name: str, settings: Settings, result: FileResult, candidates: Sequence[Diagnostic],
    apply: Apply = apply_fixes, lint: Lint = lint_source,
) -> list[Diagnostic]:
    """The fixes that `fix_source`'s first round to apply anything applies to `source` (rounds
    that only refuse fixes come before it): all of them located on `source` itself."""
    while candidates:
        done = fix_round(source, name, settings, result, candidates, apply, lint)
        if done.applied or not done.rejected:
            return done.applied
        refused = {id(d) for d, _ in done.rejected}
        candidates = [d for d in candidates if id(d) not in refused]
    return []


def checked(
    source: str, name: str, settings: Settings, result: FileResult, wanted: Sequence[Diagnostic],
    apply: Apply = apply_fixes, lint: Lint = lint_source,
) -> list[Diagnostic]:
    """The findings of `result` among `wanted` whose fix, applied alone, passes the re-check."""
    return [
        d for d in result.diagnostics
        if d.fix is not None and d in wanted and recheck(source, name, settings, result, [d], apply, lint)[3] is None
    ]


def fix_source(
    source: str, name: str, settings: Settings, unsafe: bool, lint: Lint = lint_source,
) -> FixOutcome:
    """Apply every applicable fix that survives its re-check, round after round until none is left."""
    def apply(text: str, diagnostics: Sequence[Diagnostic]) -> tuple[str, list[Diagnostic]]:
        return apply_document_fixes(name, text, diagnostics)

    result = lint(source, name, settings)
    outcome = FixOutcome(source, remaining=result)
    refused: set[tuple[str, str, str]] = set()
    for _ in range(MAX_PASSES):
        candidates = [d for d in applicable(result.diagnostics, unsafe) if _key(d) not in refused]
        if not candidates:
            break
        done = fix_round(outcome.source, name, settings, result, candidates, apply, lint)
        for d, reason in done.rejected:
            refused.add(_key(d))
            outcome.rejected.append((d, reason))
        outcome.source, result = done.source, done.result
        outcome.applied.extend(done.applied)
    outcome.remaining = result
    return outcome


# -- bytes: encodings, diffs, writing --------------------------------------------------------------


def _encoding(raw: bytes) -> tuple[str, bool]:
    """The codec a source file is written in, and whether it starts with a UTF-8 BOM."""
    encoding = tokenize.detect_encoding(io.BytesIO(raw).readline)[0]
    bom = raw.startswith(codecs.BOM_UTF8)
    return ("utf-8" if encoding == "utf-8-sig" else encoding), bom


def encode_like(raw: bytes, text: str) -> bytes:
    """`text` in the encoding (and BOM) of the original bytes `raw`."""
    encoding, bom = _encoding(raw)
    return (codecs.BOM_UTF8 if bom else b"") + text.encode(encoding)


def _patch_lines(text: str) -> list[str]:
    # `patch` splits on LF only: a CR stays inside its line, a CR-only file is one line
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text)


def unified_diff(path: str, old: str, new: str) -> str:
    """A unified diff that `patch -p1` applies: LF-split lines, "\\ No newline at end of file" marked."""
    out = []
    for line in difflib.unified_diff(_patch_lines(old), _patch_lines(new), f"a/{path}", f"b/{path}"):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def diff_bytes(path: str, raw: bytes, new: str) -> bytes:
    """The diff of a file's bytes `raw` to the text `new`, in the file's own encoding and BOM."""
    encoding, bom = _encoding(raw)
    old_full = raw.decode(encoding)
    new_full = ("\ufeff" if bom else "") + new
    return unified_diff(path, old_full, new_full).encode(encoding)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace a file's content in one rename, keeping its permissions (through a symlink, its target's)."""
    target = Path(os.path.realpath(path))
    mode = target.stat().st_mode
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".trainlint")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def replace_if_unchanged(path: Path, expected: bytes, data: bytes) -> bool:
    """Write `data` over `path` only if it still holds exactly `expected`; False when it changed.

    The check and the rename happen under an exclusive lock on the file's folder, so two trainlint
    processes cannot both see the old bytes and both write; an editor that does not lock still
    only has the microseconds between the check and the rename.
    """
    folder = os.path.dirname(os.path.realpath(path))
    lock = _lock(folder)
    try:
        try:
            current = read_source(path, len(expected))
        except ReadError:
            return False
        if current != expected:
            return False
        write_atomic(path, data)
        return True
    finally:
        _unlock(lock)


def _lock(folder: str) -> int | None:
    try:
        import fcntl
    except ImportError:  # no flock (Windows): the compare-and-rename alone
        return None
    fd = os.open(folder, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the descriptor releases its flock


__all__ = [
    "Edit", "FixOutcome", "FixRound", "applicable", "apply_document_fixes", "apply_fixes", "checked", "diff_bytes",
    "encode_like", "first_batch", "fix_round", "fix_source", "recheck", "replace_if_unchanged", "unified_diff",
    "write_atomic",
]
