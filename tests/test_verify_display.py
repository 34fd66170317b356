"""How `trainlint verify run` shows a run: sparklines in the text report, progress on a terminal only."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainlint.verify.sparkline import marker_column, sparkline

SCRIPTS = Path(__file__).resolve().parent / "fixtures" / "scripts"


def test_sparkline_scales_between_min_and_max_and_shows_gaps():
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([2.0, None, float("nan"), 2.0]) == "▁·×▁"  # flat, unmeasured, non-finite
    # 400 steps in 40 columns: each column shows the largest value of its 10 steps, so a spike stays visible
    line = sparkline([1.0] * 137 + [50.0] + [1.0] * 262)
    assert len(line) == 40 and line.count("█") == 1 and line.index("█") == 13
    assert marker_column(138, 400) == 13 and marker_column(7, 20) == 6


def test_text_report_draws_each_series_with_its_figures():
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", "run", str(SCRIPTS / "mingpt_style.py"), "--steps", "20", "--device", "cpu",
         "--", "--learning_rate", "3", "--grad_norm_clip", "0"],
        capture_output=True, text=True, timeout=300,
    )
    lines = done.stdout.splitlines()
    loss = next(line for line in lines if line.startswith("  loss "))
    assert re.fullmatch(r"  loss +[▁▂▃▄▅▆▇█]{20}  first 2\.897  last \S+  min 2\.897  max \S+", loss), loss
    marker = lines[lines.index(loss) + 1]
    first_column = min(loss.index(block) for block in "▁▂▃▄▅▆▇█" if block in loss)
    assert marker.strip() == "^ diverging from step 2" and marker.index("^") == first_column + 1  # under step 2
    assert any(re.match(r"  grad norm +[▁▂▃▄▅▆▇█]{20}  first ", line) for line in lines)
    assert any(re.match(r"  step time +[▁▂▃▄▅▆▇█]{20}  first [\d.]+ ms", line) for line in lines)
    assert "CUDA memory" not in done.stdout  # on the CPU


def _run_on_a_terminal(command: list[str]) -> tuple[int, str]:
    """Run `command` with stderr on a pseudo-terminal; its exit code and what the terminal showed."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    shown = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: every writer ended
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    return process.wait(timeout=60), shown.decode("utf-8", "replace")


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_progress_is_shown_on_a_terminal_and_nowhere_else(tmp_path: Path):
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import torch
        p = torch.nn.Parameter(torch.ones(4))
        opt = torch.optim.SGD([p], lr=0.1)
        for _ in range(100):
            p.sum().backward()
            opt.step()
            opt.zero_grad()
        """), encoding="utf-8")
    command = [sys.executable, "-m", "trainlint", "verify", "run", str(script), "--steps", "6", "--device", "cpu"]
    code, shown = _run_on_a_terminal(command)
    assert code == 0
    assert re.search(r"\rtrainlint: step 6/6 of train\.py, [\d.]+ s elapsed", shown.replace("\x1b[K", ""))
    piped = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0 and "elapsed" not in piped.stderr and "\r" not in piped.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_probes_show_progress_on_a_terminal(tmp_path: Path):
    pytest.importorskip("torch")
    script = tmp_path / "fp16_adam.py"
    script.write_text(textwrap.dedent("""\
        import torch
        model = torch.nn.Linear(4, 4).half()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for step in range(100):
            loss = model(torch.randn(2, 4).half()).float().pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        """), encoding="utf-8")
    code, shown = _run_on_a_terminal([sys.executable, "-m", "trainlint", "verify", str(script), "--device", "cpu"])
    assert re.search(r"\rtrainlint: verifying finding 1/\d \(TL\d+\), [\d.]+ s elapsed", shown.replace("\x1b[K", "")), shown


def test_probe_verdicts_show_findings_text_literally():
    """`trainlint verify PATH`: a message or summary holding `[/...]` is text, not a closing tag."""
    import io

    from trainlint.verify.report_text import render
    from trainlint.report.render import make_console

    out = io.StringIO()
    row = {"path": "a[/b]\x1b[2J.py", "line": 3, "column": 5, "code": "TL101", "message": "cast [/x] [bold]y[/bold]",
           "verification": {"status": "confirmed", "summary": "froze [/z]\x07", "device": "cpu", "duration_s": 1.0}}
    render(make_console("never", out), [row])
    assert out.getvalue().splitlines()[:2] == [
        r"a[/b]\x1b[2J.py:3:5 TL101 cast [/x] [bold]y[/bold]", r"  = confirmed on cpu, 1.0 s: froze [/z]\x07",
    ]
