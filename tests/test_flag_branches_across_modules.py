"""A model's `forward(self, x, gen_image=False)` that generates only `if gen_image:` (RCG's MAGE):
the training loop of another module, handed the model by the script that builds it, calls
`model(x)` and leaves the flag False, so the generation branch, and the sampler of a third module it
calls, run on no training step. Where the training loop sets the flag, both run every step."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

MODEL = """\
import torch
from torch import nn
from sampler import Sampler


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)
        self.sampler = Sampler()

    def forward(self, x, gen_image=False):
        if gen_image:
            return self.gen_image(x)
        return self.net(x).pow(2).mean()

    def gen_image(self, x):
        steps = torch.tensor([8]).cuda()
        return self.sampler.sample(self.net, x, int(steps.item()))
"""

SAMPLER = """\
import torch


class Sampler:
    def sample(self, net, x, steps):
        for _ in range(steps):
            x = net(x)
        return x.cpu().numpy()
"""

ENGINE = """\
def train_one_epoch(model, loader, optimizer):
    for x in loader:
        loss = model(x.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

MAIN = """\
import torch
from model import Generator
from engine import train_one_epoch


def main(loader):
    model = Generator().cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    for epoch in range(10):
        train_one_epoch(model, loader, optimizer)
"""


def _lint(tmp_path: Path, engine: str = ENGINE) -> list[str]:
    return lint_project(tmp_path, {"model.py": MODEL, "sampler.py": SAMPLER, "engine.py": engine, "main.py": MAIN}, "TL401")


def test_a_branch_no_step_call_sets_the_flag_of_runs_on_no_step(tmp_path: Path) -> None:
    assert _lint(tmp_path) == []


def test_a_step_call_setting_the_flag_runs_the_branch_and_what_it_calls(tmp_path: Path) -> None:
    found = _lint(tmp_path, ENGINE.replace("model(x.cuda())", "model(x.cuda(), gen_image=True)"))
    assert found == ["model.py:19:TL401", "sampler.py:8:TL401"]


def test_a_flag_passed_as_a_setting_may_be_set(tmp_path: Path) -> None:
    engine = ENGINE.replace("(model, loader, optimizer)", "(model, loader, optimizer, sample)").replace("model(x.cuda())", "model(x.cuda(), sample)")
    found = _lint(tmp_path, engine)
    assert found == ["model.py:19:TL401", "sampler.py:8:TL401"]
