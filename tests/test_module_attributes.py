"""Models a project module's name picks from the configuration: `getattr(base_model, "build_%s" %
args.model)(...)` (ban-vqa's and pytorch-template's way). The candidates are the module's classes and
the classes its factories build, named with the constant start of the name; more than three say
nothing, as for a dict or a registry of classes."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from tests.test_library_hooks import lint_tree
from trainlint.model.candidates import name_prefix

BASE_MODEL = """
    import torch
    from torch import nn


    class FCNet(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.l = nn.Linear(n, n)

        def forward(self, x):
            return self.l(x)


    class BanModel(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.fc = FCNet(n)

        def forward(self, x):
            mask = torch.arange(16).to(x.device) < 8
            return self.fc(x) * mask


    def build_ban(n):
        return BanModel(n)
"""

MAIN = """
    import base_model
    from train import train


    def main(args, loader):
        constructor = "build_%s" % args.model
        model = getattr(base_model, constructor)(16).cuda()
        train(model, loader)
"""

TRAIN = """
    import torch


    def train(model, loader):
        optim = torch.optim.Adamax(model.parameters())
        for x in loader:
            loss = model(x.cuda()).sum()
            loss.backward()
            optim.step()
            optim.zero_grad()
"""


def test_a_model_a_module_name_picks_runs_where_it_is_handed(tmp_path: Path) -> None:
    found = lint_tree(tmp_path, {"base_model.py": BASE_MODEL, "main.py": MAIN, "train.py": TRAIN})
    assert "base_model.py:21:TL406" in found


def test_a_module_of_many_models_picked_by_any_name_says_nothing(tmp_path: Path) -> None:
    many = BASE_MODEL + "".join(
        f"""

    class Other{i}(nn.Module):
        def forward(self, x):
            return x
""" for i in range(3))
    main = MAIN.replace('"build_%s" % args.model', "args.model")
    assert "base_model.py:21:TL406" not in lint_tree(tmp_path, {"base_model.py": many, "main.py": main, "train.py": TRAIN})


def test_the_constant_start_of_a_computed_name() -> None:
    assert name_prefix(cst.parse_expression('"build_%s" % args.model')) == "build_"
    assert name_prefix(cst.parse_expression('f"build_{args.model}"')) == "build_"
    assert name_prefix(cst.parse_expression('"build_" + args.model')) == "build_"
    assert name_prefix(cst.parse_expression("args.model")) == ""
