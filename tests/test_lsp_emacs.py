"""The language server in Emacs, through eglot, started by the README's own configuration snippet:
Emacs runs in batch mode, visits a training file, and reports what eglot received and flymake
shows (see emacs/drive_trainlint.el)."""

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
DRIVER = Path(__file__).resolve().parent / "emacs" / "drive_trainlint.el"
EMACS = shutil.which("emacs")


def readme_snippet() -> str:
    """The README's Emacs configuration: the elisp block headed `;; Emacs: eglot`."""
    blocks = re.findall(r"```elisp\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (block,) = [b for b in blocks if b.startswith(";; Emacs: eglot")]
    return block


def eglot_available() -> bool:
    """Whether this Emacs has eglot: built in (Emacs 29) or a package (Debian 12's elpa-eglot)."""
    if EMACS is None:
        return False
    try:
        done = subprocess.run(
            [EMACS, "--batch", "--eval", "(progn (package-activate-all) (kill-emacs (if (require 'eglot nil t) 0 1)))"],
            capture_output=True, timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.skipif(not eglot_available(), reason="Emacs with eglot is not installed (.ci/run installs Debian's emacs-nox and elpa-eglot)")
def test_readme_configuration_shows_findings_and_follows_edits(tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[tool.trainlint]\n")
    source = project / "train.py"
    source.write_text(BAD)
    config = tmp_path / "init.el"
    config.write_text(readme_snippet())
    # `trainlint` on PATH, as the snippet expects, running this checkout's code
    shims = tmp_path / "bin"
    shims.mkdir()
    shim = shims / "trainlint"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m trainlint "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    report = tmp_path / "shown.json"
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TRAINLINT_CACHE_DIR": str(tmp_path / "cache"),
        "TRAINLINT_EMACS_OUT": str(report),
    }
    # an interactive Emacs activates its packages before reading the init file; batch mode does not
    done = subprocess.run(
        [EMACS, "--batch", "--eval", "(package-activate-all)", "-l", str(config), str(source), "-l", str(DRIVER)],
        cwd=project, env=env, timeout=180, capture_output=True, text=True,
    )
    assert report.exists(), f"Emacs wrote no report: {done.stdout[-2000:]} {done.stderr[-3000:]}"
    shown = json.loads(report.read_text())
    assert shown["managed"] is True and shown["server"] == "trainlint"
    assert shown["received_on_open"] == 1
    (finding,) = shown["on_open"]
    assert (finding["line"], finding["column"], finding["type"]) == (10, 4, "eglot-error")
    assert finding["text"].startswith("trainlint [TL302]: `history.append(...)` keeps every step's tensor")
    assert shown["after_edit"] == []
    (syntax,) = shown["mid_edit"]
    assert (syntax["line"], syntax["text"]) == (11, "trainlint [TL000]: syntax error: invalid syntax")
    assert shown["server_alive"] is True
