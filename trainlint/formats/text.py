"""`--format text` (rich, with source excerpts) and `--format concise` (one line per finding)."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainlint.diagnostics import Diagnostic, Severity

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def _location(d: Diagnostic) -> str:
    return f"[bold]{escape(d.path)}[/]:{d.line}:{d.column}:"


def render_concise(console: Console, diagnostics: Sequence[Diagnostic]) -> None:
    for d in diagnostics:
        console.print(f"{_location(d)} [{STYLE[d.severity]}]{d.code}[/] {escape(d.message)}", highlight=False)


def render_full(console: Console, diagnostics: Sequence[Diagnostic], sources: dict[str, list[str]]) -> None:
    for d in diagnostics:
        console.print(
            f"{_location(d)} [{STYLE[d.severity]}]{d.code}[/] [dim]\\[{d.name}][/] {escape(d.message)}",
            highlight=False,
        )
        lines = sources.get(d.path)
        if lines and 0 < d.line <= len(lines):
            text = lines[d.line - 1].rstrip("\n").expandtabs(1)
            gutter = str(d.line)
            pad = " " * len(gutter)
            end = d.end_column if d.end_line == d.line else len(text) + 1
            width = max(1, end - d.column)
            console.print(f"[blue]{pad} |[/]", highlight=False)
            console.print(f"[blue]{gutter} |[/] {escape(text)}", highlight=False)
            console.print(f"[blue]{pad} |[/] {' ' * (d.column - 1)}[{STYLE[d.severity]}]{'^' * width}[/]", highlight=False)
        if d.hint:
            console.print(f"  [green]= fix:[/] {escape(d.hint)}", highlight=False)
        if d.fix is not None:
            kind = "safe" if d.fix.applicability.value == "safe" else "unsafe"
            console.print(f"  [green]= autofix ({kind}):[/] {escape(d.fix.description)}", highlight=False)
        console.print(f"  [dim]= docs: {d.url}[/]", highlight=False)
        console.print()


def summary_line(diagnostics: Sequence[Diagnostic]) -> str:
    if not diagnostics:
        return "All checks passed!"
    counts = Counter(d.severity for d in diagnostics)
    files = len({d.path for d in diagnostics})
    parts = []
    for sev, word in ((Severity.ERROR, "error"), (Severity.WARNING, "warning"), (Severity.INFO, "info")):
        n = counts.get(sev, 0)
        if n:
            parts.append(f"{n} {word}{'s' if n != 1 and word != 'info' else ''}")
    total = len(diagnostics)
    noun = "problem" if total == 1 else "problems"
    return f"Found {total} {noun} ({', '.join(parts)}) in {files} file{'s' if files != 1 else ''}"


def render_statistics(console: Console, diagnostics: Sequence[Diagnostic]) -> None:
    counts = Counter((d.code, d.name) for d in diagnostics)
    table = Table(box=None, show_header=False, pad_edge=False)
    for (code, name), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(str(n), code, name)
    console.print(table)
