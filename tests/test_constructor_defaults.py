"""A branch on what an object keeps from a constructor parameter that no construction gives never
runs: taming's `VectorQuantizer2(..., remap=None)` keeps `self.remap`, handed on by `VQModel(...,
remap=None)`, which the training script builds without one, so `if self.remap is not None:` runs in no
object; YOLO's loss leaves `use_dfl=True`, so the `else` of `if self.use_dfl:` never runs. Where a
construction gives the parameter, where a subclass may hand it on, or where a setting decides, the
branch may run."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

QUANTIZE = """\
import torch
from torch import nn


class VectorQuantizer2(nn.Module):
    def __init__(self, n_e, e_dim, beta, remap=None):
        super().__init__()
        self.embedding = nn.Embedding(n_e, e_dim)
        self.remap = remap

    def forward(self, z):
        inds = torch.cdist(z, self.embedding.weight).argmin(-1)
        if self.remap is not None:
            inds = inds + torch.randint(0, 4, inds.shape).to(inds.device)
        return self.embedding(inds)
"""

VQGAN = """\
from torch import nn
from quantize import VectorQuantizer2 as VectorQuantizer


class VQModel(nn.Module):
    def __init__(self, n_embed, embed_dim, remap=None):
        super().__init__()
        self.quantize = VectorQuantizer(n_embed, embed_dim, beta=0.25, remap=remap)

    def forward(self, z):
        return self.quantize(z)
"""

TRAIN = """\
import torch
from vqgan import VQModel


def main(loader):
    model = VQModel(1024, 4).cuda()
    opt = torch.optim.Adam(model.parameters())
    for z in loader:
        loss = model(z.cuda()).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""

LOSS = """\
import torch
from torch import nn


class BboxLoss(nn.Module):
    def __init__(self, reg_max, use_dfl=False):
        super().__init__()
        self.use_dfl = use_dfl

    def forward(self, pred):
        if self.use_dfl:
            return pred.sum()
        return torch.tensor(0.0).to(pred.device)


class ComputeLoss:
    def __init__(self, model, use_dfl=True):
        self.bbox_loss = BboxLoss(16, use_dfl=use_dfl)

    def __call__(self, pred):
        return self.bbox_loss(pred)
"""

YOLO = """\
import torch
from loss import ComputeLoss


def main(model, loader):
    compute_loss = ComputeLoss(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x in loader:
        loss = compute_loss(model(x.cuda()))
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def _vq(tmp_path: Path, **changed: str) -> list[str]:
    files = {"quantize.py": QUANTIZE, "vqgan.py": VQGAN, "train.py": TRAIN}
    files.update({f"{k}.py": v for k, v in changed.items()})
    return lint_project(tmp_path, files, "TL406")


def test_a_parameter_no_construction_gives_keeps_its_branch_dead(tmp_path: Path) -> None:
    assert _vq(tmp_path) == []


def test_a_construction_giving_the_parameter_runs_the_branch(tmp_path: Path) -> None:
    assert _vq(tmp_path, train=TRAIN.replace("VQModel(1024, 4)", 'VQModel(1024, 4, remap="used.npy")')) == ["quantize.py:14:TL406"]


def test_a_subclass_that_may_hand_it_on_says_nothing(tmp_path: Path) -> None:
    vqgan = VQGAN + "\n\nclass GumbelVQ(VQModel):\n    pass\n"
    assert _vq(tmp_path, vqgan=vqgan) == ["quantize.py:14:TL406"]


def test_a_flag_true_by_default_leaves_its_else_dead(tmp_path: Path) -> None:
    assert lint_project(tmp_path, {"loss.py": LOSS, "yolo.py": YOLO}, "TL406") == []


def test_a_flag_a_setting_decides_may_be_either(tmp_path: Path) -> None:
    yolo = YOLO.replace("ComputeLoss(model)", "ComputeLoss(model, use_dfl=cfg.dfl)").replace("(model, loader)", "(model, loader, cfg)")
    assert lint_project(tmp_path, {"loss.py": LOSS, "yolo.py": yolo}, "TL406") == ["loss.py:13:TL406"]
