"""`--format github`: GitHub Actions workflow commands, shown as annotations on the pull request."""

from __future__ import annotations

from typing import Sequence

from trainlint.diagnostics import Diagnostic, Severity

COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(d: Diagnostic) -> str:
    """`::error file=f,line=1,col=2,endLine=1,endColumn=9,title=TL101 name::message`."""
    properties = ",".join(
        f"{key}={_escape_property(str(value))}"
        for key, value in (
            ("file", d.path),
            ("line", d.line),
            ("col", d.column),
            ("endLine", d.end_line),
            ("endColumn", d.end_column),
            ("title", f"{d.code} {d.name}"),
        )
    )
    message = f"{d.message}. Fix: {d.hint}" if d.hint else d.message
    return f"::{COMMAND[d.severity]} {properties}::{_escape_data(message)}"


def render(diagnostics: Sequence[Diagnostic]) -> str:
    return "\n".join(annotation(d) for d in diagnostics)
