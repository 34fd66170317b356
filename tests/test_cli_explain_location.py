"""`trainlint explain FILE:LINE` through the real command: why a line was flagged or left alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """\
import torch


def unused_helper(t):
    return t.item()


def log_metrics(loss):
    print(f"loss={loss:.3f}")


pad = torch.tensor([0, 1])
for step, (x, y) in enumerate(loader):
    x, y = x.cuda(), y.cuda()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 100 == 0:
        print(loss.item())
    if log_interval_reached:
        print(loss.item())
    offset = pad[0].item()
    total += loss.item()
    log_metrics(loss)
    seen += loss.item()  # noqa: TL401
print(loss.item())
"""


def explain(where: str, cwd: Path) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "trainlint", "explain", where], capture_output=True, text=True, cwd=cwd, timeout=120)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(SCRIPT)
    return tmp_path


def _line(text: str) -> int:
    return next(i for i, line in enumerate(SCRIPT.splitlines(), 1) if line.strip() == text)


LOOP = _line("for step, (x, y) in enumerate(loader):")


def test_a_gated_item_names_the_gate_and_why_it_gates(project: Path) -> None:
    line = _line("print(loss.item())")
    code, out, err = explain(f"train.py:{line}", project)
    assert code == 0, err
    assert out.startswith(f"train.py:{line}: print(loss.item())")
    assert "Runs every training step: no" in out
    assert f"in the step loop at line {LOOP} (`enumerate(loader)`)" in out
    assert f"gated by `if step % 100 == 0:` (line {line - 1}): a periodic test (`%`)" in out
    assert "TL401" in out and "fires" not in out


def test_a_gate_word_names_its_name_list(project: Path) -> None:
    line = _line("if log_interval_reached:") + 1
    code, out, _ = explain(f"train.py:{line}", project)
    assert code == 0
    assert "`log_interval_reached` holds `interval`, a word of the name list `GATE_WORDS` of `trainlint/model/gates.py`" in out


def test_an_item_after_the_loop_runs_once(project: Path) -> None:
    line = len(SCRIPT.splitlines())
    code, out, _ = explain(f"train.py:{line}", project)
    assert code == 0
    assert f"not per step: after the step loop at line {LOOP}; it runs once, when that loop is done" in out


def test_a_function_no_step_reaches(project: Path) -> None:
    code, out, _ = explain(f"train.py:{_line('return t.item()')}", project)
    assert code == 0
    assert "not per step: no chain from a step loop reaches `unused_helper`" in out


def test_a_flagged_line_says_which_rule_fires(project: Path) -> None:
    line = _line("total += loss.item()")
    code, out, _ = explain(f"train.py:{line}:5", project)  # (as a finding prints its place)
    assert code == 1
    assert "Runs every training step: yes" in out
    assert "TL401 host-sync-in-step: fires" in out
    assert "`loss.item()` synchronises the host with the GPU on every training step" in out


def test_a_function_a_step_calls_shows_the_chain(project: Path) -> None:
    formatted = _line('print(f"loss={loss:.3f}")')
    code, out, _ = explain(f"train.py:{formatted}", project)
    assert code == 1
    assert f"`log_metrics` runs every step: called via line {_line('log_metrics(loss)')} `log_metrics(loss)`" in out
    assert "TL401 host-sync-in-step: fires" in out


def test_a_host_tensor_says_where_it_was_built(project: Path) -> None:
    line = _line("offset = pad[0].item()")
    code, out, _ = explain(f"train.py:{line}", project)
    assert code == 0
    assert "`pad[0]` is a host tensor" in out
    assert f"`pad` is bound at line {_line('pad = torch.tensor([0, 1])')} (`pad = torch.tensor([0, 1])`)" in out


def test_a_noqa_comment_is_named(project: Path) -> None:
    line = _line("seen += loss.item()  # noqa: TL401")
    code, out, _ = explain(f"train.py:{line}", project)
    assert code == 0
    assert "silenced by a `noqa` comment naming TL401" in out


def test_a_rule_code_still_shows_its_page(project: Path) -> None:
    code, out, _ = explain("TL401", project)
    assert code == 0 and out.startswith("# TL401 host-sync-in-step")


@pytest.mark.parametrize(("where", "said"), [("missing.py:3", "no such file"), ("train.py:999", "there is no line 999")])
def test_a_bad_location_is_a_usage_error(project: Path, where: str, said: str) -> None:
    code, out, err = explain(where, project)
    assert code == 2 and out == "" and said in err


def test_a_number_formatted_names_where_it_was_read(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import torch\n"
        "for step, (x, y) in enumerate(loader):\n"
        "    loss = criterion(model(x.cuda()), y)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    value = loss.item()\n"
        "    print(f'loss {value}')\n"
    )
    code, out, _ = explain("train.py:7", tmp_path)
    assert code == 0
    assert "Runs every training step: yes" in out
    assert "`value` is a Python number (already on the host): bound at line 6 (`value = loss.item()`)" in out
