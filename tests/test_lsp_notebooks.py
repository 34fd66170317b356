"""Notebooks through LSP notebook sync, driven by a real LSP client (pytest-lsp): the cells are
linted as one module, and each finding is published on its own cell."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

SETUP = "%matplotlib inline\nimport torch\n\nhistory = []\n"
NOTES = "# Training\nOne pass over the data."
LOOP = """\
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    history.append(loss)
"""


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "trainlint", "lsp"]))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities()))
    yield
    await lsp_client.shutdown_session()


async def published(client: LanguageClient, uris: set[str], until=lambda shown: True) -> dict[str, list[types.Diagnostic]]:
    """What the client shows for each of `uris`, once all have been published and `until` holds."""
    for _ in range(200):
        shown = {uri: list(client.diagnostics[uri]) for uri in uris if uri in client.diagnostics}
        if shown.keys() == uris and until(shown):
            return shown
        await asyncio.sleep(0.1)
    raise AssertionError(f"not shown: {uris - client.diagnostics.keys()}; shown: {client.diagnostics}")


def open_notebook(client: LanguageClient, path: Path, cells: list[tuple[bool, str]]) -> list[str]:
    notebook_uri = path.as_uri()
    uris = [f"vscode-notebook-cell:{path}#cell{i}" for i in range(len(cells))]
    client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=notebook_uri,
                notebook_type="jupyter-notebook",
                version=1,
                cells=[
                    types.NotebookCell(kind=types.NotebookCellKind.Code if code else types.NotebookCellKind.Markup, document=uri)
                    for uri, (code, _) in zip(uris, cells)
                ],
            ),
            cell_text_documents=[
                types.TextDocumentItem(uri=uri, language_id="python" if code else "markdown", version=1, text=text)
                for uri, (code, text) in zip(uris, cells)
            ],
        )
    )
    return uris


async def test_cells_are_linted_as_one_module_and_findings_land_on_their_cell(client: LanguageClient, tmp_path: Path):
    path = tmp_path / "train.ipynb"
    setup, _, loop = open_notebook(client, path, [(True, SETUP), (False, NOTES), (True, LOOP)])
    shown = await published(client, {setup, loop})
    assert shown[setup] == []  # the magic is skipped, not a syntax error
    assert [(d.code, d.range.start.line, d.range.start.character) for d in shown[loop]] == [("TL302", 6, 4)]
    # a quick fix on the cell edits that cell
    point = types.Position(line=6, character=0)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=loop),
            range=types.Range(start=point, end=point),
            context=types.CodeActionContext(diagnostics=[], only=[types.CodeActionKind.QuickFix]),
        )
    )
    fix = next(a for a in actions if a.is_preferred)
    (edit,) = fix.edit.changes[loop]
    assert (edit.range.start.line, edit.range.start.character, edit.new_text) == (6, 19, "loss.detach()")

    # the cell is edited in the notebook: its finding goes
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(uri=path.as_uri(), version=2),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(
                    text_content=[
                        types.NotebookDocumentCellContentChanges(
                            document=types.VersionedTextDocumentIdentifier(uri=loop, version=2),
                            changes=[types.TextDocumentContentChangeWholeDocument(text=LOOP.replace("append(loss)", "append(loss.detach())"))],
                        )
                    ]
                )
            ),
        )
    )
    assert (await published(client, {loop}, lambda shown: not shown[loop]))[loop] == []


async def test_a_step_defined_in_an_earlier_cell_counts_as_per_step(client: LanguageClient, tmp_path: Path):
    step = "def train_step(x, y):\n    loss = criterion(model(x), y)\n    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n    return loss\n"
    loop = "losses = []\nfor x, y in loader:\n    loss = train_step(x, y)\n    losses.append(loss)\n"
    first, second = open_notebook(client, tmp_path / "nb.ipynb", [(True, step), (True, loop)])
    shown = await published(client, {first, second})
    assert shown[first] == []
    assert [(d.code, d.range.start.line) for d in shown[second]] == [("TL302", 3)]
    # closing the notebook clears its cells
    client.notebook_document_did_close(
        types.DidCloseNotebookDocumentParams(
            notebook_document=types.NotebookDocumentIdentifier(uri=(tmp_path / "nb.ipynb").as_uri()),
            cell_text_documents=[types.TextDocumentIdentifier(uri=u) for u in (first, second)],
        )
    )
    assert await published(client, {first, second}, lambda shown: not shown[second]) == {first: [], second: []}


async def test_fix_all_in_a_notebook_edits_every_cell_at_once(client: LanguageClient, tmp_path: Path):
    first_loop = LOOP.replace("history.append(loss)", "history.append(loss)\nprint('epoch done')")
    setup, loop, again = open_notebook(client, tmp_path / "nb.ipynb", [(True, SETUP), (True, first_loop), (True, LOOP)])
    shown = await published(client, {setup, loop, again}, lambda shown: shown[loop] and shown[again])
    assert [d.code for d in shown[loop] + shown[again]] == ["TL302", "TL302"]
    origin = types.Position(line=0, character=0)
    (action,) = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=again),
            range=types.Range(start=origin, end=origin),
            context=types.CodeActionContext(diagnostics=[], only=["source.fixAll"]),
        )
    )
    assert action.title == "Fix all trainlint findings (2 safe fixes)"
    assert sorted(action.edit.changes) == sorted([loop, again])
    for uri in (loop, again):
        (edit,) = action.edit.changes[uri]
        assert (edit.range.start.line, edit.range.start.character, edit.new_text) == (6, 19, "loss.detach()")
