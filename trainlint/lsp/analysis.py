"""What the contained child process runs for the server: lint a buffer or a notebook's cells, or
find their safe fixes.

Module-level functions, so that they can be named across the pipe (see `contained.py`).
"""

from __future__ import annotations

from dataclasses import replace

from trainlint.config import Settings
from trainlint.diagnostics import Diagnostic, Fix, Severity
from trainlint.engine import PARSE_ERROR, FileResult, lint_source
from trainlint.fixes import applicable, apply_fixes
from trainlint.lsp.notebooks import CellText, as_notebook_json, joined_code
from trainlint.lsp.precheck import nesting_problem
from trainlint.notebook import load


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


def safe_cell_fixes(cells: list[CellText], name: str, settings: Settings) -> list[Diagnostic]:
    """The notebook's findings whose safe fixes apply together, checked on the joined code (where a
    fix that breaks the module is refused as in a file); their edits stay located in their cells."""
    findings = applicable(lint_cells(cells, name, settings).diagnostics, unsafe=False)
    notebook = load(as_notebook_json(cells))
    pairs: list[tuple[Diagnostic, Diagnostic]] = []  # (in the joined code, in its cell)
    for d in findings:
        assert d.fix is not None
        edits = tuple(notebook.to_joined(e) for e in d.fix.edits)
        located = replace(notebook.to_joined(d), fix=Fix(d.fix.description, edits, d.fix.applicability))  # type: ignore[arg-type]
        pairs.append((located, d))
    _, applied = apply_fixes(notebook.code, [located for located, _ in pairs])
    done = {id(d) for d in applied}
    return [in_cell for located, in_cell in pairs if id(located) in done]
