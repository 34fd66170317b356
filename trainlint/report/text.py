"""`--format text` (with source excerpts) and `--format concise` (one line per finding).

Lines are made of (text, style) segments and printed as they are: text taken from the user's files
(paths, messages, source lines) is never read as markup or emoji codes, so `:100:` and `[bold]` stay as
they are, and its control characters are shown as escapes (`visible`). Where no style can show (stdout
is not a terminal, `--color never`, `NO_COLOR`), a `PlainConsole` prints the text without importing
rich; elsewhere `StyledConsole` prints through rich.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from typing import IO, TYPE_CHECKING, Callable, Protocol, Sequence

from trainlint.diagnostics import Diagnostic, Severity, chain_text

if TYPE_CHECKING:
    from rich.console import Console

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
FIXABLE_MARK = "[*]"
SourceLines = dict[tuple[str, int | None], list[str]]  # (path, notebook cell) -> lines
Segment = tuple[str, str]  # text, and its rich style ("" for none)


class Lines(Protocol):
    def line(self, *segments: Segment) -> None: ...


class PlainConsole:
    """Prints lines as plain text (what rich prints where no style shows: soft wrap, no highlighting)."""

    def __init__(self, file: IO[str] | None = None) -> None:
        self.file = file

    def line(self, *segments: Segment) -> None:
        text = visible("".join(text for text, _ in segments)).expandtabs(8)  # rich's tab size
        (self.file or sys.stdout).write(text + "\n")


# What a terminal acts on instead of showing, or what reorders a line: C0 controls but the tab, DEL,
# C1 controls, the bidirectional marks, embeddings, overrides and isolates ("Trojan Source"), the
# line and paragraph separators, and lone surrogates (a file name that is not UTF-8), which no
# UTF-8 stream can write.
_HIDDEN = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 problem`, `2 problems`: a count with its noun in the right number (`nouns` when not noun + "s")."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def visible(text: str) -> str:
    """`text` with each control character written as an escape (ESC as `\\x1b`, RLO as `\\u202e`):
    a file's name or contents must not retitle or clear the terminal, move the cursor, hide lines or
    start a new one. Tabs are kept."""
    return _HIDDEN.sub(_escape, text)


def visible_lines(text: str) -> list[str]:
    """`text` split at its line breaks (a traceback's lines), each line `visible`: the lines are
    kept for the caller to indent, and no control character inside one (a lone carriage return
    included) can start or rewrite another. Blank lines at the end are dropped."""
    return [visible(line) for line in text.rstrip("\r\n").split("\n")] if text.strip() else [visible(text)]


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class StyledConsole:
    """Prints lines through a rich console, with their styles."""

    def __init__(self, console: Console) -> None:
        from rich.text import Text

        self.console = console
        self._text = Text

    def line(self, *segments: Segment) -> None:
        self.console.print(self._text.assemble(*((visible(text), style) for text, style in segments)), highlight=False)


def location(d: Diagnostic) -> str:
    """`path:line:column`, or ruff's `path:cell N:line:column` for a finding in a notebook."""
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    return f"{d.path}:{cell}{d.line}:{d.column}"


def _head(d: Diagnostic, fixable: Callable[[Diagnostic], bool], name: bool) -> list[Segment]:
    out: list[Segment] = [(f"{location(d)}:", "bold"), (" ", ""), (d.code, STYLE[d.severity])]
    if fixable(d):
        out.append((f" {FIXABLE_MARK}", ""))
    if name:
        out += [(" ", ""), (f"[{d.name}]", "dim")]
    out.append((f" {d.message}", ""))
    return out


def render_concise(out: Lines, diagnostics: Sequence[Diagnostic], fixable: Callable[[Diagnostic], bool]) -> None:
    for d in diagnostics:
        out.line(*_head(d, fixable, name=False), *([(d.every_step_via(), "dim")] if d.chains else []))


def render_full(out: Lines, diagnostics: Sequence[Diagnostic], sources: SourceLines, fixable: Callable[[Diagnostic], bool]) -> None:
    for d in diagnostics:
        out.line(*_head(d, fixable, name=True))
        lines = sources.get((d.path, d.cell))
        if lines and 0 < d.line <= len(lines):
            text = lines[d.line - 1].rstrip("\n").expandtabs(1)
            gutter = str(d.line)
            pad = " " * len(gutter)
            end = d.end_column if d.end_line == d.line else len(text) + 1
            start = _shown_column(text, d.column)  # an escaped control character takes several columns
            width = max(1, _shown_column(text, end) - start)
            out.line((f"{pad} |", "blue"))
            out.line((f"{gutter} |", "blue"), (f" {text}", ""))
            out.line((f"{pad} |", "blue"), (" " + " " * start, ""), ("^" * width, STYLE[d.severity]))
        for chain in d.chains:
            out.line(("  ", ""), ("= note:", "cyan"), (f" runs every step: {chain_text(chain)}", ""))
        if d.hint:
            out.line(("  ", ""), ("= fix:", "green"), (f" {d.hint}", ""))
        if d.fix is not None:
            kind = "safe" if d.fix.applicability.value == "safe" else "unsafe"
            out.line(("  ", ""), (f"= autofix ({kind}):", "green"), (f" {d.fix.description}", ""))
        out.line(("  ", ""), (f"= docs: {d.url}", "dim"))
        out.line()


def _shown_column(text: str, column: int) -> int:
    """Where 1-based `column` of `text` is printed (0-based), once control characters are escaped."""
    return len(visible(text[: column - 1])) + max(0, column - 1 - len(text))


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
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, show_header=False, pad_edge=False)
    for row in rows:
        mark = FIXABLE_MARK if row["fixable"] else ""
        table.add_row(str(row["count"]), str(row["code"]), escape(mark), str(row["name"]))
    console.print(table)
