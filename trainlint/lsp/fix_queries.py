"""The fixes a document's code actions offer, worked out in the server's contained worker: the safe
fixes that apply together ("fix all"), and which findings' fixes pass the command line's after-fix
re-check on the current text (`trainlint.fixes.recheck`). A mixin of the server (`server.py`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pygls.uris import to_fs_path

from trainlint.diagnostics import Diagnostic
from trainlint.engine.workers import ResidentWorker, WorkerFailure
from trainlint.lsp.contained import checked_cell_fixes, checked_fixes, safe_cell_fixes, safe_fixes
from trainlint.lsp.documents import DocumentState, clean_text, split_lines
from trainlint.lsp.notebooks import CellText, by_cell_number, code_size

if TYPE_CHECKING:
    from trainlint.config import Settings


class FixQueries:
    """What the server's code actions ask of its worker about fixes (see `server.TrainlintServer`)."""

    contained: ResidentWorker

    if TYPE_CHECKING:  # (the server's)
        def notebook_of(self, cell_uri: str) -> str | None: ...
        def open_text(self, uri: str) -> tuple[int | None, str] | None: ...
        def notebook_cells(self, uri: str) -> list[CellText] | None: ...
        def settings_for(self, path: Path) -> Settings: ...

    async def safe_fixes_for(self, uri: str) -> dict[str, tuple[list[Diagnostic], list[str]]] | None:
        """The safe fixes that apply together to a document's current text (to every cell of its
        notebook, for a cell), by document, with their lines; None if the text changed meanwhile."""
        notebook = self.notebook_of(uri)
        if notebook is not None:
            return await self._notebook_safe_fixes(notebook)
        opened = self.open_text(uri)
        if opened is None:
            return None
        source = clean_text(opened[1])
        path = Path(to_fs_path(uri) or uri)
        settings = self.settings_for(path)
        if len(source.encode("utf-8")) > settings.max_file_size:
            return {}
        fixed = await self._contained_or_nothing(safe_fixes, source, str(path), settings)
        return {uri: (fixed, split_lines(source))} if self.open_text(uri) == opened else None

    async def _notebook_safe_fixes(self, uri: str) -> dict[str, tuple[list[Diagnostic], list[str]]] | None:
        cells = self.notebook_cells(uri)
        if cells is None:
            return None
        path = Path(to_fs_path(uri) or uri)
        settings = self.settings_for(path)
        if code_size(cells) > settings.max_file_size:
            return {}
        fixed = await self._contained_or_nothing(safe_cell_fixes, cells, str(path), settings)
        if self.notebook_cells(uri) != cells:
            return None
        return {
            cell.uri: (found, split_lines(cell.text)) for cell, found in zip(cells, by_cell_number(cells, fixed)) if found
        }

    async def checked_fixes_for(self, uri: str, state: DocumentState, wanted: list[Diagnostic]) -> list[Diagnostic]:
        """The findings among `wanted` (published for the document's current text, in `state`) whose
        fix passes the command line's after-fix re-check on that text; remembered per text, as the
        cursor comes back to a line."""
        unknown = [d for d in wanted if d not in state.fix_checked]
        if unknown:
            passed = await self._recheck(uri, unknown)
            if passed is None:
                return []  # the text changed meanwhile: its own findings come with its lint
            state.fix_checked.update((d, d in passed) for d in unknown)
        return [d for d in wanted if state.fix_checked.get(d)]

    async def _recheck(self, uri: str, wanted: list[Diagnostic]) -> list[Diagnostic] | None:
        notebook = self.notebook_of(uri)
        path = Path(to_fs_path(notebook or uri) or notebook or uri)
        settings = self.settings_for(path)
        if notebook is not None:
            cells = self.notebook_cells(notebook)
            if cells is None or code_size(cells) > settings.max_file_size:
                return []
            found = await self._contained_or_nothing(checked_cell_fixes, cells, str(path), settings, wanted)
            return found if self.notebook_cells(notebook) == cells else None
        opened = self.open_text(uri)
        if opened is None:
            return None
        source = clean_text(opened[1])
        if len(source.encode("utf-8")) > settings.max_file_size:
            return []
        found = await self._contained_or_nothing(checked_fixes, source, str(path), settings, wanted)
        return found if self.open_text(uri) == opened else None

    async def _contained_or_nothing(self, function: Any, *args: Any) -> Any:
        """`function(*args)` in the contained child, off the event loop; [] if the child fails."""

        def call() -> Any:
            try:
                return self.contained.call(function, *args)
            except WorkerFailure:
                return []

        return await asyncio.get_running_loop().run_in_executor(None, call)
