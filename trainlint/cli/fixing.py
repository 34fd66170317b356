"""`--fix`, `--diff`, `--add-noqa` and standard input's fixes: reading, fixing and writing files safely."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import click

from trainlint.cli.common import _warn, writing_to
from trainlint.report.render import fixable_by
from trainlint.report.text import plural, visible

if TYPE_CHECKING:
    from trainlint.config import Settings
    from trainlint.diagnostics import Diagnostic
    from trainlint.engine.results import FileResult


def fix_filter(fixable: Sequence[str], unfixable: Sequence[str]) -> Callable[[str], bool] | None:
    """ruff's `--fixable`/`--unfixable`: which codes' fixes may be applied (None: all); codes or
    prefixes (`ALL`), comma-separated or repeated. Raises click.UsageError for a code of no rule."""
    if not (fixable or unfixable):
        return None  # (the usual case: nothing to look up)
    from trainlint.config import UNUSED_NOQA_CODE, rule_codes_on_disk

    def codes(option: str, values: Sequence[str]) -> tuple[str, ...]:
        out = tuple(c.strip().upper() for v in values for c in v.split(",") if c.strip())
        known = rule_codes_on_disk() | {UNUSED_NOQA_CODE}
        for c in out:
            if c != "ALL" and not any(k.startswith(c) for k in known):
                raise click.UsageError(f"{option}: {c!r} matches no rule code (codes look like TL101; prefixes like TL4 select a group)")
        return out

    allow, deny = codes("--fixable", fixable), codes("--unfixable", unfixable)

    def matches(code: str, selectors: tuple[str, ...]) -> bool:
        return any(s == "ALL" or code.startswith(s) for s in selectors)

    return lambda code: (not allow or matches(code, allow)) and not matches(code, deny)


def restrict_fixes(results: Sequence[FileResult], can_fix: Callable[[str], bool] | None) -> None:
    """Drop the fixes `--fixable`/`--unfixable` rule out, so that neither `[*]` marks nor counts offer them."""
    if can_fix is None:
        return
    for result in results:
        result.diagnostics = [d if d.fix is None or can_fix(d.code) else replace(d, fix=None) for d in result.diagnostics]


def _lint_for(can_fix: Callable[[str], bool] | None):  # type: ignore[no-untyped-def]
    """The lint `fix_source` re-checks with: the fixes `--fixable`/`--unfixable` rule out dropped."""
    from trainlint.engine.lint import lint_source

    if can_fix is None:
        return lint_source

    def lint(source: str, name: str, settings: Settings) -> FileResult:
        result = lint_source(source, name, settings)
        restrict_fixes([result], can_fix)
        return result

    return lint


def _read_source(path: Path) -> tuple[bytes, str] | None:
    """A file's bytes and its decoded text, or None when it cannot be read or decoded."""
    from trainlint.engine.results import decode

    try:
        raw = path.read_bytes()
        return raw, decode(raw)
    except (OSError, UnicodeDecodeError, SyntaxError, LookupError):
        return None


def _write_source(path: Path, raw: bytes, text: str) -> None:
    """Write `text` back in the encoding (and byte-order mark) the file had."""
    from trainlint.fixes import encode_like, write_atomic

    write_atomic(path, encode_like(raw, text))


def _fix_document(path: str, source: str, diagnostics: Sequence[Diagnostic]) -> tuple[str, list[Diagnostic]]:
    """Apply fixes to a Python file's or a notebook's text."""
    from trainlint.fixes import apply_document_fixes

    return apply_document_fixes(path, source, diagnostics)


def add_noqa(results: Sequence[FileResult]) -> int:
    """`--add-noqa`: write the comments that silence each file's findings; the number added."""
    from trainlint.diagnostics import Fix
    from trainlint.noqa import noqa_edits
    from trainlint.engine.notebook import NotebookError, notebook_noqa_edits

    added = 0
    for result in results:
        path = Path(result.path)
        read = _read_source(path) if result.diagnostics and path.is_file() else None
        if read is None:
            continue
        raw, source = read
        try:
            edits = (notebook_noqa_edits if result.path.endswith(".ipynb") else noqa_edits)(source, result.diagnostics)
        except NotebookError:
            continue
        # each edit rides on a diagnostic so that fixes' machinery applies it (and checks the result parses)
        carriers = [replace(result.diagnostics[0], fix=Fix("add noqa", (e,))) for e in edits]
        new, applied = _fix_document(result.path, source, carriers)
        if applied:
            _write_source(path, raw, new)
            added += len(applied)
    return added


def fix_stdin(result: FileResult, settings: Settings, unsafe: bool, diff: bool, can_fix: Callable[[str], bool] | None = None) -> FileResult:
    """`-` with `--fix`: print the fixed source (all of it, fixed or not); with `--diff`: print the diff.
    The fixes are re-checked as a file's are (`fix_source`)."""
    from trainlint.fixes import applicable, fix_source, unified_diff

    source = result.source or ""
    outcome = fix_source(source, result.path, settings, unsafe, _lint_for(can_fix)) if applicable(result.diagnostics, unsafe) else None
    new = outcome.source if outcome is not None else source
    for d, reason in outcome.rejected if outcome is not None else ():
        click.echo(f"trainlint: {result.path}:{d.line}:{d.column}: {d.code} fix not applied: {reason}", err=True)
    with writing_to(what="diff" if diff else "fixed source"):  # (an editor's format-on-save reads it)
        click.echo(unified_diff(result.path, source, new) if diff else new, nl=False)
        sys.stdout.flush()
    if diff:
        return result
    if outcome is None or not outcome.applied or outcome.remaining is None:
        return result
    _warn(f"Fixed {plural(len(outcome.applied), 'problem')} in {result.path}", prefix="")
    outcome.remaining.diagnostics.sort(key=lambda d: d.sort_key())  # (re-checked rule by rule)
    return outcome.remaining


def print_fix_summary(before: Sequence[Diagnostic], after: Sequence[Diagnostic], fixed: bool, unsafe: bool, err: bool) -> None:
    """`--show-fixes`: per file, how many findings of each rule were fixed (or can be), like ruff's."""
    from collections import Counter

    fixable = fixable_by(unsafe)
    counts = Counter((d.path, d.code, d.name) for d in before if fixable(d))
    if fixed:
        counts -= Counter((d.path, d.code, d.name) for d in after)
    total = sum(counts.values())
    noun = "problem" if total == 1 else "problems"
    click.echo(f"{'Fixed' if fixed else 'Fixable with --fix:'} {total} {noun}{':' if total else '.'}", err=err)
    for path in sorted({p for p, _, _ in counts}):
        click.echo(f"- {visible(path)}:", err=err)
        for (p, code, name), n in sorted(counts.items()):
            if p == path:
                click.echo(f"    {n} × {code} ({name})", err=err)


def apply_fixes(
    results: list[FileResult], settings: Settings, unsafe: bool, write: bool, can_fix: Callable[[str], bool] | None = None
) -> list[FileResult]:
    """Apply (or show) fixes; the remaining diagnostics are those not fixed.

    Each file is read once; its fixes are computed and re-checked on exactly those bytes
    (`fix_source`) and written only if the file still holds them, so a file changed meanwhile (an
    editor, another `--fix`) is skipped with a message rather than corrupted.
    """
    from trainlint.engine.results import decode
    from trainlint.fixes import applicable, diff_bytes, encode_like, fix_source, replace_if_unchanged
    from trainlint.reading import ReadError, read_source

    out = []
    for result in results:
        if not applicable(result.diagnostics, unsafe):
            out.append(result)
            continue
        path = Path(result.path)
        try:
            raw = read_source(path, settings.read_limit(result.path))
            outcome = fix_source(decode(raw), result.path, settings, unsafe, _lint_for(can_fix))
        except (ReadError, UnicodeDecodeError, SyntaxError, LookupError) as exc:
            _warn(f"{result.path}: not fixed: {exc}", prefix="trainlint: ")
            out.append(result)
            continue
        for d, reason in outcome.rejected:
            _warn(f"{result.path}:{d.line}:{d.column}: {d.code} fix not applied: {reason}", prefix="trainlint: ")
        if not outcome.applied:
            out.append(result)
            continue
        verb = "Would fix"
        if write:
            try:
                written = replace_if_unchanged(path, raw, encode_like(raw, outcome.source))
            except OSError as exc:
                _warn(f"{result.path}: not fixed: cannot write the file: {exc.strerror or exc}", prefix="trainlint: ")
                out.append(result)
                continue
            if not written:
                _warn(f"{result.path}: not fixed: the file changed while it was being fixed", prefix="trainlint: ")
                out.append(result)
                continue
            verb = "Fixed"
            assert outcome.remaining is not None
            outcome.remaining.source = None
            # the findings re-checked after the fix come rule by rule: put them back in line order
            outcome.remaining.diagnostics.sort(key=lambda d: d.sort_key())
            out.append(outcome.remaining)
        else:
            with writing_to(what="diff"):
                sys.stdout.flush()
                stdout = sys.stdout.buffer  # bytes: the diff keeps the file's own encoding and newlines
                stdout.write(diff_bytes(result.path, raw, outcome.source))
                stdout.flush()
            out.append(result)
        _warn(f"{verb} {plural(len(outcome.applied), 'problem')} in {result.path}", prefix="")
    return out
