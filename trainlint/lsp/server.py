"""`trainlint lsp`: a language server over stdio, built on pygls.

It lints the editor's buffer (saved or not) with the `[tool.trainlint]` configuration of the file's
own project, overridden by the editor's settings (see `options.py`), and publishes diagnostics on
open, on change (at once; edits made while a lint runs are linted together when it ends), and on
save; it clears them on close. Code actions apply a rule's fix
or add `# noqa: CODE` for every finding on the cursor's lines, and "fix all trainlint findings"
(`source.fixAll.trainlint`) applies every safe fix in one edit; a fix is offered only if it passes
`--fix`'s own after-fix re-check (`trainlint.fixes.recheck`) on the buffer's text. Hovering a
finding explains its rule.
A buffer that does not parse shows the syntax error beside those findings of the last text that
parsed whose lines are unchanged, and recovers as soon as the text parses again. Notebooks open
through LSP notebook sync are linted as one module, with each finding published on its cell.

Nothing a buffer holds can stop the server: parsing runs in a worker process (the engine's
`ResidentWorker`), buffers over `max-file-size` are not parsed, and the transport (`transport.py`)
survives malformed and oversized messages and answers every request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generator
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.uris import to_fs_path

from trainlint import __version__
from trainlint.config import ConfigError, Settings, find_config, load_settings
from trainlint.diagnostics import Diagnostic
from trainlint.engine.results import PARSE_ERROR, FileResult, could_not_analyse, error_diagnostic
from trainlint.engine.workers import ResidentWorker, WorkerFailure
from trainlint.report.lsp import lsp_range
from trainlint.lsp import actions
from trainlint.lsp.documents import DocumentState, clean_text, split_lines
from trainlint.lsp.fix_queries import FixQueries
from trainlint.lsp.contained import (
    lint_buffer, lint_cells, lint_opened, warm_up,
)
from trainlint.lsp.notebooks import CellText, by_cell, code_size
from trainlint.lsp.options import EditorOptions, parse_options
from trainlint.lsp.transport import serve

if TYPE_CHECKING:
    from trainlint.lsp.early import EarlyStart

PYPROJECT = "pyproject.toml"
logger = logging.getLogger(__name__)
# notebooks opened through notebook sync: any notebook's Python cells (`notebooks.py`)
NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[
        types.NotebookDocumentFilterWithCells(notebook="*", cells=[types.NotebookCellLanguage(language="python")])
    ]
)
# the `initialize` params that `initialize.answerable` checks (and the editor's settings, any JSON)
_CHECKED_INITIALIZE_PARAMS = ("processId", "rootUri", "rootPath", "workspaceFolders", "clientInfo", "locale", "trace", "initializationOptions")


class TrainlintProtocol(LanguageServerProtocol):
    """pygls's protocol, keeping positions in UTF-16: trainlint's columns are converted to it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._answered: dict[Any, dict[str, Any]] = {}  # requests answered before the server loaded

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Generator[Any, Any, types.InitializeResult]:
        if params.capabilities.general is not None:
            params.capabilities.general.position_encodings = None  # let pygls settle on UTF-16
        return (yield from super().lsp_initialize(params))

    def adopt_initialize(self, message: dict[str, Any], answer: dict[str, Any]) -> None:
        """Handle an `initialize` request that `launch.py` has answered (with `answer`): the state
        is set as pygls sets it (client capabilities, workspace, the editor's options), and pygls's
        own answer is not sent again."""
        self._answered[message["id"]] = answer
        try:
            structured = self.structure_message(message)
        except JsonRpcException:
            # (`initialize.answerable` checks what it can without lsprotocol: a field of a wrong
            # shape deeper down is dropped rather than leaving the server uninitialised)
            logger.warning("initialize: the client's params do not validate; its capabilities are taken as none")
            params = {k: v for k, v in message["params"].items() if k in _CHECKED_INITIALIZE_PARAMS}
            structured = self.structure_message({**message, "params": {**params, "capabilities": {}}})
        self.handle_message(structured)

    def _send_response(self, msg_id: Any, result: Any = None, error: Any = None) -> None:
        answered = self._answered.pop(msg_id, None) if msg_id is not None else None
        if answered is None:
            super()._send_response(msg_id, result, error)
            return
        computed = None if error is not None else json.loads(json.dumps(result, default=self._serialize_message))
        if computed != answered:  # (a test holds them equal: this is a bug to report, not a state)
            logger.error("initialize was answered %s before the server loaded, but pygls answers %s", answered, error or computed)


class TrainlintServer(FixQueries, LanguageServer):
    """The server, with per-document state and a settings cache keyed by configuration file."""

    def __init__(self, contained: ResidentWorker | None = None) -> None:
        """`contained`: the worker, when one was started before the server (`early.py`)."""
        super().__init__("trainlint", __version__, protocol_cls=TrainlintProtocol, notebook_document_sync=NOTEBOOK_SYNC)
        self.documents: dict[str, DocumentState] = {}  # text documents and notebook cells
        self.notebooks: dict[str, set[str]] = {}  # notebook URI -> the cells published for it
        self.options = EditorOptions()
        # as `launch.PRELOAD`: started early
        self.contained = contained if contained is not None else ResidentWorker(preload=[lint_buffer.__module__])
        self._early_lints: dict[str, tuple[int | None, str, FileResult]] = {}  # published before the server loaded
        self._linting: set[str] = set()  # documents with a lint under way for their changes
        self._stale: set[str] = set()  # ... and changed again since it began
        self._settings: dict[Path | None, tuple[int, Settings]] = {}

    def start_io(self, stdin: Any = None, stdout: Any = None, early: EarlyStart | None = None) -> int:
        """Serve over stdio with trainlint's bounded, resynchronising transport, after what
        `launch.py` read and answered (`early`); the exit status: 1 after an `exit` that no
        `shutdown` preceded (as the specification asks), else 0."""
        self._stop_event = threading.Event()
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        # fork and warm the worker while the editor's `initialize` is answered: its first buffer
        # then finds the parser and the rules loaded (`early.py` has, if it ran)
        if early is None or early.contained is None:
            threading.Thread(target=self.warm_up, name="trainlint-warm-up", daemon=True).start()
        status = 0
        try:
            asyncio.run(self._serve(stdin or sys.stdin.buffer, early))
        except SystemExit as exc:  # pygls's `exit` handler: 0 after `shutdown`, else 1
            status = exc.code if isinstance(exc.code, int) else 1
        except (BrokenPipeError, KeyboardInterrupt):
            pass
        finally:
            self.contained.close()
            self.shutdown()
        return status

    async def _serve(self, stdin: Any, early: EarlyStart | None) -> None:
        if early is None:
            await serve(self.protocol, self._stop_event, stdin)
            return
        if early.initialize is not None and early.answer is not None:
            self.protocol.adopt_initialize(early.initialize, early.answer)
        self._early_lints = dict(early.linted)
        await serve(self.protocol, self._stop_event, stdin, frames=early.frames, pending=early.pending)

    def adopt_early_lint(self, uri: str) -> bool:
        """Whether the document, just opened, was linted and published before the server loaded
        (`early.py`), for the text it holds: then that result is what the server holds for it."""
        early = self._early_lints.pop(uri, None)
        opened = self.open_text(uri)
        if early is None or opened is None or opened != (early[0], early[1]):
            return False
        version, text, result = early
        self.documents.setdefault(uri, DocumentState()).linted(version, clean_text(text), result)
        return True

    def warm_up(self) -> None:
        """Start the contained worker and load the analysis in it (a failure is left to the first lint)."""
        try:
            self.contained.call(warm_up)
        except WorkerFailure:
            pass

    def report_server_error(self, error: Exception, source: Any) -> None:
        """Log (no popup): requests already get their error as a response."""
        logger.error("trainlint language server: %s", error)

    # -- configuration -------------------------------------------------------------------------
    def settings_for(self, path: Path) -> Settings:
        """The project's settings (reloaded when its pyproject.toml changes) with the editor's on top."""
        config = self.options.config_path or find_config(path)
        stamp = config.stat().st_mtime_ns if config is not None and config.exists() else 0
        cached = self._settings.get(config)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            settings = self.options.apply(load_settings(config))
        except ConfigError as exc:
            self.show_error(f"{exc}; using the default rules")
            settings = load_settings(None)
        self._settings[config] = (stamp, settings)
        return settings

    def set_options(self, raw: Any) -> None:
        """Take the editor's settings (a bad one is reported and leaves the previous ones in force)."""
        root = Path(self.workspace.root_path) if self.workspace.root_path else None
        try:
            self.options = parse_options(raw, root)
        except ConfigError as exc:
            self.show_error(str(exc))
            return
        self.forget_settings()

    def forget_settings(self) -> None:
        self._settings.clear()

    def show_error(self, message: str) -> None:
        self.window_show_message(types.ShowMessageParams(types.MessageType.Error, f"trainlint: {message}"))

    # -- linting -------------------------------------------------------------------------------
    def open_text(self, uri: str) -> tuple[int | None, str] | None:
        """(version, text) of an open document, or None for a URI the client has not opened."""
        document = self.workspace.text_documents.get(unquote(uri))
        return None if document is None else (document.version, document.source)

    def notebook_of(self, cell_uri: str) -> str | None:
        notebook = self.workspace.get_notebook_document(cell_uri=cell_uri)
        return None if notebook is None else notebook.uri

    def notebook_cells(self, uri: str) -> list[CellText] | None:
        """The cells of an open notebook in order, as last sent; None if it is not open."""
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is None:
            return None
        cells = []
        for cell in notebook.cells:
            opened = self.open_text(cell.document)
            version, text = opened if opened is not None else (None, "")
            cells.append(CellText(cell.document, version, cell.kind == types.NotebookCellKind.Code, clean_text(text)))
        return cells

    def analyse(self, source: str, name: str, settings: Settings) -> FileResult:
        """Lint a buffer away from the server process (blocking: run it off the event loop)."""
        size = len(source.encode("utf-8"))
        return self._contained(name, settings, size, f"buffer too large to lint ({size} bytes", lint_buffer, source)

    def analyse_opened(self, source: str, name: str, settings: Settings) -> tuple[FileResult, bool]:
        """`analyse` for a file just opened: (the result, whether it is the file's result alone,
        to be followed by the full one: `analysis.lint_opened`)."""
        size = len(source.encode("utf-8"))
        if size > settings.max_file_size:
            return self.analyse(source, name, settings), False
        try:
            found: tuple[FileResult, bool] = self.contained.call(lint_opened, source, name, settings)
            return found
        except WorkerFailure as exc:
            return FileResult(name, [could_not_analyse(name, str(exc))]), False

    def analyse_cells(self, cells: list[CellText], name: str, settings: Settings) -> FileResult:
        """Lint a notebook's cells as one module, away from the server process."""
        size = code_size(cells)
        return self._contained(name, settings, size, f"notebook too large to lint ({size} bytes of code", lint_cells, cells)

    def _contained(
        self, name: str, settings: Settings, size: int, too_large: str, function: Callable[..., FileResult], text: object
    ) -> FileResult:
        """`function(text, name, settings)` in the contained child; a TL000 when `size` is over
        max-file-size (`too_large` says what, up to its size) or the child fails."""
        if size > settings.max_file_size:
            return FileResult(name, [error_diagnostic(name, f"{too_large} > max-file-size {settings.max_file_size})")])
        try:
            return self.contained.call(function, text, name, settings)
        except WorkerFailure as exc:
            return FileResult(name, [could_not_analyse(name, str(exc))])

    async def lint(self, uri: str, just_opened: bool = False) -> None:
        """Lint the document's current text and publish the result (unless it changed meanwhile).
        A file `just_opened` may get its findings alone first, then the full result
        (`analyse_opened`)."""
        notebook = uri if uri in self.notebooks else self.notebook_of(uri)
        if notebook is not None:
            await self.lint_notebook(notebook)
            return
        opened = self.open_text(uri)
        if opened is None:
            return
        version, text = opened
        source = clean_text(text)
        path = Path(to_fs_path(uri) or uri)
        settings = self.settings_for(path)
        loop = asyncio.get_running_loop()
        if just_opened:
            result, alone = await loop.run_in_executor(None, self.analyse_opened, source, str(path), settings)
        else:
            result, alone = await loop.run_in_executor(None, self.analyse, source, str(path), settings), False
        while True:
            if self.open_text(uri) != opened:
                return  # edited or closed while it was linted: the newer text has its own lint coming
            state = self.documents.setdefault(uri, DocumentState())
            state.linted(version, source, result)
            self.publish(uri, state)
            if not alone:
                return
            # the file's findings alone are shown: now with the project's summaries
            result, alone = await loop.run_in_executor(None, self.analyse, source, str(path), settings), False

    async def lint_notebook(self, uri: str) -> None:
        """Lint an open notebook's cells as one module and publish each cell's findings on it."""
        cells = self.notebook_cells(uri)
        if cells is None:
            return
        path = Path(to_fs_path(uri) or uri)
        settings = self.settings_for(path)
        result = await asyncio.get_running_loop().run_in_executor(None, self.analyse_cells, cells, str(path), settings)
        if self.notebook_cells(uri) != cells:
            return  # edited or closed meanwhile
        found = by_cell(cells, result.diagnostics)
        for gone in self.notebooks.get(uri, set()) - found.keys():  # deleted, or no longer code
            self.clear(gone)
        self.notebooks[uri] = set(found)
        for cell in cells:
            if cell.uri in found:
                state = self.documents.setdefault(cell.uri, DocumentState())
                state.version, state.lines, state.diagnostics = cell.version, split_lines(cell.text), found[cell.uri]
                state.fix_checked = {}
                self.publish(cell.uri, state)

    def publish(self, uri: str, state: DocumentState) -> None:
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(
                uri=uri,
                version=state.version,
                diagnostics=[actions.published(d, state.lines) for d in state.diagnostics],
            )
        )

    def lint_soon(self, uri: str, just_opened: bool = False) -> None:
        asyncio.ensure_future(self.lint(uri, just_opened))

    def lint_later(self, uri: str) -> None:
        """Lint a changed document at once, unless a lint of its changes is under way: then once more
        when that one ends, for every edit made meanwhile (typing queues at most one lint, and a
        keystroke after a pause waits for no timer)."""
        if uri in self._linting:
            self._stale.add(uri)
            return
        self._linting.add(uri)
        asyncio.ensure_future(self._lint_changes(uri))

    async def _lint_changes(self, uri: str) -> None:
        try:
            while True:
                self._stale.discard(uri)
                await self.lint(uri)
                if uri not in self._stale:
                    return
        finally:
            self._linting.discard(uri)

    def close(self, uri: str) -> None:
        """Forget a document (or a notebook and its cells) and clear what was published for it."""
        self._stale.discard(uri)  # a lint under way finds it closed and publishes nothing
        for cell in self.notebooks.pop(uri, set()):
            self.clear(cell)
        self.clear(uri)

    def clear(self, uri: str) -> None:
        self.documents.pop(uri, None)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def relint_open_documents(self) -> None:
        cells = {cell for published in self.notebooks.values() for cell in published}
        for uri in [*self.notebooks, *(u for u in self.documents if u not in cells)]:
            self.lint_soon(uri)

    # -- queries on published findings ---------------------------------------------------------
    def findings_at(self, uri: str, rng: types.Range) -> list[Diagnostic]:
        """Published findings whose range overlaps `rng` (0-based, as the client sends it)."""
        state = self.documents.get(uri)
        if state is None:
            return []
        out = []
        for d in state.diagnostics:
            r = lsp_range(d.line, d.column, d.end_line, d.end_column, state.lines)
            start, end = r["start"], r["end"]
            if (start["line"], start["character"]) <= (rng.end.line, rng.end.character) and (
                rng.start.line, rng.start.character
            ) <= (end["line"], end["character"]):
                out.append(d)
        return out


def build_server(contained: ResidentWorker | None = None) -> TrainlintServer:
    """A server with every feature registered (`contained`: its worker, if one was started)."""
    server = TrainlintServer(contained)

    @server.feature(types.INITIALIZE)
    def initialize(ls: TrainlintServer, params: types.InitializeParams) -> None:
        ls.set_options(params.initialization_options)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: TrainlintServer, params: types.DidChangeConfigurationParams) -> None:
        ls.set_options(params.settings)
        ls.relint_open_documents()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: TrainlintServer, params: types.DidOpenTextDocumentParams) -> None:
        # (not a coroutine: a result published before the server loaded is the document's state
        # before the next message is handled, a hover on what the editor shows already)
        if ls.adopt_early_lint(params.text_document.uri):
            return  # (published already)
        ls.documents.setdefault(params.text_document.uri, DocumentState())
        ls.lint_soon(params.text_document.uri, just_opened=True)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    async def did_open_notebook(ls: TrainlintServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.notebooks.setdefault(params.notebook_document.uri, set())
        await ls.lint_notebook(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def did_change_notebook(ls: TrainlintServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.lint_later(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def did_close_notebook(ls: TrainlintServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.close(params.notebook_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: TrainlintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.lint_later(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: TrainlintServer, params: types.DidSaveTextDocumentParams) -> None:
        if params.text_document.uri.endswith(PYPROJECT):
            ls.forget_settings()
            ls.relint_open_documents()
        elif params.text_document.uri in ls.documents:
            ls.lint_soon(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: TrainlintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.close(params.text_document.uri)

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: TrainlintServer, params: types.DidChangeWatchedFilesParams) -> None:
        if any(change.uri.endswith(PYPROJECT) for change in params.changes):
            ls.forget_settings()
            ls.relint_open_documents()

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, actions.FIX_ALL_KIND]),
    )
    async def code_action(ls: TrainlintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        state = ls.documents.get(uri)
        opened = ls.open_text(uri)
        if state is None or opened is None:
            return []  # a document the client never opened: nothing to offer
        only = params.context.only
        out: list[types.CodeAction] = []
        if actions.wants(only, types.CodeActionKind.QuickFix):
            rng = params.range
            findings = [d for d in actions.on_lines(state.diagnostics, rng.start.line, rng.end.line) if d.code != PARSE_ERROR[0]]
            # a fix is offered only for the current text, and only if it passes the `--fix` re-check
            fixable = [d for d in findings if d.fix is not None]
            fixes = await ls.checked_fixes_for(uri, state, fixable) if fixable and state.version == opened[0] else []
            out.extend(actions.quick_fixes(uri, findings, state.lines, fixes))
        # unasked-for, the fix-all action is offered only when a safe fix is known to be there
        if actions.wants(only, actions.FIX_ALL_KIND) and (only is not None or actions.fixable(state.diagnostics)):
            fixes = await ls.safe_fixes_for(uri)
            if fixes is not None and (action := actions.fix_all(fixes)) is not None:
                out.append(action)
        return out

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: TrainlintServer, params: types.HoverParams) -> types.Hover | None:
        point = types.Range(start=params.position, end=params.position)
        found = [d for d in ls.findings_at(params.text_document.uri, point) if d.code != PARSE_ERROR[0]]
        if not found:
            return None
        text = "\n\n---\n\n".join(actions.hover_text(d) for d in found)
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))

    return server


def main(early: EarlyStart | None = None) -> None:
    """Serve over stdio until the client exits (after what `launch.py` read and answered)."""
    sys.exit(build_server(early.contained if early is not None else None).start_io(early=early))
