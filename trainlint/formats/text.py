"""`--format text` (rich, with source excerpts) and `--format concise` (one line per finding).

Everything taken from the user's files (paths, messages, source lines) is escaped before it reaches
rich, and consoles are made with emoji codes off (see `trainlint.report.make_console`), so the output
shows exactly the file's text: `:100:` stays `:100:`.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainlint.diagnostics import Diagnostic, Severity

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
FIXABLE_MARK = "[*]"
SourceLines = dict[tuple[str, int | None], list[str]]  # (path, notebook cell) -> lines


def location(d: Diagnostic) -> str:
    """`path:line:column`, or ruff's `path:cell N:line:column` for a finding in a notebook."""
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    return f"{d.path}:{cell}{d.line}:{d.column}"


def _head(d: Diagnostic, fixable: Callable[[Diagnostic], bool], name: bool) -> str:
    mark = f" {escape(FIXABLE_MARK)}" if fixable(d) else ""
    label = f" [dim]{escape('[' + d.name + ']')}[/]" if name else ""
    return f"[bold]{escape(location(d))}:[/] [{STYLE[d.severity]}]{d.code}[/]{mark}{label} {escape(d.message)}"


def render_concise(console: Console, diagnostics: Sequence[Diagnostic], fixable: Callable[[Diagnostic], bool]) -> None:
    for d in diagnostics:
        console.print(_head(d, fixable, name=False), highlight=False)


def render_full(
    console: Console, diagnostics: Sequence[Diagnostic], sources: SourceLines, fixable: Callable[[Diagnostic], bool]
) -> None:
    for d in diagnostics:
        console.print(_head(d, fixable, name=True), highlight=False)
        lines = sources.get((d.path, d.cell))
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
        console.print(f"  [dim]= docs: {escape(d.url)}[/]", highlight=False)
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


def fix_hints(available: int, hidden: int, unsafe: bool) -> list[str]:
    """ruff's hints under the summary: how many fixes `--fix` would apply, how many need `--unsafe-fixes`."""
    out = []
    if available:
        noun = "fix" if available == 1 else "fixes"
        how = "--fix --unsafe-fixes" if unsafe else "--fix"
        out.append(f"{FIXABLE_MARK} {available} {noun} available (with {how}).")
    if hidden:
        noun = "hidden fix" if hidden == 1 else "hidden fixes"
        out.append(f"{hidden} {noun} can be enabled with --unsafe-fixes.")
    return out


def statistics_rows(diagnostics: Sequence[Diagnostic], fixable: Callable[[Diagnostic], bool]) -> list[dict[str, object]]:
    """Findings per rule, most frequent first: code, name, count and how many are fixable."""
    counts = Counter((d.code, d.name) for d in diagnostics)
    fixes = Counter((d.code, d.name) for d in diagnostics if fixable(d))
    return [
        {"code": code, "name": name, "count": n, "fixable": fixes[(code, name)]}
        for (code, name), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def render_statistics(console: Console, rows: Sequence[dict[str, object]]) -> None:
    table = Table(box=None, show_header=False, pad_edge=False)
    for row in rows:
        mark = FIXABLE_MARK if row["fixable"] else ""
        table.add_row(str(row["count"]), str(row["code"]), escape(mark), str(row["name"]))
    console.print(table)
