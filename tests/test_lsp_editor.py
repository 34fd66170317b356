"""Editor-facing features of the language server through a real LSP client (pytest-lsp): code
actions for the cursor's line, the fix-all source action, and settings sent by the editor."""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.test_lsp_server import change_document, open_document, wait_for_diagnostics

# an unsafe fix (TL201: unscale before clipping) and two safe ones (TL302), two findings on line 13
TRAIN = textwrap.dedent("""\
    import torch

    scaler = torch.cuda.amp.GradScaler()
    history = []
    for x, y in loader:
        loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        history.append(loss)
        losses.append(loss); recent.append(loss)
""")


# fixes that are not what they seem: a cast taken for a device move, a move to another tensor (its
# device and dtype), a factory given **kwargs (which may hold `device=`), a multi-line factory whose
# last argument ends in a comment, and a running total that a helper in another local module
# backpropagates (its `.detach()` would break that backward)
HELPERS = "def backprop_running(total):\n    total.backward(retain_graph=True)\n"
RISKY = textwrap.dedent("""\
    import torch
    from helpers import backprop_running

    device = torch.device("cuda")
    total, model = 0.0, torch.nn.Linear(4, 4)
    for x, v in loader:
        optimizer.zero_grad()
        idx = torch.tensor(v).to(torch.long)
        like = torch.tensor([v, 1]).to(x)
        pad = torch.zeros(3, **kw).to(device)
        mask = torch.ones(
            4,  # features
        ).to(device)
        loss = model(x, idx, like, pad, mask)
        total += loss
        backprop_running(total)
        optimizer.step()
""")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "trainlint", "lsp"]))
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


async def start(client: LanguageClient, options: object = None) -> None:
    await client.initialize_session(
        types.InitializeParams(capabilities=types.ClientCapabilities(), initialization_options=options)
    )


async def code_actions(client: LanguageClient, uri: str, line: int, character: int = 0, only: list[str] | None = None):
    point = types.Position(line=line, character=character)
    return await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=point, end=point),
            context=types.CodeActionContext(diagnostics=[], only=only),
        )
    )


def apply(text: str, edits: list[types.TextEdit]) -> str:
    """Apply LSP edits as an editor does (all positions refer to the original text)."""
    lines = text.splitlines(keepends=True)

    def offset(position: types.Position) -> int:
        return sum(len(line) for line in lines[: position.line]) + position.character

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end):]
    return text


async def test_cursor_anywhere_on_a_line_offers_that_lines_actions(client: LanguageClient, tmp_path: Path):
    await start(client)
    uri = open_document(client, tmp_path / "train.py", TRAIN)
    await wait_for_diagnostics(client, uri)
    # the cursor at the start of the line, before both findings' spans
    titles = [a.title for a in await code_actions(client, uri, 12, only=[types.CodeActionKind.QuickFix])]
    assert titles == [
        "TL302: detach: `loss.detach()` (safe fix)",
        "TL302: silence on this line (# noqa: TL302)",
        "TL302: detach: `loss.detach()` (safe fix)",
        "TL302: silence on this line (# noqa: TL302)",
    ]
    # a line without findings offers nothing
    assert not await code_actions(client, uri, 3, only=[types.CodeActionKind.QuickFix])


async def test_fix_all_applies_every_safe_fix_in_one_edit(client: LanguageClient, tmp_path: Path):
    await start(client)
    uri = open_document(client, tmp_path / "train.py", TRAIN)
    assert sorted(d.code for d in await wait_for_diagnostics(client, uri)) == ["TL201", "TL302", "TL302", "TL302"]
    (action,) = await code_actions(client, uri, 0, only=["source.fixAll"])
    assert action.kind == "source.fixAll.trainlint"
    assert action.title == "Fix all trainlint findings (3 safe fixes)"
    fixed = apply(TRAIN, action.edit.changes[uri])
    assert fixed.count("loss.detach()") == 3 and "unscale_" not in fixed  # TL201's fix is unsafe
    change_document(client, uri, fixed, 2)
    assert [d.code for d in await wait_for_diagnostics(client, uri, 2)] == ["TL201"]
    # nothing left to fix: no action
    assert not await code_actions(client, uri, 0, only=["source.fixAll.trainlint"])


async def test_only_proven_fixes_are_offered_as_safe_and_they_parse(client: LanguageClient, tmp_path: Path):
    await start(client)
    (tmp_path / "helpers.py").write_text(HELPERS)
    uri = open_document(client, tmp_path / "train.py", RISKY)
    found = await wait_for_diagnostics(client, uri)
    # the cast is no move at all
    assert sorted((d.code, d.range.start.line) for d in found) == [("TL302", 14), ("TL406", 8), ("TL406", 9), ("TL406", 10)]
    offered = []
    for line in (7, 8, 9, 14):
        offered += [a.title for a in await code_actions(client, uri, line, only=[types.CodeActionKind.QuickFix]) if "noqa" not in a.title]
    assert len(offered) == 3 and all(t.endswith("(unsafe fix)") for t in offered), offered
    (quick,) = [a for a in await code_actions(client, uri, 10, only=[types.CodeActionKind.QuickFix]) if "noqa" not in a.title]
    assert quick.title.endswith("(safe fix)")
    fixed = apply(RISKY, quick.edit.changes[uri])
    ast.parse(fixed)  # the comment after the last argument does not swallow the rest of the call
    assert "    mask = torch.ones(\n        4, device=device,  # features\n    )\n" in fixed
    (action,) = await code_actions(client, uri, 0, only=["source.fixAll"])
    assert action.title == "Fix all trainlint findings (1 safe fix)"
    assert apply(RISKY, action.edit.changes[uri]) == fixed


async def test_inserted_lines_keep_crlf(client: LanguageClient, tmp_path: Path):
    await start(client)
    text = TRAIN.replace("\n", "\r\n")
    uri = open_document(client, tmp_path / "train.py", text)
    await wait_for_diagnostics(client, uri)
    actions = await code_actions(client, uri, 7, only=[types.CodeActionKind.QuickFix])
    unscale = next(a for a in actions if a.title.startswith("TL201") and "unsafe fix" in a.title)
    (edit,) = unscale.edit.changes[uri]
    assert edit.new_text.endswith("\r\n") and "\n" not in edit.new_text.replace("\r\n", "")


async def test_initialization_options_select_and_ignore(client: LanguageClient, tmp_path: Path):
    await start(client, {"ignore": ["TL302"]})
    uri = open_document(client, tmp_path / "train.py", TRAIN)
    assert [d.code for d in await wait_for_diagnostics(client, uri)] == ["TL201"]
    # the editor changes its settings (nested under "trainlint", as VS Code sends them)
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"trainlint": {"select": ["TL302"]}})
    )
    assert [d.code for d in await wait_for_diagnostics(client, uri)] == ["TL302", "TL302", "TL302"]


async def test_config_path_setting_and_bad_settings(client: LanguageClient, tmp_path: Path):
    shared = tmp_path / "ci" / "pyproject.toml"
    shared.parent.mkdir()
    shared.write_text('[tool.trainlint]\nignore = ["TL201"]\n')
    await start(client, {"configPath": str(shared)})
    uri = open_document(client, tmp_path / "train.py", TRAIN)
    assert [d.code for d in await wait_for_diagnostics(client, uri)] == ["TL302", "TL302", "TL302"]
    # an unknown rule code is reported to the user, and the settings in force stay
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"select": ["TL999"]}))
    message = await client.wait_for_notification(types.WINDOW_SHOW_MESSAGE)
    assert message.type == types.MessageType.Error and "TL999" in message.message
    assert [d.code for d in await wait_for_diagnostics(client, uri)] == ["TL302", "TL302", "TL302"]


async def test_positions_stay_utf16_when_the_client_prefers_utf8(client: LanguageClient, tmp_path: Path):
    # Neovim 0.10+ lists utf-8 first; trainlint's columns are converted to UTF-16, so it keeps that
    result = await client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(
                general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf8, types.PositionEncodingKind.Utf16])
            )
        )
    )
    assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf16
    text = TRAIN.replace("    history.append(loss)", '    tag = "é𝛼"; history.append(loss)')
    uri = open_document(client, tmp_path / "train.py", text)
    found = await wait_for_diagnostics(client, uri)
    (on_line,) = [d for d in found if d.range.start.line == 11]
    assert on_line.range.start.character == len('    tag = "é𝛼"; '.encode("utf-16-le")) // 2
