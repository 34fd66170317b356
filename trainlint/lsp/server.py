"""`trainlint lsp`: a language server over stdio, built on pygls.

It lints the editor's buffer (saved or not) with the `[tool.trainlint]` configuration of the file's
own project, and publishes diagnostics on open, on change (debounced), and on save; it clears them on
close. Code actions apply a rule's fix or add `# noqa: CODE`; hovering a finding explains its rule.
A buffer that does not parse shows the syntax error beside the last good findings, and recovers
as soon as the text parses again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from trainlint import __version__
from trainlint.config import ConfigError, Settings, find_config, load_settings
from trainlint.diagnostics import Diagnostic, Fix
from trainlint.engine import PARSE_ERROR, lint_source
from trainlint.formats.lsp import lsp_range, to_lsp
from trainlint.rules import RULES_BY_CODE

DEBOUNCE_SECONDS = 0.25
PYPROJECT = "pyproject.toml"


@dataclass
class DocumentState:
    """What the server last published for one open document."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    last_good: list[Diagnostic] = field(default_factory=list)  # findings of the last text that parsed


class TrainlintServer(LanguageServer):
    """The server, with per-document state and a settings cache keyed by configuration file."""

    def __init__(self) -> None:
        super().__init__("trainlint", __version__)
        self.documents: dict[str, DocumentState] = {}
        self._pending: dict[str, asyncio.TimerHandle] = {}
        self._settings: dict[Path | None, tuple[int, Settings]] = {}

    # -- configuration -------------------------------------------------------------------------
    def settings_for(self, path: Path) -> Settings:
        """The settings of the project holding `path`, reloaded whenever its pyproject.toml changes."""
        config = find_config(path)
        stamp = config.stat().st_mtime_ns if config is not None and config.exists() else 0
        cached = self._settings.get(config)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            settings = load_settings(config)
        except ConfigError as exc:
            self.window_show_message(
                types.ShowMessageParams(types.MessageType.Error, f"trainlint: {exc}; using the default rules")
            )
            settings = load_settings(None)
        self._settings[config] = (stamp, settings)
        return settings

    def forget_settings(self) -> None:
        self._settings.clear()

    # -- linting -------------------------------------------------------------------------------
    def lint(self, uri: str) -> None:
        """Lint the document's current text and publish the result."""
        self._pending.pop(uri, None)
        document = self.workspace.get_text_document(uri)
        path = Path(to_fs_path(uri) or uri)
        state = self.documents.setdefault(uri, DocumentState())
        result = lint_source(document.source, str(path), self.settings_for(path))
        parse_errors = [d for d in result.diagnostics if d.code == PARSE_ERROR[0]]
        if parse_errors and not result.internal_error:
            # mid-edit: show where it stopped parsing, and keep the findings of the last good text
            state.diagnostics = parse_errors + state.last_good
        else:
            state.diagnostics = result.diagnostics
            state.last_good = [d for d in result.diagnostics if d.code != PARSE_ERROR[0]]
        lines = document.lines
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(
                uri=uri,
                version=document.version,
                diagnostics=[_converter.structure(to_lsp(d, lines), types.Diagnostic) for d in state.diagnostics],
            )
        )

    def lint_later(self, uri: str) -> None:
        """Lint after a quiet spell, so that typing does not queue one lint per keystroke."""
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        loop = asyncio.get_running_loop()
        self._pending[uri] = loop.call_later(DEBOUNCE_SECONDS, self.lint, uri)

    def close(self, uri: str) -> None:
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self.documents.pop(uri, None)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def relint_open_documents(self) -> None:
        for uri in list(self.documents):
            self.lint(uri)

    # -- queries on published findings ---------------------------------------------------------
    def findings_at(self, uri: str, rng: types.Range) -> list[Diagnostic]:
        """Published findings whose range overlaps `rng` (0-based, as the client sends it)."""
        state = self.documents.get(uri)
        if state is None:
            return []
        lines = self.workspace.get_text_document(uri).lines
        out = []
        for d in state.diagnostics:
            r = lsp_range(d.line, d.column, d.end_line, d.end_column, lines)
            start, end = r["start"], r["end"]
            if (start["line"], start["character"]) <= (rng.end.line, rng.end.character) and (
                rng.start.line, rng.start.character
            ) <= (end["line"], end["character"]):
                out.append(d)
        return out


_converter = get_converter()  # plain LSP dicts (as `--format lsp` writes them) -> lsprotocol types


def _text_edits(fix: Fix, lines: list[str]) -> list[types.TextEdit]:
    edits = []
    for e in fix.edits:
        r = lsp_range(e.line, e.column, e.end_line, e.end_column, lines)
        edits.append(
            types.TextEdit(
                range=types.Range(
                    start=types.Position(**r["start"]),  # type: ignore[arg-type]
                    end=types.Position(**r["end"]),  # type: ignore[arg-type]
                ),
                new_text=e.content,
            )
        )
    return edits


def _noqa_edit(d: Diagnostic, lines: list[str]) -> types.TextEdit:
    """Append `# noqa: CODE` to the finding's first line, or add the code to a noqa already there."""
    index = d.line - 1
    text = lines[index].rstrip("\r\n") if index < len(lines) else ""
    marker = text.find("# noqa:")
    if marker >= 0:
        insert_at = len(text)
        new_text = f", {d.code}"
    elif "# noqa" in text:  # a bare noqa comment already silences everything
        insert_at, new_text = len(text), ""
    else:
        insert_at, new_text = len(text), f"  # noqa: {d.code}"
    character = len(text[:insert_at].encode("utf-16-le")) // 2
    position = types.Position(line=index, character=character)
    return types.TextEdit(range=types.Range(start=position, end=position), new_text=new_text)


def hover_text(d: Diagnostic) -> str:
    """The rule's explanation, shortened: summary, why (first two sentences), fix and the page link."""
    rule = RULES_BY_CODE.get(d.code)
    if rule is None:
        return f"**{d.code} {d.name}**\n\n{d.message}\n\n[Rule page]({d.url})"
    why = " ".join(rule.why.split())
    sentences = why.split(". ")
    short_why = ". ".join(sentences[:2]) + ("." if len(sentences) > 2 else "")
    return (
        f"**{rule.code} {rule.name}** ({rule.severity.value})\n\n{rule.summary}\n\n"
        f"**Why:** {short_why}\n\n**Fix:** {rule.hint}\n\n[Rule page]({d.url})"
    )


def build_server() -> TrainlintServer:
    """A server with every feature registered."""
    server = TrainlintServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: TrainlintServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.lint(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: TrainlintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.lint_later(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: TrainlintServer, params: types.DidSaveTextDocumentParams) -> None:
        if params.text_document.uri.endswith(PYPROJECT):
            ls.forget_settings()
            ls.relint_open_documents()
        elif params.text_document.uri in ls.documents:
            ls.lint(params.text_document.uri)

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
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
    )
    def code_action(ls: TrainlintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        lines = ls.workspace.get_text_document(uri).lines
        actions = []
        for d in ls.findings_at(uri, params.range):
            if d.code == PARSE_ERROR[0]:
                continue
            published = _converter.structure(to_lsp(d, lines), types.Diagnostic)
            if d.fix is not None:
                safety = d.fix.applicability.value
                actions.append(
                    types.CodeAction(
                        title=f"{d.code}: {d.fix.description} ({safety} fix)",
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=[published],
                        is_preferred=safety == "safe",
                        edit=types.WorkspaceEdit(changes={uri: _text_edits(d.fix, lines)}),
                    )
                )
            actions.append(
                types.CodeAction(
                    title=f"{d.code}: silence on this line (# noqa: {d.code})",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[published],
                    edit=types.WorkspaceEdit(changes={uri: [_noqa_edit(d, lines)]}),
                )
            )
        return actions

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: TrainlintServer, params: types.HoverParams) -> types.Hover | None:
        point = types.Range(start=params.position, end=params.position)
        found = [d for d in ls.findings_at(params.text_document.uri, point) if d.code != PARSE_ERROR[0]]
        if not found:
            return None
        text = "\n\n---\n\n".join(hover_text(d) for d in found)
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))

    return server


def main() -> None:
    """Serve over stdio until the client exits."""
    build_server().start_io()
