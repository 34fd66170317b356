"""A script choosing its detector by name, one factory per branch (DN-DETR's `build_model_main`: `if
args.modelname == "dn_dab_detr": model, criterion, postprocessors = build_DABDETR(args)`, `elif ...:
= build_dab_deformable_detr(args)`), each factory re-exported by the package above its module
(`from models import build_DABDETR`), and the model wrapped by an imported class on one path
(`model = DETRsegm(model)`): the training loop of another module that the script hands the model and
the criterion runs the criterion's `forward` of each variant every step."""

from __future__ import annotations

from pathlib import Path

from tests.test_library_hooks import lint_tree

VARIANT = """
    import torch
    from torch import nn

    from .segmentation import Segm


    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(4, 4)

        def forward(self, x):
            return self.head(x)


    class SetCriterion(nn.Module):
        def forward(self, outputs, targets):
            num_boxes = torch.as_tensor([len(targets)], dtype=torch.float, device=outputs.device)
            num_boxes = torch.clamp(num_boxes, min=1).item()
            return (outputs - targets).abs().sum() / num_boxes


    def build_{name}(args):
        model = Detector()
        if args.masks:
            model = Segm(model)
        criterion = SetCriterion()
        return model, criterion, {{}}
"""

SEGM = """
    from torch import nn


    class Segm(nn.Module):
        def __init__(self, detr):
            super().__init__()
            self.detr = detr

        def forward(self, x):
            return self.detr(x)
"""

ENGINE = """
    def train_one_epoch(model, criterion, loader, optimizer):
        for x, y in loader:
            outputs = model(x.cuda())
            loss = criterion(outputs, y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""

MAIN = """
    import argparse

    import torch

    from engine import train_one_epoch
    from models import {imports}


    def build_model_main(args):
{branches}
        else:
            raise NotImplementedError
        return model, criterion, postprocessors


    def main(args, loader):
        model, criterion, postprocessors = build_model_main(args)
        model.to(torch.device("cuda"))
        optimizer = torch.optim.AdamW(model.parameters())
        for epoch in range(args.epochs):
            train_one_epoch(model, criterion, loader, optimizer)
"""


def _project(variants: int) -> dict[str, str]:
    names = [f"v{i}" for i in range(variants)]
    files = {"engine.py": ENGINE, "models/__init__.py": "".join(f"from .{n} import build_{n}\n" for n in names)}
    branches = []
    for i, n in enumerate(names):
        files[f"models/{n}/__init__.py"] = f"from .detector import build_{n}\n"
        files[f"models/{n}/detector.py"] = VARIANT.format(name=n)
        files[f"models/{n}/segmentation.py"] = SEGM
        branches.append(f"        {'if' if i == 0 else 'elif'} args.modelname == '{n}':\n            model, criterion, postprocessors = build_{n}(args)")
    files["main.py"] = MAIN.format(imports=", ".join(f"build_{n}" for n in names), branches="\n".join(branches))
    return files


def test_each_factory_a_branch_chooses_runs_its_criterion_every_step(tmp_path: Path) -> None:
    found = [f for f in lint_tree(tmp_path, _project(4)) if f.endswith("TL401")]
    assert found == [f"models/v{i}/detector.py:20:TL401" for i in range(4)], found


def test_more_factories_than_a_value_may_be_say_nothing(tmp_path: Path) -> None:
    assert [f for f in lint_tree(tmp_path, _project(9)) if f.endswith("TL401")] == []


def test_a_factory_returning_an_empty_tuple_is_no_factory(tmp_path: Path) -> None:
    files = _project(2)
    files["models/v0/detector.py"] += "\n\n    def nothing():\n        return ()\n"
    found = lint_tree(tmp_path, files)
    assert not [f for f in found if f.endswith("TL000")] and [f for f in found if f.endswith("TL401")] == ["models/v0/detector.py:20:TL401", "models/v1/detector.py:20:TL401"], found
