"""`model, criterion, postprocessors = build_model(args)`, DETR's way of building its objects: the
names take the places of the tuple the factory returns, through a package's `__init__` whose
`build_model` returns another module's `build(args)`. The criterion handed to the training loop of
a module that never imports the model's module runs its `forward` every step; the post-processor at
another place of the same tuple, handed only to evaluation, does not."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

DETR = """\
import torch
from torch import nn


class DETR(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        return self.head(x)


class SetCriterion(nn.Module):
    def forward(self, outputs, targets):
        num_boxes = torch.as_tensor([len(targets)], dtype=torch.float, device=outputs.device)
        num_boxes = torch.clamp(num_boxes, min=1).item()
        return {"loss": outputs.sum() / num_boxes}


class PostProcess(nn.Module):
    def forward(self, outputs):
        return outputs.max().item()


def build(args):
    model = DETR()
    criterion = SetCriterion()
    postprocessors = {"bbox": PostProcess()}
    return model, criterion, postprocessors
"""

INIT = """\
from .detr import build


def build_model(args):
    return build(args)
"""

ENGINE = """\
import torch


def train_one_epoch(model, criterion, loader, optimizer, device):
    model.train()
    for samples, targets in loader:
        samples = samples.to(device)
        outputs = model(samples)
        loss_dict = criterion(outputs, targets)
        losses = sum(loss_dict.values())
        optimizer.zero_grad()
        losses.backward()
        optimizer.step()


@torch.no_grad()
def evaluate(model, postprocessors, loader, device):
    for samples, _ in loader:
        postprocessors["bbox"](model(samples.to(device)))
"""

MAIN = """\
import torch
from models import build_model
from engine import evaluate, train_one_epoch


def main(args, loader):
    device = torch.device("cuda")
    model, criterion, postprocessors = build_model(args)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters())
    for epoch in range(args.epochs):
        train_one_epoch(model, criterion, loader, optimizer, device)
        evaluate(model, postprocessors, loader, device)
"""


def _files(tmp_path: Path, changed: dict[str, str] | None = None) -> dict[str, str]:
    (tmp_path / "models").mkdir()
    return {"models/__init__.py": INIT, "models/detr.py": DETR, "engine.py": ENGINE, "main.py": MAIN, **(changed or {})}


def test_the_criterion_unpacked_from_a_factory_tuple_runs_every_step(tmp_path: Path) -> None:
    found = lint_project(tmp_path, _files(tmp_path), "TL401")
    assert found == ["detr.py:17:TL401"]


def test_each_name_takes_its_own_place_of_the_tuple(tmp_path: Path) -> None:
    # the post-processor is handed to the training loop's criterion parameter nowhere: its read stays unreported
    main = MAIN.replace("model, criterion, postprocessors = build_model(args)", "model, postprocessors, criterion = build_model(args)")
    found = lint_project(tmp_path, _files(tmp_path, {"main.py": main}), "TL401")
    assert "detr.py:17:TL401" not in found
    assert "detr.py:23:TL401" not in found


def test_a_factory_defined_in_the_package_itself_is_read_the_same(tmp_path: Path) -> None:
    init = "from .detr import DETR, SetCriterion\n\n\ndef build_model(args):\n    return DETR(), SetCriterion(), None\n"
    found = lint_project(tmp_path, _files(tmp_path, {"models/__init__.py": init}), "TL401")
    assert found == ["detr.py:17:TL401"]
