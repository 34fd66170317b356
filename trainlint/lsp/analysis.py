"""What the server's worker process runs: lint a buffer or a notebook's cells, or find their fixes
that pass the command line's after-fix re-check (`trainlint.fixes.recheck`).

Module-level functions, so that they can be named across the pipe (see `trainlint/engine/workers.py`).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import ContextManager

from trainlint.config import Settings
from trainlint.diagnostics import Diagnostic
from trainlint.engine.results import FileResult
from trainlint.engine.lint import lint_alone, lint_python, lint_source
from trainlint.fixes import applicable, checked, first_batch
from trainlint.lsp.cached_results import cached_result, keep_result, result_cache
from trainlint.lsp.notebooks import CellText
from trainlint.engine.notebook import Notebook, join_cells, map_diagnostic
from trainlint.project.shared import shared
from trainlint.project.store import keeping_summaries
from trainlint.report.baseline import BaselineError, new_findings, read_baseline
from trainlint.report.render import python_lines
from trainlint.report.text import SourceLines


def lint_buffer(source: str, name: str, settings: Settings) -> FileResult:
    """Lint an editor buffer as a file is linted (the engine's pre-check refuses what the parser must
    not see), with the project's summaries that `trainlint check` kept in the result cache; a buffer
    as its file is on disk is `check`'s result for the file, from the cache where it holds it."""
    shared().rescan()  # this process outlives many edits: the project's modules may have changed
    return _cached_or_linted(source, name, settings)


def _cached_or_linted(source: str, name: str, settings: Settings, looked_up: bool = False) -> FileResult:
    """The buffer's cached result (unless `looked_up` already missed), else its analysis, kept."""
    result = None if looked_up else cached_result(source, name, settings)
    if result is None:
        with _keeping_summaries():
            result = lint_source(source, name, settings)
        keep_result(source, name, settings, result)
    return _without_baseline(result, settings, {(name, None): python_lines(source)})


def _keeping_summaries() -> ContextManager[None]:
    """The project's summaries read from (and kept in) the user's result cache, as `check` keeps them:
    the first lint of a buffer in a large project need not summarise it again."""
    cache = result_cache()
    if cache is None:
        return nullcontext()
    from trainlint.engine.cache import code_key

    return keeping_summaries(cache.read_entry, cache.write_entry, code_key())


# a file just opened is shown alone first when its analysis would first summarise more than this of
# the modules it imports (about 2,000 lines: a second or more of analysis)
ALONE_FIRST_BYTES = 64 * 1024


def lint_opened(source: str, name: str, settings: Settings) -> tuple[FileResult, bool]:
    """Lint a buffer just opened: (the result, whether it is the file's result alone). Where its
    full analysis would first have to summarise a large part of the project (`ALONE_FIRST_BYTES`
    of the modules it imports, not summarised yet in this process), the file is analysed alone
    first (`lint_alone`), quickly, and the caller asks for the full result (`lint_buffer`) next."""
    project = shared()
    project.rescan()
    cached = cached_result(source, name, settings)
    if cached is not None:
        return _without_baseline(cached, settings, {(name, None): python_lines(source)}), False
    if name.endswith(".py") and project.unsummarised(name, source) > ALONE_FIRST_BYTES:
        result = _without_baseline(lint_alone(source, name, settings), settings, {(name, None): python_lines(source)})
        return result, True
    return _cached_or_linted(source, name, settings, looked_up=True), False


def _without_baseline(result: FileResult, settings: Settings, sources: SourceLines) -> FileResult:
    """Leave out what the configuration's baseline records, as `trainlint check` does (an unreadable
    baseline hides nothing here: the command line reports it)."""
    if settings.baseline is None or not result.diagnostics:
        return result
    try:
        known = read_baseline(settings.baseline)
    except BaselineError:
        return result
    result.diagnostics, _ = new_findings(result.diagnostics, sources, settings.baseline, known)
    return result


def safe_fixes(source: str, name: str, settings: Settings) -> list[Diagnostic]:
    """The findings whose safe fixes apply together and pass the re-check: `--fix`'s first batch."""
    result = lint_buffer(source, name, settings)
    return first_batch(source, name, settings, result, applicable(result.diagnostics, unsafe=False), lint=lint_source)


def checked_fixes(source: str, name: str, settings: Settings, wanted: list[Diagnostic]) -> list[Diagnostic]:
    """The findings among `wanted` (as published for this text) whose fix, alone, passes the re-check."""
    result = lint_buffer(source, name, settings)
    return checked(source, name, settings, result, wanted, lint=lint_source)


def _lint_joined(notebook: Notebook, name: str, settings: Settings) -> FileResult:
    """Lint a notebook's joined code (positions in the joined code)."""
    return lint_python(notebook.code, name, settings)


def _joined(cells: list[CellText]) -> Notebook:
    return join_cells([(number, c.text) for number, c in enumerate(cells, start=1) if c.code])


def lint_cells(cells: list[CellText], name: str, settings: Settings) -> FileResult:
    """Lint a notebook's cells as one module; findings carry their 1-based cell and cell lines."""
    notebook = _joined(cells)
    shared().rescan()
    with _keeping_summaries():
        result = _lint_joined(notebook, name, settings)
    result.diagnostics = [map_diagnostic(notebook, d) for d in result.diagnostics]
    cells_text = {(name, number): python_lines(c.text) for number, c in enumerate(cells, start=1) if c.code}
    return _without_baseline(result, settings, cells_text)


def safe_cell_fixes(cells: list[CellText], name: str, settings: Settings) -> list[Diagnostic]:
    """The notebook's findings whose safe fixes apply together, checked on the joined code (where a
    fix that breaks the module is refused as in a file), located in their cells."""
    notebook = _joined(cells)
    result = _lint_joined(notebook, name, settings)
    applied = first_batch(notebook.code, name, settings, result, applicable(result.diagnostics, unsafe=False), lint=_lint_code)
    return [map_diagnostic(notebook, d) for d in applied]


def checked_cell_fixes(cells: list[CellText], name: str, settings: Settings, wanted: list[Diagnostic]) -> list[Diagnostic]:
    """The notebook's findings among `wanted` (located in their cells) whose fix, alone, passes the
    re-check on the joined code."""
    notebook = _joined(cells)
    result = _lint_joined(notebook, name, settings)
    located = {id(d): map_diagnostic(notebook, d) for d in result.diagnostics}
    asked = [d for d in result.diagnostics if located[id(d)] in wanted]
    return [located[id(d)] for d in checked(notebook.code, name, settings, result, asked, lint=_lint_code)]


def _lint_code(code: str, name: str, settings: Settings) -> FileResult:
    """Lint a fixed notebook's joined code (as Python, whatever the notebook's name)."""
    return lint_python(code, name, settings)


WARM_UP = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


def train(model, loader, optimizer, scaler, scheduler):
    history = []
    model.train()
    for step, (x, y) in enumerate(loader):
        x, y = x.cuda(), y.cuda()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad()
        history.append(loss)
        print(loss.item())  # noqa: TL401
    return history
"""


def warm_up() -> None:
    """Load the parser and the rules and run them once (the child's start-up: what a first lint
    loads and builds on first use), so that the first buffer is quick. A training loop with
    findings and a `noqa`, named "-" so that no project is looked at."""
    lint_source(WARM_UP, "-", Settings())
