"""What the contained child process runs for the server: lint a buffer or a notebook's cells, or
find a buffer's safe fixes.

Module-level functions, so that they can be named across the pipe (see `contained.py`).
"""

from __future__ import annotations

from trainlint.config import Settings
from trainlint.diagnostics import Diagnostic, Severity
from trainlint.engine import PARSE_ERROR, FileResult, lint_source
from trainlint.fixes import applicable, apply_fixes
from trainlint.lsp.notebooks import CellText, as_notebook_json, joined_code
from trainlint.lsp.precheck import nesting_problem


def not_analysed(name: str, message: str, line: int = 1) -> Diagnostic:
    """The TL000 a buffer gets when it cannot be analysed at all."""
    return Diagnostic(
        code=PARSE_ERROR[0], name=PARSE_ERROR[1], message=message, severity=Severity.ERROR,
        path=name, line=line, column=1, end_line=line, end_column=1,
    )


def lint_buffer(source: str, name: str, settings: Settings) -> FileResult:
    """Lint an editor buffer; a buffer nested too deep for the parser gets a TL000 instead."""
    problem = nesting_problem(source)
    if problem is not None:
        return FileResult(name, [not_analysed(name, problem)], source=source)
    return lint_source(source, name, settings)


def safe_fixes(source: str, name: str, settings: Settings) -> list[Diagnostic]:
    """The findings whose safe fixes apply together (non-overlapping, and the result parses)."""
    result = lint_buffer(source, name, settings)
    _, applied = apply_fixes(source, applicable(result.diagnostics, unsafe=False))
    return applied


def lint_cells(cells: list[CellText], name: str, settings: Settings) -> FileResult:
    """Lint a notebook's cells as one module; findings carry their 1-based cell."""
    problem = nesting_problem(joined_code(cells))
    if problem is not None:
        return FileResult(name, [not_analysed(name, problem)])
    return lint_source(as_notebook_json(cells), name, settings)
