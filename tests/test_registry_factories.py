"""A factory of another module that returns `REGISTRY.get(name)(cfg)` builds one of the classes
registered there: what the configuration names is unknown, but the project's registrations bound it
(SparseInst's `self.criterion = build_sparse_inst_criterion(cfg)`). An attribute of `self` holding
such an object runs the candidate's `forward` when called (`self.criterion(out, y)`), with the chain
saying which class it may be; a factory that may return something else, or a registry of more than
three such classes, says nothing."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

LOSS = """\
import torch
from torch import nn
from registry import Registry

CRITERIA = Registry("criteria")


@CRITERIA.register()
class SetLoss(nn.Module):
    def forward(self, out, y):
        n = torch.clamp((y > 0).sum(), min=1).item()
        return (out - y).pow(2).sum() / n


def build_criterion(cfg):
    return CRITERIA.get(cfg.loss)(cfg)
"""

TRAIN = """\
import torch
from torch import nn
from loss import build_criterion


class Trainer:
    def __init__(self, cfg):
        self.model = nn.Linear(4, 4).cuda()
        self.criterion = build_criterion(cfg)

    def train(self, loader, opt):
        for x, y in loader:
            loss = self.criterion(self.model(x.cuda()), y.cuda())
            loss.backward()
            opt.step()
"""

REGISTRY = "class Registry:\n    def __init__(self, name):\n        self.name = name\n"


def test_a_factory_returning_a_registry_choice_builds_one_of_its_classes(tmp_path: Path) -> None:
    found = lint_project(tmp_path, {"registry.py": REGISTRY, "loss.py": LOSS, "train.py": TRAIN}, "TL401")
    assert found == ["loss.py:11:TL401"]


def test_a_factory_that_may_return_something_else_says_nothing(tmp_path: Path) -> None:
    loss = LOSS.replace("    return CRITERIA.get(cfg.loss)(cfg)", "    if cfg.loss:\n        return CRITERIA.get(cfg.loss)(cfg)\n    return nn.MSELoss()")
    assert lint_project(tmp_path, {"registry.py": REGISTRY, "loss.py": loss, "train.py": TRAIN}, "TL401") == []


def test_a_registry_of_many_classes_says_nothing(tmp_path: Path) -> None:
    more = "".join(f"\n\n@CRITERIA.register()\nclass Loss{i}(nn.Module):\n    def forward(self, out, y):\n        return out.sum()\n" for i in range(3))
    assert lint_project(tmp_path, {"registry.py": REGISTRY, "loss.py": LOSS + more, "train.py": TRAIN}, "TL401") == []
