"""Which `if`s of a step loop hold the training step (their bodies run every step) and which gate:
a periodic validation block under `torch.no_grad()` that calls a helper object of another module able
to update weights (a nowcasting model's `ProbToPixel`, whose optional branch backpropagates) holds no
step, since nothing backpropagates under no_grad; the same helper called in the step's own branch
still makes that branch hold the step."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


HELPER = """
import numpy as np
import torch


class ProbToPixel:
    def __init__(self, middle, requires_grad=False):
        self.middle = torch.from_numpy(middle)
        self.requires_grad = requires_grad

    def __call__(self, prediction, truth, lr):
        result = np.argmax(prediction, axis=2)
        if self.requires_grad:
            loss = ((truth - self.middle) ** 2).mean()
            loss.backward()
            self.middle -= lr * self.middle.grad
        return result
"""

TRAIN = """
import torch
from helper import ProbToPixel

to_pixel = ProbToPixel(middle)
model = torch.nn.Linear(4, 4).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1000):
    x = batch().cuda()
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 100 == 0:
        {guard}
            for xv in valid():
                out = model(xv.cuda())
                pixels = to_pixel(out.cpu().numpy(), xv, 0.1)
                print(out.mean().item())
"""


def test_a_validation_block_under_no_grad_calling_an_updating_helper_is_gated(tmp_path: Path) -> None:
    files = {"helper.py": HELPER, "train.py": TRAIN.format(guard="with torch.no_grad():")}
    assert lint_project(tmp_path, files, "TL401") == []


def test_the_same_block_with_gradients_on_holds_an_update_and_runs_every_step(tmp_path: Path) -> None:
    # the helper may backpropagate and update there: the branch holds a training step (the page's law)
    files = {"helper.py": HELPER, "train.py": TRAIN.format(guard="with torch.enable_grad():")}
    assert lint_project(tmp_path, files, "TL401") == ["train.py:18:TL401", "train.py:19:TL401"]
