"""Notebooks opened through LSP notebook sync: the cells, joined, are linted as one module.

The client sends a notebook as an ordered list of cells, each its own text document. The code
cells are joined by `trainlint.engine.notebook.join_cells` as the command line joins an .ipynb's (magics
blanked) and linted as one module; each finding is mapped back to its 1-based cell (counting every
cell) with cell-relative lines: exactly what is published on that cell's document.

Without lsprotocol: the contained worker imports this (`CellText`), and lsprotocol's types would
be seconds of its start-up (the server's notebook sync options are in `server.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainlint.diagnostics import Diagnostic


@dataclass(frozen=True)
class CellText:
    """One cell as the client last sent it."""

    uri: str
    version: int | None
    code: bool
    text: str


def code_size(cells: list[CellText]) -> int:
    """Bytes of code in the cells (what max-file-size bounds)."""
    return sum(len(c.text.encode("utf-8")) for c in cells if c.code)


def by_cell_number(cells: list[CellText], diagnostics: list[Diagnostic]) -> list[list[Diagnostic]]:
    """The findings of each cell, in the cells' order (findings without a cell are left out)."""
    out: list[list[Diagnostic]] = [[] for _ in cells]
    for d in diagnostics:
        if d.cell is not None and 0 < d.cell <= len(cells):
            out[d.cell - 1].append(d)
    return out


def by_cell(cells: list[CellText], diagnostics: list[Diagnostic]) -> dict[str, list[Diagnostic]]:
    """Each code cell's findings (every code cell present, so that fixed cells are cleared).

    A finding without a cell (a TL000 about the whole notebook) goes on the first code cell.
    """
    out = {c.uri: found for c, found in zip(cells, by_cell_number(cells, diagnostics)) if c.code}
    loose = [d for d in diagnostics if d.cell is None or not 0 < d.cell <= len(cells)]
    first_code = next((c.uri for c in cells if c.code), None)
    if loose and first_code is not None:
        out[first_code] = loose + out[first_code]
    return out
