"""Problems of `trainlint verify run` are for CI: each has a stable code and a page under rules/run/,
the exit code says whether any problem was found, and a deliberate one can be acknowledged (a comment
on its cause line or in the script, the configuration, the command line) so that CI gates on the rest.
A GradScaler's skipped steps count towards --steps, and a scaler that keeps skipping is a problem."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import verify_run_json
from tests.test_verify_updates import SCALED
from trainlint.verify.problem_kinds import KINDS, KIND_BY_CODE, PAGES_DIR, expected_pages

VERIFY_DIR = Path(__file__).resolve().parents[1] / "trainlint" / "verify"


def test_every_problem_page_is_current():
    pages = expected_pages()
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in PAGES_DIR.glob("*.md")}
    assert on_disk == pages, "run `python -m trainlint.verify.problem_kinds`"


def test_every_code_the_verifier_reports_has_a_kind_and_every_kind_is_reported():
    used = set()
    for source in VERIFY_DIR.glob("*.py"):
        if source.name != "problem_kinds.py":
            used |= set(re.findall(r'"(TLR\d{3})"', source.read_text(encoding="utf-8")))
    assert used == set(KIND_BY_CODE), (used ^ set(KIND_BY_CODE))
    assert len({k.name for k in KINDS}) == len(KINDS)


pytest.importorskip("torch")

FROZEN_LR = """\
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0){comment}
    for step in range(30):
        x = torch.randn(16, 8)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def _script(tmp_path: Path, comment: str = "", header: str = "") -> Path:
    path = tmp_path / "train.py"
    path.write_text(header + textwrap.dedent(FROZEN_LR.format(comment=comment)), encoding="utf-8")
    return path


def test_a_problem_has_a_code_a_page_and_its_cause_line_and_fails_the_run(tmp_path: Path):
    code, report = verify_run_json(_script(tmp_path), "--steps", "10", cwd=tmp_path)
    (problem,) = report["problems"]
    assert code == 1
    assert problem["code"] == "TLR104" and problem["name"] == "steps-change-nothing" and problem["acknowledged"] is None
    assert problem["url"] == "https://github.com/trainlint/trainlint/blob/main/rules/run/TLR104-steps-change-nothing.md"
    assert (problem["line"], problem["step"]) == (6, 1) and problem["path"] == str(tmp_path / "train.py")
    assert problem["message"].startswith("updates: SGD param group 0")


@pytest.mark.parametrize("how, args, header, comment, said", [
    ("comment on the cause line", (), "", "  # noqa: TLR104", "comment at train.py:6"),
    ("comment in the script", (), "# trainlint: noqa: TLR104\n", "", "file comment in train.py"),
    ("command line", ("--acknowledge", "tlr104"), "", "", "setting"),
    ("configuration", (), "", "", "setting"),
])
def test_an_acknowledged_problem_is_still_shown_and_no_longer_fails_the_run(tmp_path: Path, how, args, header, comment, said):
    if how == "configuration":
        (tmp_path / "pyproject.toml").write_text('[tool.trainlint]\nverify-acknowledge = ["TLR104"]\n', encoding="utf-8")
    code, report = verify_run_json(_script(tmp_path, comment, header), "--steps", "10", *args, cwd=tmp_path)
    (problem,) = report["problems"]
    assert code == 0 and problem["code"] == "TLR104" and problem["acknowledged"] == said


def test_a_comment_for_another_code_or_line_acknowledges_nothing_and_the_text_report_says_what_was(tmp_path: Path):
    code, report = verify_run_json(_script(tmp_path, "  # noqa: TLR105"), "--steps", "10", cwd=tmp_path)
    assert code == 1 and report["problems"][0]["acknowledged"] is None
    script = _script(tmp_path, "  # noqa: TLR104")
    done = subprocess.run([sys.executable, "-m", "trainlint", "verify", "run", str(script), "--device", "cpu", "--steps", "10"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0
    assert "Acknowledged (not counted in the exit code)\n  - TLR104 updates: SGD param group 0" in done.stdout
    assert "(acknowledged: comment at train.py:6)" in done.stdout and "No training-health problem in this run apart from 1 acknowledged." in done.stdout


def test_an_unknown_code_to_acknowledge_is_an_error_before_anything_runs(tmp_path: Path):
    done = subprocess.run([sys.executable, "-m", "trainlint", "verify", "run", str(_script(tmp_path)), "--acknowledge", "TLR999"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and "no problem of `verify run` has the code TLR999" in done.stderr and not done.stdout


def test_steps_a_grad_scaler_skips_count_towards_steps_and_a_scaler_that_keeps_skipping_is_named(tmp_path: Path):
    script = tmp_path / "train.py"
    # three batches in four have NaN gradients (sqrt's gradient at 0)
    unstable = " + ((pred - pred.detach()).pow(2).sqrt().mean() if step % 4 else 0.0)"
    script.write_text(textwrap.dedent(SCALED.format(extra=unstable)), encoding="utf-8")
    code, report = verify_run_json(script, "--steps", "20", cwd=tmp_path)
    # 20 iterations, 15 of them skipped: the run stops there (it used to run all the script's iterations)
    assert (report["steps"], report["skipped_steps"]) == (5, 15)
    assert report["message"] == "stopped after 20 iterations: 5 optimizer steps, 15 skipped by the GradScaler (inf/NaN gradients)"
    (problem,) = [p for p in report["problems"] if p["code"] == "TLR107"]
    assert code == 1 and problem["line"] == 14 and problem["step"] == 2
    assert problem["message"].startswith("updates: GradScaler.step skipped 15 of 20 optimizer steps (75%; ")
    script.write_text(textwrap.dedent(SCALED.format(extra=" + ((pred - pred.detach()).pow(2).sqrt().mean() if step == 0 else 0.0)")), encoding="utf-8")
    code, report = verify_run_json(script, "--steps", "20", cwd=tmp_path)
    assert (report["steps"], report["skipped_steps"]) == (19, 1) and report["problems"] == [] and code == 0


def test_a_comment_in_the_script_acknowledges_a_problem_with_no_cause_line(tmp_path: Path):
    # gradients never cleared (TLR106) names no line: the script's own file comment is where to say so
    text = textwrap.dedent(FROZEN_LR.format(comment="")).replace("lr=0.0", "lr=1e-3").replace("    optimizer.zero_grad()\n", "")
    assert "zero_grad" not in text
    script = tmp_path / "train.py"
    script.write_text(text, encoding="utf-8")
    code, report = verify_run_json(script, "--steps", "10", cwd=tmp_path)
    (problem,) = report["problems"]
    assert code == 1 and problem["code"] == "TLR106" and problem["line"] is None
    script.write_text("# trainlint: noqa: TL501, TLR106  (accumulating on purpose)\n" + text, encoding="utf-8")
    code, report = verify_run_json(script, "--steps", "10", cwd=tmp_path)
    assert code == 0 and report["problems"][0]["acknowledged"] == "file comment in train.py"
