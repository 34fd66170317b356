"""The language server driven by Neovim's built-in LSP client (headless), as an editor user sees it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_lsp_server import BAD

DRIVER = Path(__file__).resolve().parent / "neovim" / "drive_trainlint.lua"

pytestmark = pytest.mark.skipif(
    shutil.which("nvim") is None, reason="Neovim is not installed (`apt-get install -y neovim`; .ci/run installs it)"
)


def test_neovim_shows_fixes_hovers_and_recovers(tmp_path: Path):
    source = tmp_path / "train.py"
    source.write_text(BAD)
    report = tmp_path / "shown.json"
    env = {**os.environ, "TRAINLINT_PYTHON": sys.executable, "TRAINLINT_NVIM_OUT": str(report)}
    subprocess.run(
        ["nvim", "--headless", "--clean", "-c", f"luafile {DRIVER}", str(source)],
        cwd=tmp_path, env=env, timeout=120, check=True, capture_output=True,
    )
    shown = json.loads(report.read_text())
    (finding,) = shown["on_open"]
    assert (finding["lnum"], finding["col"], finding["code"], finding["source"]) == (9, 4, "TL302", "trainlint")
    assert finding["severity"] == 1  # vim.diagnostic.severity.ERROR
    assert shown["hover"].startswith("**TL302 autograd-history-accumulated** (error)")
    assert shown["actions"] == ["TL302: detach: `loss.detach()` (safe fix)", "TL302: silence on this line (# noqa: TL302)"]
    assert shown["fixed_line"] == "    history.append(loss.detach())"
    assert shown["after_fix"] == []
    assert [d["code"] for d in shown["mid_edit"]] == ["TL000"]
    assert shown["mid_edit"][0]["lnum"] == 10 and "syntax error" in shown["mid_edit"][0]["message"]
    assert shown["recovered"] == [] and shown["server_alive"]
    assert shown["after_save"] == []
    assert "history.append(loss.detach())" in source.read_text()
