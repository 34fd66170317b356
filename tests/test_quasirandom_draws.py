"""A quasi-random engine draws on the host whatever device the step uses (`torch.quasirandom.SobolEngine`,
Stable Audio Tools' timestep sampler): `self.rng.draw(n)[:, 0].to(self.device)` copies a host draw every
step (TL406). A draw moved once, before the loop, or used on the host, is no such copy."""

from __future__ import annotations

from tests.helpers import lines

STEP = """\
import torch

rng = torch.quasirandom.SobolEngine(1, scramble=True)
device = torch.device("cuda")
for x in loader:
    x = x.to(device)
    t = rng.draw(x.shape[0])[:, 0].to(device)
    loss = model(x, t).mean()
    loss.backward()
    optimizer.step()
"""

HELD = """\
import torch
from torch import nn


class Wrapper(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.rng = torch.quasirandom.SobolEngine(1, scramble=True)

    def training_step(self, x):
        t = self.rng.draw(x.shape[0])[:, 0].to(x.device)
        return self.model(x, t).mean()


wrapper = Wrapper(model).cuda()
for x in loader:
    loss = wrapper.training_step(x.cuda())
    loss.backward()
    optimizer.step()
"""


def test_a_sobol_draw_moved_every_step_is_reported() -> None:
    assert lines(STEP, "TL406") == [7]
    assert lines(HELD, "TL406") == [12]


def test_a_draw_moved_once_or_kept_on_the_host_is_not() -> None:
    once = STEP.replace("for x in loader:", "t = rng.draw(64)[:, 0].to(device)\nfor x in loader:").replace("    t = rng.draw(x.shape[0])[:, 0].to(device)\n", "")
    assert lines(once, "TL406") == []
    host = STEP.replace("t = rng.draw(x.shape[0])[:, 0].to(device)", "t = rng.draw(x.shape[0])[:, 0]")
    assert lines(host, "TL406") == []
