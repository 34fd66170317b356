"""`--format lsp`: `{file URI: LSP Diagnostic[]}` for editors that run trainlint as a command.

LSP positions are 0-based and count UTF-16 code units; trainlint's are 1-based code points, so each
column is converted against its line's text. A finding in a notebook has its range in its cell's
lines and the cell's 1-based number under `data.cell`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

from trainlint.diagnostics import Diagnostic, Severity, chain_text
from trainlint.reading import resolved

SOURCE = "trainlint"
LSP_SEVERITY = {Severity.ERROR: 1, Severity.WARNING: 2, Severity.INFO: 3}


def utf16_column(line: str | None, column: int) -> int:
    """0-based UTF-16 offset of a 1-based code-point column in `line`."""
    index = max(column - 1, 0)
    if line is None:
        return index
    prefix = line[:index]
    return len(prefix.encode("utf-16-le")) // 2 + max(index - len(line), 0)


def lsp_range(line: int, column: int, end_line: int, end_column: int, lines: Sequence[str] | None) -> dict[str, object]:
    """An LSP Range for 1-based (line, column) positions, end exclusive."""

    def text(number: int) -> str | None:
        return lines[number - 1] if lines is not None and 0 < number <= len(lines) else None

    return {
        "start": {"line": max(line - 1, 0), "character": utf16_column(text(line), column)},
        "end": {"line": max(end_line - 1, 0), "character": utf16_column(text(end_line), end_column)},
    }


def to_lsp(diagnostic: Diagnostic, lines: Sequence[str] | None = None) -> dict[str, object]:
    """One LSP `Diagnostic` object; `data` carries the fix (if any) for code actions."""
    d = diagnostic
    message = f"{d.message}\nFix: {d.hint}" if d.hint else d.message
    out: dict[str, object] = {
        "range": lsp_range(d.line, d.column, d.end_line, d.end_column, lines),
        "severity": LSP_SEVERITY[d.severity],
        "code": d.code,
        "codeDescription": {"href": d.url},
        "source": SOURCE,
        "message": message,
    }
    if d.chains:
        out["relatedInformation"] = [
            {
                "location": {"uri": file_uri(loc.path), "range": lsp_range(loc.line, loc.column, loc.line, loc.column, None)},
                "message": f"called every step (runs every step: {chain_text(chain)})",
            }
            for chain in d.chains
            for loc in chain
        ]
    out["data"] = {
        "name": d.name,
        **({"cell": d.cell} if d.cell is not None else {}),
        **({"fix": d.fix.to_dict()} if d.fix is not None else {}),
    }
    return out


def file_uri(path: str) -> str:
    return resolved(Path(path)).as_uri()


def render(
    paths: Sequence[str], diagnostics: Sequence[Diagnostic], sources: Mapping[tuple[str, int | None], Sequence[str]]
) -> str:
    """Every linted file's URI mapped to its diagnostics (an empty list clears a file's markers)."""
    out: dict[str, list[dict[str, object]]] = {}
    for path in paths:
        if path != "-":
            out.setdefault(file_uri(path), [])
    for d in diagnostics:
        key = file_uri(d.path) if d.path != "-" else "untitled:-"
        out.setdefault(key, []).append(to_lsp(d, sources.get((d.path, d.cell))))
    return json.dumps(out, indent=2)
