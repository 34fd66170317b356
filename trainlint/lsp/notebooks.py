"""Notebooks opened through LSP notebook sync: the cells, joined, are linted as one module.

The client sends a notebook as an ordered list of cells, each its own text document. The cells
are written out as a minimal notebook and linted by `trainlint.notebook` (code cells joined as
the command line joins them, magics blanked), which reports each finding in its 1-based cell with
cell-relative lines: exactly what is published on that cell's document.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types

from trainlint.diagnostics import Diagnostic

NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[
        types.NotebookDocumentFilterWithCells(
            notebook="*", cells=[types.NotebookCellLanguage(language="python")]
        )
    ]
)


@dataclass(frozen=True)
class CellText:
    """One cell as the client last sent it."""

    uri: str
    version: int | None
    code: bool
    text: str


def as_notebook_json(cells: list[CellText]) -> str:
    """A minimal .ipynb text holding the cells in order (markup cells as markdown)."""
    return json.dumps(
        {
            "cells": [
                {"cell_type": "code" if c.code else "markdown", "metadata": {}, "source": c.text, **({"outputs": [], "execution_count": None} if c.code else {})}
                for c in cells
            ],
            "metadata": {"language_info": {"name": "python"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


def joined_code(cells: list[CellText]) -> str:
    """The code cells one after another (for the nesting pre-check, which is line-agnostic)."""
    return "\n".join(c.text for c in cells if c.code)


def notebook_name(path: Path) -> str:
    """The name a notebook is linted under: it must end in .ipynb to be read as a notebook."""
    return str(path) if path.suffix == ".ipynb" else f"{path}.ipynb"


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
