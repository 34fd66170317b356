"""`--format github`: GitHub Actions workflow commands, shown as annotations on the pull request."""

from __future__ import annotations

from typing import Sequence

from trainlint.diagnostics import Diagnostic, Severity
from trainlint.report.text import visible

COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(text: str) -> str:
    # line breaks as the runner decodes them; other control characters shown as escapes, so that
    # neither the log nor the annotation acts on them
    return visible(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(d: Diagnostic) -> str:
    """`::error file=f,line=1,col=2,endLine=1,endColumn=9,title=TL101 name::message`.

    A notebook's finding is placed at its line in the notebook's JSON text (where the pull request's
    diff shows it), and its message starts with `cell N, line L:`.
    """
    line, column, end_line, end_column = d.file_region
    properties = ",".join(
        f"{key}={_escape_property(str(value))}"
        for key, value in (
            ("file", d.path),
            ("line", line),
            ("col", column),
            ("endLine", end_line),
            ("endColumn", end_column),
            ("title", f"{d.code} {d.name}"),
        )
    )
    message = f"{d.message}{d.every_step_via()}. Fix: {d.hint}" if d.hint else f"{d.message}{d.every_step_via()}"
    if d.cell is not None:
        message = f"cell {d.cell}, line {d.line}: {message}"
    return f"::{COMMAND[d.severity]} {properties}::{_escape_data(message)}"


def render(diagnostics: Sequence[Diagnostic]) -> str:
    return "\n".join(annotation(d) for d in diagnostics)
