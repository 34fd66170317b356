"""What `trainlint check` prints: findings in the chosen format, statistics, the summary and fix hints.

Consoles are made here so that every rich output of the command line follows the same rules:
emoji codes off (`:100:` in a path or a line of code stays as it is), `--color auto|always|never`,
and `NO_COLOR` (any non-empty value) meaning no escape codes at all unless `--color always`.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Sequence

from trainlint.diagnostics import Applicability, Diagnostic

if TYPE_CHECKING:
    from rich.console import Console

    from trainlint.engine.results import FileResult
    from trainlint.report.text import SourceLines

COLOR_CHOICES = ("auto", "always", "never")
MACHINE_FORMATS = ("json", "json-lines", "sarif", "github", "gitlab", "junit")


def make_console(color: str = "auto", file: IO[str] | None = None, stderr: bool = False) -> Console:
    """A rich console for user-facing output; see the module docstring for the rules it follows."""
    from rich.console import Console

    if color == "auto" and os.environ.get("NO_COLOR"):
        color = "never"
    options: dict[str, object] = {}
    if color == "always":
        options["force_terminal"] = True
    elif color == "never":
        options["color_system"] = None
        options["no_color"] = True
    return Console(
        file=file, stderr=stderr, emoji=False, highlight=False, soft_wrap=True, **options  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class ReportOptions:
    output_format: str = "text"
    statistics: bool = False
    quiet: bool = False
    color: str = "auto"
    unsafe_fixes: bool = False
    hidden_by_baseline: int = 0
    test_code_files: int = 0  # files linted as test code, which per-step rules skip


def fixable_by(unsafe: bool):  # type: ignore[no-untyped-def]
    """The predicate "would `--fix` (with `--unsafe-fixes` when `unsafe`) apply this finding's fix"."""

    def fixable(d: Diagnostic) -> bool:
        return d.fix is not None and (unsafe or d.fix.applicability is Applicability.SAFE)

    return fixable


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def source_lines(results: Sequence[FileResult]) -> SourceLines:
    """The lines of each file (each notebook cell) with findings, for code frames and columns.

    A result that still holds its source (standard input) is not read again from disk.
    """
    from trainlint.reading import read_text

    sources: SourceLines = {}
    for result in results:
        if not result.diagnostics:
            continue
        text = result.source
        if text is None:
            text = read_text(Path(result.path))  # a FIFO or a device named like a source must not block here
            if text is None:
                continue
        if any(d.cell is not None for d in result.diagnostics):
            from trainlint.engine.notebook import NotebookError, cell_lines

            try:
                for cell, lines in cell_lines(text).items():
                    # a cell's JSON can hold a lone surrogate, which no output stream can encode
                    sources[(result.path, cell)] = [_LONE_SURROGATE.sub("\ufffd", line) for line in lines]
            except NotebookError:
                pass
        sources[(result.path, None)] = python_lines(text)
    return sources


def python_lines(text: str) -> list[str]:
    """`text` split where Python ends a line (`\\n`, `\\r\\n`, `\\r`) and nowhere else: `splitlines` also
    splits at form feeds and other separators, which would show the wrong line for every finding below."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def render(results: Sequence[FileResult], options: ReportOptions, out: IO[str] | None = None) -> None:
    """Print the findings of `results` (sorted) in `options.output_format` to `out` (stdout)."""
    diagnostics = [d for r in results for d in r.diagnostics]
    fixable = fixable_by(options.unsafe_fixes)
    if options.statistics:
        _render_statistics(diagnostics, options, out)
        return
    if options.output_format in MACHINE_FORMATS:
        from importlib import import_module

        renderer = import_module(f"trainlint.report.{options.output_format.replace('-', '_')}").render
        # GitLab's fingerprints read the offending code
        text = renderer(diagnostics, source_lines(results)) if options.output_format == "gitlab" else renderer(diagnostics)
        if text:
            print(text, file=out or sys.stdout)
        return
    if options.output_format == "lsp":
        from trainlint.report.lsp import render as render_lsp

        print(render_lsp([r.path for r in results], diagnostics, source_lines(results)), file=out or sys.stdout)
        return
    from trainlint.report.text import PlainConsole, StyledConsole, fix_hints, render_concise, render_full, summary_line, visible

    lines = PlainConsole(out) if _unstyled(options.color, out) else StyledConsole(make_console(options.color, out))
    if options.output_format == "concise":
        render_concise(lines, diagnostics, fixable)
    else:
        render_full(lines, diagnostics, source_lines(results), fixable)
    if options.quiet:
        return
    lines.line((summary_line(diagnostics), ""))
    unknown = sorted({m for r in results for m in r.unknown_summaries})
    if unknown:  # named once, however many files read them
        shown = ", ".join(visible(m) for m in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        lines.line((
            f"{len(unknown)} module{'s' if len(unknown) != 1 else ''} of the project could not be summarised within "
            f"--file-timeout and {'were' if len(unknown) != 1 else 'was'} read as unknown: {shown}.", "",
        ))
    if options.hidden_by_baseline:
        n = options.hidden_by_baseline
        lines.line((f"{n} finding{'s' if n != 1 else ''} hidden by the baseline.", ""))
    if options.test_code_files:
        n = options.test_code_files
        lines.line((
            f"{n} file{'s' if n != 1 else ''} linted as test code (tests/, test_*.py): the per-step rules skip "
            "them; `lint-test-code = true` checks them as training code.", "",
        ))
    available = sum(1 for d in diagnostics if fixable(d))
    hidden = sum(1 for d in diagnostics if d.fix is not None and not fixable(d))
    for hint in fix_hints(available, hidden, options.unsafe_fixes):
        lines.line((hint, ""))


def _unstyled(color: str, out: IO[str] | None) -> bool:
    """Whether rich would print no styles to `out`: then plain text is the same output, without rich."""
    if color == "always":
        return False
    if color == "never" or os.environ.get("NO_COLOR"):
        return True
    if any(os.environ.get(v) for v in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")):
        return False  # rich's own overrides of terminal detection
    file = out or sys.stdout
    try:
        return not file.isatty()
    except (AttributeError, ValueError):
        return True


def _render_statistics(diagnostics: Sequence[Diagnostic], options: ReportOptions, out: IO[str] | None) -> None:
    """`--statistics`: only the count per rule (a JSON array with `--output-format json`)."""
    from trainlint.report.text import render_statistics, statistics_rows

    rows = statistics_rows(diagnostics, fixable_by(options.unsafe_fixes))
    if options.output_format == "json":
        import json

        print(json.dumps(rows, indent=2), file=out or sys.stdout)
    elif rows:
        render_statistics(make_console(options.color, out), rows)
