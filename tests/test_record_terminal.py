"""scripts/record_terminal.py records a real terminal run of the bundled examples as an SVG (the
README shows docs/first-run.svg): its progress bar, findings and summary."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_recording_shows_progress_findings_and_summary(tmp_path: Path) -> None:
    svg = tmp_path / "run.svg"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "record_terminal.py"), "--output", str(svg)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    shown = html.unescape(" ".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg.read_text(encoding="utf-8")))).replace("\xa0", " ")
    assert "$ trainlint check examples/" in shown
    assert re.search(r"(checking|summarising the project) +[━╸╺ ]+ +\d+/7 +files", shown), shown[:500]
    assert "examples/bf16_lm.py:54:13: TL101" in shown
    assert re.search(r"Found \d+ problems", shown)


def test_the_readme_shows_the_recording() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "![" in readme and "docs/first-run.svg" in readme
    assert (ROOT / "docs" / "first-run.svg").is_file()
