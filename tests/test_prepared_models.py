"""A model Accelerate prepares (`model, optimizer = accelerator.prepare(model, optimizer)`) is the
model it was given, here chosen from a dict of factories (`SiT_models[args.model](...)`), so the
loss object the script calls with it every step (`loss_fn(model, x)`, its `__call__` in another
module) runs that model's `forward`, and what the forward calls through a method held in an
attribute (`self.timestep_embedding = self.positional_embedding`) runs every step too. A `prepare`
of something else, or a held method the forward never calls, says nothing."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

MODELS = """\
import torch
from torch import nn


class TimestepEmbedder(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.mlp = nn.Linear(size, size)
        self.size = size

    @staticmethod
    def positional_embedding(t, dim):
        freqs = torch.exp(torch.arange(start=0, end=dim, dtype=torch.float32) / dim).to(device=t.device)
        return t[:, None] * freqs[None]

    def forward(self, t):
        self.timestep_embedding = self.positional_embedding
        return self.mlp(CALLED(t, dim=self.size))


class SiT(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.t_embedder = TimestepEmbedder(8)

    def forward(self, x, t):
        return x + self.t_embedder(t)


def SiT_S(**kwargs):
    return SiT(depth=2, **kwargs)


def SiT_B(**kwargs):
    return SiT(depth=4, **kwargs)


SiT_models = {"SiT-S": SiT_S, "SiT-B": SiT_B}
"""

LOSS = """\
import torch


class SILoss:
    def __call__(self, model, x):
        t = torch.rand(x.shape[0], device=x.device)
        return model(x, t).pow(2).mean()
"""

TRAIN = """\
import torch
from accelerate import Accelerator
from models import SiT_models
from loss import SILoss


def main(args):
    accelerator = Accelerator()
    device = accelerator.device
    model = SiT_models[args.model]()
    model = model.to(device)
    accelerator.native_amp = False
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = PREPARE(model, optimizer)
    loss_fn = SILoss()
    for x in args.loader:
        loss = loss_fn(model, x)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
"""


def _lint(tmp_path: Path, prepare: str = "accelerator.prepare", called: str = "self.timestep_embedding") -> list[str]:
    files = {"pyproject.toml": "", "models.py": MODELS.replace("CALLED", called), "loss.py": LOSS, "train.py": TRAIN.replace("PREPARE", prepare)}
    return lint_project(tmp_path, files, "TL406")


def test_a_prepared_model_runs_its_forward_and_held_method_where_the_loss_calls_it(tmp_path: Path) -> None:
    assert _lint(tmp_path) == ["models.py:13:TL406"]


def test_a_method_called_by_name_runs_too(tmp_path: Path) -> None:
    assert _lint(tmp_path, called="self.positional_embedding") == ["models.py:13:TL406"]


def test_what_another_object_prepares_is_not_known(tmp_path: Path) -> None:
    assert _lint(tmp_path, prepare="args.helper.prepare") == []


def test_a_held_method_the_forward_does_not_call_runs_nowhere(tmp_path: Path) -> None:
    assert _lint(tmp_path, called="torch.sin") == []


PROPERTY = """\
import torch


class Trainer:
    def __init__(self, model, loader):
        self.model = model
        self.loader = loader
        self.optimizer = torch.optim.Adam(model.parameters())

    @property
    def unwrapped_model(self):
        return self.model

    def train(self):
        for x in self.loader:
            loss = self.model(x.cuda()).mean()
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.unwrapped_model.eval()
"""


def test_a_property_read_is_its_value_not_a_method(tmp_path: Path) -> None:
    # (`self.unwrapped_model` holds the model the property returns: its `eval()` is the model's)
    assert lint_project(tmp_path, {"pyproject.toml": "", "trainer.py": PROPERTY}, "TL503") == ["trainer.py:20:TL503"]
