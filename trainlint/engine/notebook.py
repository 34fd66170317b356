"""Jupyter notebooks: their code cells joined into one module, findings mapped back to cells.

Cells are joined as ruff joins them (`trainlint.reading.notebook_code`, which the project's
analysis reads too): code cells only, in order, each ending with a newline, so that a loop in one
cell calling a step function defined in an earlier one is analysed like one script, IPython syntax
blanked out so that every line keeps its number.

A finding is reported in its cell (`Diagnostic.cell`, counting every cell from 1, as the notebook
shows them) with lines relative to the cell, and with its span in the notebook's JSON text
(`Diagnostic.file_span`) for formats that point into files (GitHub annotations, SARIF). Fixes are
written back by replacing only the `source` values of the edited cells in the JSON text, so outputs,
metadata, key order and indentation stay byte for byte as they were.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from functools import cached_property
from json.decoder import scanstring
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from trainlint.diagnostics import Diagnostic, Edit, Fix
from trainlint.engine.results import FileResult, error_diagnostic
from trainlint.reading import blank_magics, code_cells, is_python_notebook, split_cell

if TYPE_CHECKING:
    from trainlint.config import Settings

_WS = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")


class NotebookError(ValueError):
    """Text that is not a notebook; `line` and `column` (1-based) say where, when known."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.line, self.column = line, column


@dataclass
class Cell:
    number: int  # 1-based, counting every cell of the notebook
    lines: list[str]  # the cell's source split on "\n" (without them)
    first_line: int  # where the cell starts in the joined code (1-based)
    items: list[tuple[int, int]] = field(default_factory=list)  # raw spans of the source's JSON strings
    value_span: tuple[int, int] = (0, 0)  # the raw span of the cell's `source` value


@dataclass
class Notebook:
    """A parsed notebook: its JSON text, its code cells and their joined code."""

    text: str
    cells: list[Cell]
    code: str
    python: bool = True

    @cached_property
    def line_starts(self) -> list[int]:
        """The offset in `text` where each line starts."""
        return [0, *(m.end() for m in re.finditer("\n", self.text))]

    def cell_at(self, line: int) -> tuple[Cell, int]:
        """The cell holding a 1-based line of the joined code, and the line within that cell."""
        index = max(bisect_right([c.first_line for c in self.cells], line) - 1, 0)
        cell = self.cells[index]
        return cell, min(max(line - cell.first_line + 1, 1), max(len(cell.lines), 1))

    def to_cell(self, edit: Edit) -> Edit:
        """An edit of the joined code, located in its cell."""
        cell, line = self.cell_at(edit.line)
        return replace(edit, line=line, end_line=max(edit.end_line - cell.first_line + 1, line), cell=cell.number)

    def joined_line(self, cell: int | None, line: int) -> int:
        """The line of the joined code where a line of a cell is."""
        return next(c.first_line for c in self.cells if c.number == cell) + line - 1

    def to_joined(self, item: Edit | Diagnostic) -> Edit | Diagnostic:
        """An edit or a diagnostic located in a cell, located in the joined code."""
        return replace(item, line=self.joined_line(item.cell, item.line), end_line=self.joined_line(item.cell, item.end_line), cell=None)


def _members(text: str, i: int) -> Iterator[tuple[str, int, int]]:
    """(key, value start, value end) of the JSON object at `i` (valid JSON assumed)."""
    i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
    while text[i] != "}":
        key, i = scanstring(text, i + 1)
        start = _WS.match(text, _WS.match(text, i).end() + 1).end()  # type: ignore[union-attr]
        end = _skip(text, start)
        yield key, start, end
        i = _WS.match(text, end).end()  # type: ignore[union-attr]
        if text[i] == ",":
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]


def _items(text: str, i: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each value of the JSON array at `i`."""
    i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
    while text[i] != "]":
        end = _skip(text, i)
        yield i, end
        i = _WS.match(text, end).end()  # type: ignore[union-attr]
        if text[i] == ",":
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]


def _skip(text: str, i: int) -> int:
    """The end of the JSON value starting at `i`."""
    if text[i] == '"':
        return scanstring(text, i + 1)[1]
    if text[i] == "{":
        end = i
        for _, _, end in _members(text, i):
            pass
        return text.index("}", end) + 1
    if text[i] == "[":
        end = i
        for _, end in _items(text, i):
            pass
        return text.index("]", end) + 1
    match = _SCALAR.match(text, i)
    return match.end() if match else i + 1


def _source_spans(text: str) -> list[tuple[tuple[int, int], list[tuple[int, int]]]]:
    """For each cell: the raw span of its `source` value and those of the strings in it."""
    start = _WS.match(text).end()  # type: ignore[union-attr]
    out: list[tuple[tuple[int, int], list[tuple[int, int]]]] = []
    for key, value, _ in _members(text, start):
        if key != "cells" or text[value] != "[":
            continue
        out = []  # a repeated key: the last one counts, as for json.loads
        for cell_start, _ in _items(text, value):
            span, strings = (0, 0), []
            for cell_key, s, e in _members(text, cell_start) if text[cell_start] == "{" else ():
                if cell_key == "source":
                    span = (s, e)
                    strings = list(_items(text, s)) if text[s] == "[" else [(s, e)]
            out.append((span, strings))
    return out


def load(text: str) -> Notebook:
    """Parse a notebook's JSON text; raises NotebookError for what is not a notebook."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotebookError(f"notebook is not valid JSON: {exc.msg}", exc.lineno, exc.colno) from exc
    except RecursionError as exc:
        raise NotebookError("notebook is not valid JSON: nesting too deep") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise NotebookError("not a Jupyter notebook: no `cells` list")
    try:
        spans = _source_spans(text)
    except RecursionError as exc:
        raise NotebookError("notebook is not valid JSON: nesting too deep") from exc
    sources: list[tuple[int, str, list[tuple[int, int]], tuple[int, int]]] = []
    for number, source in code_cells(data["cells"]):
        if not isinstance(source, str):
            raise NotebookError(f"not a Jupyter notebook: cell {number} has a `source` that is not text")
        span, items = spans[number - 1] if number <= len(spans) else ((0, 0), [])
        sources.append((number, source, items, span))
    notebook = join_cells([(number, source) for number, source, _, _ in sources], is_python_notebook(data))
    for cell, (_, _, items, span) in zip(notebook.cells, sources):
        cell.items, cell.value_span = items, span
    notebook.text = text
    return notebook


def join_cells(sources: Sequence[tuple[int, str]], python: bool = True) -> Notebook:
    """A notebook of code cells given as (cell number, source text): their joined code and positions.

    For clients that hold the cells rather than the JSON (a language server's notebook documents);
    its findings map back with `map_diagnostic`.
    """
    cells: list[Cell] = []
    code: list[str] = []
    for number, source in sources:
        lines = split_cell(source)
        cells.append(Cell(number, lines, len(code) + 1))
        code.extend(blank_magics(lines))
    return Notebook("", cells, "".join(f"{line}\n" for line in code), python)


def cell_lines(text: str) -> dict[int, list[str]]:
    """Each code cell's lines by cell number, for code frames."""
    return {cell.number: cell.lines for cell in load(text).cells}


def _raw_offset(text: str, start: int, index: int) -> int:
    """The offset in `text` of the `index`-th decoded character of the JSON string at `start`."""
    i, seen = start + 1, 0
    while seen < index and text[i] != '"':
        if text[i] == "\\":
            i += 6 if text[i + 1] == "u" else 2
            if text[i - 6 : i - 4] == "\\u" and 0xD800 <= int(text[i - 4 : i], 16) < 0xDC00:
                i += 6  # a surrogate pair is one character
        else:
            i += 1
        seen += 1
    return i


def _file_position(nb: Notebook, cell: Cell, line: int, column: int) -> tuple[int, int]:
    """A (cell, line, column) position as a (line, column) of the notebook's JSON text."""
    offset = sum(len(x) + 1 for x in cell.lines[: line - 1]) + column - 1
    for start, end in cell.items:
        length = len(json.loads(nb.text[start:end]))
        if offset < length or (start, end) == cell.items[-1]:
            raw = _raw_offset(nb.text, start, offset)
            file_line = bisect_right(nb.line_starts, raw)
            return file_line, raw - nb.line_starts[file_line - 1] + 1
        offset -= length
    return 1, 1


def map_diagnostic(nb: Notebook, d: Diagnostic) -> Diagnostic:
    """A diagnostic of the joined code, located in its cell and in the notebook's JSON text."""
    if not nb.cells:
        return d
    cell, line = nb.cell_at(d.line)
    end_cell, end_line = nb.cell_at(d.end_line)
    end_column = d.end_column
    if end_cell is not cell:  # (a span cannot cross cells; clamp what reaches past the last one)
        end_line = max(len(cell.lines), 1)
        end_column = len(cell.lines[-1]) + 1 if cell.lines else 1
    fix = d.fix
    if fix is not None:
        fix = Fix(fix.description, tuple(nb.to_cell(e) for e in fix.edits), fix.applicability)
    span = None
    if cell.items and cell.lines:
        span = (*_file_position(nb, cell, line, d.column), *_file_position(nb, cell, end_line, end_column))
    return replace(d, line=line, end_line=end_line, end_column=end_column, fix=fix, cell=cell.number, file_span=span)


def lint_cells(text: str, name: str, settings: Settings, lint_python: Callable[[str, str, Settings], FileResult]) -> FileResult:
    """Lint a notebook's code cells as one module with `lint_python`; a file that is not a notebook gets
    TL000, an empty file nothing (Jupyter opens it as a new notebook)."""
    if not text.strip():
        return FileResult(name, source=text)
    try:
        nb = load(text)
    except NotebookError as exc:
        return FileResult(name, [error_diagnostic(name, str(exc), exc.line, exc.column)], source=text)
    if not nb.python:
        return FileResult(name, source=text)
    # max-file-size bounds the code that is linted, not the outputs stored with it
    size = sum(len(line.encode("utf-8", "surrogatepass")) + 1 for cell in nb.cells for line in cell.lines)
    if size > settings.max_file_size:
        message = f"notebook too large to lint ({size} bytes of code cells > max-file-size {settings.max_file_size})"
        return FileResult(name, [error_diagnostic(name, message)], source=text)
    result = lint_python(nb.code, name, settings)
    result.diagnostics = [map_diagnostic(nb, d) for d in result.diagnostics]
    result.source = text
    return result


def _splice(text: str, edits: Sequence[Edit]) -> str:
    """Apply non-overlapping edits (1-based lines and columns of `text`)."""
    starts = [0, *(m.end() for m in re.finditer("\n", text))]

    def offset(line: int, column: int) -> int:
        return min(starts[line - 1] + column - 1, len(text)) if line <= len(starts) else len(text)

    for e in sorted(edits, key=lambda e: (e.line, e.column), reverse=True):
        text = text[: offset(e.line, e.column)] + e.content + text[offset(e.end_line, e.end_column) :]
    return text


def _encode_source(text: str, cell: Cell, source: str) -> str:
    """A cell's new `source` value, written in the style of the old one (list or string, its spacing)."""
    (start, end), items = cell.value_span, cell.items
    ascii_only = "\\u" in text and not any(ord(ch) > 127 for ch in text)
    if text[start] != "[":
        return json.dumps(source, ensure_ascii=ascii_only)
    if items:
        opening, closing = text[start + 1 : items[0][0]], text[items[-1][1] : end - 1]
    else:  # `[]`: as Jupyter writes it, one space deeper than the key
        line_start = text.rfind("\n", 0, start) + 1
        key_indent = re.match(r"[ \t]*", text[line_start:]).group()  # type: ignore[union-attr]
        opening, closing = f"\n{key_indent} ", f"\n{key_indent}"
    if len(items) > 1:
        separator = text[items[0][1] : items[1][0]]
    else:
        separator = f",{opening}" if opening else ", "
    lines = re.findall(r"[^\n]*\n|[^\n]+$", source)  # split at "\n" only, as Jupyter does
    if not lines:
        return "[]"
    return f"[{opening}{separator.join(json.dumps(line, ensure_ascii=ascii_only) for line in lines)}{closing}]"


def apply_fixes(
    text: str,
    diagnostics: Sequence[Diagnostic],
    apply_to_code: Callable[[str, Sequence[Diagnostic]], tuple[str, list[Diagnostic]]],
) -> tuple[str, list[Diagnostic]]:
    """Apply the fixes of notebook diagnostics (edits located in cells) to the notebook's JSON text.

    Overlapping fixes are skipped and the joined code must still parse, as for a Python file
    (`apply_to_code`, the fixer of Python source, decides both); returns the new text and the fixes applied.
    """
    try:
        nb = load(text)
    except NotebookError:  # (changed on disk since it was linted)
        return text, []
    by_number = {c.number: c for c in nb.cells}
    joined: list[Diagnostic] = []
    for d in diagnostics:
        assert d.fix is not None
        edits = tuple(nb.to_joined(e) for e in d.fix.edits if e.cell in by_number)
        joined.append(replace(d, cell=None, fix=replace(d.fix, edits=edits)))
    _, applied = apply_to_code(nb.code, joined)
    original_of = {id(j): d for j, d in zip(joined, diagnostics)}
    chosen = [original_of[id(a)] for a in applied]
    edits_by_cell: dict[int, list[Edit]] = {}
    for d in chosen:
        assert d.fix is not None
        for e in d.fix.edits:
            edits_by_cell.setdefault(e.cell or 0, []).append(e)
    new = text
    for cell in sorted((by_number[n] for n in edits_by_cell), key=lambda c: c.value_span, reverse=True):
        source = _splice("".join(f"{line}\n" for line in cell.lines), edits_by_cell[cell.number])
        original = json.loads(text[cell.value_span[0] : cell.value_span[1]])
        if not ("".join(original) if isinstance(original, list) else original).endswith("\n"):
            source = source[:-1] if source.endswith("\n") else source
        start, end = cell.value_span
        new = new[:start] + _encode_source(text, cell, source) + new[end:]
    return new, chosen


def notebook_noqa_edits(text: str, diagnostics: Sequence[Diagnostic]) -> list[Edit]:
    """`--add-noqa` in a notebook: the edits of `trainlint.noqa.noqa_edits`, located in cells."""
    from trainlint.noqa import noqa_edits

    nb = load(text)
    numbers = {c.number for c in nb.cells}
    joined = [nb.to_joined(d) for d in diagnostics if d.cell in numbers]
    return [nb.to_cell(e) for e in noqa_edits(nb.code, joined)]  # type: ignore[arg-type]
