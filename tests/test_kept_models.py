"""A module's model built for its summary is used for its own lint only when the lint's view of the
project answers every question that model asked as the summary's view did."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainlint.config import Settings
from trainlint.engine.lint import lint_python
from trainlint.project import kept_models
from trainlint.project.shared import forget_projects

TRAIN_CALLS_STEP = """\
import torch
from pkg.steps import accuracy, train_step


def train(model, loader, opt):
    for x, y in loader:
        train_step(model, x.cuda(), opt)
    print(accuracy(model(x.cuda()), y.cuda()))
"""
TRAIN_EVALUATES = """\
import torch
from pkg.steps import accuracy


def evaluate(model, loader):
    for x, y in loader:
        print(accuracy(model(x.cuda()), y.cuda()))
"""
STEPS = """\
import torch


def train_step(model, x, opt):
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(loss.item())
    return loss


def accuracy(logits, y):
    return (logits.argmax(1) == y).float().mean().item()
"""


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Each file whose lint asked for a kept model, and whether it got one."""
    asked: list[tuple[str, bool]] = []
    original = kept_models.kept_model

    def spy(path: str, *args: object) -> object:
        model = original(path, *args)  # type: ignore[arg-type]
        asked.append((path, model is not None))
        return model

    monkeypatch.setattr(kept_models, "kept_model", spy)
    forget_projects()
    yield asked
    forget_projects()


def _project(root: Path, train: str) -> None:
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "steps.py").write_text(STEPS)
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (root / "train.py").write_text(train)


def _findings(*files: str) -> list[tuple[str, str, int, str]]:
    """The findings of `files` linted in this order in one process (the importer first: its lint
    summarises the helper module, whose model is then kept for the helper's own lint)."""
    out = []
    for name in files:
        result = lint_python(Path(name).read_text(), name, Settings())
        out.extend((name, d.code, d.line, d.message) for d in result.diagnostics)
    return out


def test_a_helper_its_callers_do_not_step_through_is_linted_with_its_summary_s_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[tuple[str, bool]]
) -> None:
    monkeypatch.chdir(tmp_path)  # (the lint names files as given, relative; summaries from the root)
    _project(tmp_path, TRAIN_EVALUATES)
    reused = _findings("train.py", "pkg/steps.py")
    assert ("pkg/steps.py", True) in taken
    forget_projects()
    alone = _findings("pkg/steps.py") + _findings("train.py")  # (the helper first: nothing kept)
    assert sorted(reused) == sorted(alone)


def test_a_helper_called_every_step_is_analysed_again_with_its_callers_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[tuple[str, bool]]
) -> None:
    monkeypatch.chdir(tmp_path)
    _project(tmp_path, TRAIN_CALLS_STEP)
    found = _findings("train.py", "pkg/steps.py")
    # the summary's view has no step seeds; the lint's has train_step's: the kept model is not used
    assert ("pkg/steps.py", False) in taken
    assert ("pkg/steps.py", "TL401", 9) in [f[:3] for f in found]


def test_a_model_used_for_its_lint_without_asking_would_miss_the_per_step_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[tuple[str, bool]]
) -> None:
    """What the check of the answers is for: the summary's model of the same helper finds nothing."""
    monkeypatch.chdir(tmp_path)
    _project(tmp_path, TRAIN_CALLS_STEP)
    monkeypatch.setattr(kept_models.RecordingLookup, "answers_equal", lambda self, other: True)
    found = _findings("train.py", "pkg/steps.py")
    assert ("pkg/steps.py", True) in taken
    assert ("pkg/steps.py", "TL401", 9) not in [f[:3] for f in found]


def test_an_edited_helper_is_analysed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[tuple[str, bool]]) -> None:
    monkeypatch.chdir(tmp_path)
    _project(tmp_path, TRAIN_EVALUATES)
    lint_python(Path("train.py").read_text(), "train.py", Settings())
    edited = STEPS.replace("    opt.zero_grad()\n", "")
    result = lint_python(edited, "pkg/steps.py", Settings())  # (an editor's buffer, not the file read)
    assert taken[-1] == ("pkg/steps.py", False)
    assert "TL501" in {d.code for d in result.diagnostics}  # (the edit's own finding: its own analysis)


NET = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)

    def predict(self, loader):
        self.eval()
        out = []
        for x in loader:
            out.append(self(x.cuda()).argmax(1).cpu())
        return out
"""
PREDICTS = """\
import torch
from pkg.net import Net


def report(loader):
    net = Net().cuda()
{predict}
"""


@pytest.mark.parametrize("predict, reported", [
    ("    with torch.no_grad():\n        print(net.predict(loader))", False),
    ("    print(net.predict(loader))", True),
])
def test_a_module_whose_methods_its_importers_call_with_or_without_grad_keeps_its_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: list[tuple[str, bool]], predict: str, reported: bool
) -> None:
    """Whether importers call a method under no_grad enters no model (only the rules and the summary's
    method lists ask it, of the view they are handed): the two views answering it differently still
    share the model, and the lint's answer is its own view's."""
    monkeypatch.chdir(tmp_path)
    _project(tmp_path, PREDICTS.format(predict=predict))
    (tmp_path / "pkg" / "net.py").write_text(NET)
    reused = _findings("train.py", "pkg/net.py")
    assert ("pkg/net.py", True) in taken
    assert (("pkg/net.py", "TL303") in [f[:2] for f in reused]) is reported
    forget_projects()
    alone = _findings("pkg/net.py") + _findings("train.py")
    assert sorted(reused) == sorted(alone)
