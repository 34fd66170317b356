"""The language server end to end, driven by a real LSP client (pytest-lsp) over stdio."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

BAD = textwrap.dedent("""\
    import torch

    history = []
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append(loss)
""")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "trainlint", "lsp"]))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities()))
    yield
    await lsp_client.shutdown_session()


async def wait_for_diagnostics(client: LanguageClient, uri: str, version: int | None = None) -> list[types.Diagnostic]:
    """The next diagnostics published for `uri` (for `version`, when given)."""
    # (the first diagnostics also wait for the server's start-up, which `initialize` no longer waits for)
    for _ in range(20):
        params = await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 30)
        if params.uri == uri and (version is None or params.version == version):
            return list(params.diagnostics)
    raise AssertionError(f"no diagnostics for {uri} version {version}")


def open_document(client: LanguageClient, path: Path, text: str, version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text))
    )
    return uri


def change_document(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


async def test_open_publishes_lsp_shaped_diagnostics(client: LanguageClient, tmp_path: Path):
    uri = open_document(client, tmp_path / "train.py", BAD)
    found = await wait_for_diagnostics(client, uri)
    assert [(d.code, d.range.start.line, d.range.start.character) for d in found] == [("TL302", 9, 4)]
    d = found[0]
    assert d.source == "trainlint"
    assert d.severity == types.DiagnosticSeverity.Error
    assert d.code_description.href.endswith("rules/TL302-autograd-history-accumulated.md")


async def test_change_uses_unsaved_text_and_syntax_errors_recover(client: LanguageClient, tmp_path: Path):
    uri = open_document(client, tmp_path / "train.py", BAD)
    await wait_for_diagnostics(client, uri)
    # mid-typing: the buffer stops parsing; the server reports where, keeps the last findings, and lives
    change_document(client, uri, BAD + "for broken in (:\n", 2)
    found = await wait_for_diagnostics(client, uri, 2)
    assert sorted(d.code for d in found) == ["TL000", "TL302"]
    syntax = next(d for d in found if d.code == "TL000")
    assert (syntax.range.start.line, syntax.range.start.character) == (10, 15)
    assert syntax.message.startswith("syntax error: invalid syntax")
    # fixed in the buffer (never saved): the finding is gone with it
    change_document(client, uri, BAD.replace("history.append(loss)", "history.append(loss.detach())"), 3)
    assert await wait_for_diagnostics(client, uri, 3) == []


async def test_a_syntax_error_keeps_a_last_finding_only_where_its_lines_are_unchanged(client: LanguageClient, tmp_path: Path):
    """The last good findings belong to the last text that parsed: one whose lines moved or changed
    would point at another statement, so it is dropped until the buffer parses again."""
    uri = open_document(client, tmp_path / "train.py", BAD)
    assert [(d.code, d.range.start.line) for d in await wait_for_diagnostics(client, uri)] == [("TL302", 9)]
    # a broken line typed above it: line 9 is now `optimizer.zero_grad()`
    change_document(client, uri, "for broken in (:\n" + BAD, 2)
    found = await wait_for_diagnostics(client, uri, 2)
    assert [(d.code, d.range.start.line) for d in found] == [("TL000", 0)]
    # the finding's own line edited into the error
    change_document(client, uri, BAD.replace("history.append(loss)", "history.append(loss"), 3)
    assert [d.code for d in await wait_for_diagnostics(client, uri, 3)] == ["TL000"]
    # broken below it, its lines as they were: kept, as in the last text that parsed
    change_document(client, uri, BAD + "for broken in (:\n", 4)
    found = await wait_for_diagnostics(client, uri, 4)
    assert sorted((d.code, d.range.start.line) for d in found) == [("TL000", 10), ("TL302", 9)]
    # parses again: the findings of the new text
    change_document(client, uri, "\n" + BAD, 5)
    assert [(d.code, d.range.start.line) for d in await wait_for_diagnostics(client, uri, 5)] == [("TL302", 10)]


async def test_save_and_close(client: LanguageClient, tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_text(BAD)
    uri = open_document(client, path, BAD)
    assert len(await wait_for_diagnostics(client, uri)) == 1
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    assert len(await wait_for_diagnostics(client, uri)) == 1
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    assert await wait_for_diagnostics(client, uri) == []


async def test_code_actions_fix_and_noqa(client: LanguageClient, tmp_path: Path):
    uri = open_document(client, tmp_path / "train.py", BAD)
    (found,) = await wait_for_diagnostics(client, uri)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=found.range,
            context=types.CodeActionContext(diagnostics=[found]),
        )
    )
    titles = [a.title for a in actions]
    assert titles == [
        "TL302: detach: `loss.detach()` (safe fix)",
        "TL302: silence on this line (# noqa: TL302)",
        "Fix all trainlint findings (1 safe fix)",
    ]
    fix, noqa, _ = actions
    assert fix.is_preferred
    (edit,) = fix.edit.changes[uri]
    assert (edit.range.start.line, edit.range.start.character, edit.new_text) == (9, 19, "loss.detach()")
    (edit,) = noqa.edit.changes[uri]
    assert (edit.range.start.line, edit.new_text) == (9, "  # noqa: TL302")
    # applying the fix as the editor would: the finding goes away
    fixed = BAD.replace("history.append(loss)", "history.append(loss.detach())")
    change_document(client, uri, fixed, 2)
    assert await wait_for_diagnostics(client, uri, 2) == []


async def test_hover_explains_the_rule(client: LanguageClient, tmp_path: Path):
    uri = open_document(client, tmp_path / "train.py", BAD)
    await wait_for_diagnostics(client, uri)
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=9, character=12))
    )
    assert hover is not None and hover.contents.kind == types.MarkupKind.Markdown
    assert hover.contents.value.startswith("**TL302 autograd-history-accumulated** (error)")
    assert "TL302-autograd-history-accumulated.md" in hover.contents.value
    nothing = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=3))
    )
    assert nothing is None


async def test_project_configuration_is_used_and_reloaded(client: LanguageClient, tmp_path: Path):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    pyproject = project / "pyproject.toml"
    pyproject.write_text('[tool.trainlint]\nignore = ["TL302"]\n')
    uri = open_document(client, project / "src" / "train.py", BAD)
    assert await wait_for_diagnostics(client, uri) == []
    pyproject.write_text('[tool.trainlint]\nignore = ["TL401"]\n')
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(changes=[types.FileEvent(uri=pyproject.as_uri(), type=types.FileChangeType.Changed)])
    )
    assert [d.code for d in await wait_for_diagnostics(client, uri)] == ["TL302"]
