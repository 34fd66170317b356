"""Tests true on a loop's first rounds only gate what they hold: YOLO's `if ni < 3:` plot of the first
mosaics (`ni = i + nb * epoch` counts steps across epochs), `if global_step < 10:`, and NVAE's
`if i not in self.sr_u: self.sr_u[i] = ...cuda()` cache filled once per key. Near misses stay per
step: every step of the first epochs, the loop's bare index (an inner loop's index counts items), and a
filter on a set that the body does not fill."""

from __future__ import annotations

from tests.helpers import lines

LOOP = """\
import torch
model = torch.nn.Linear(4, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
nb = len(loader)
for epoch in range(10):
    for i, x in enumerate(loader):
        ni = i + nb * epoch
        loss = model(x.cuda()).sum()
        loss.backward()
        opt.step()
        if {test}:
            print(loss.item())
"""


def test_a_step_counter_across_epochs_below_a_number_gates() -> None:
    assert lines(LOOP.format(test="ni < 3"), "TL401") == []
    assert lines(LOOP.format(test="3 > ni"), "TL401") == []


def test_a_step_counter_by_its_name_below_a_number_gates() -> None:
    code = LOOP.replace("ni = i + nb * epoch", "global_step = i + nb * epoch").format(test="global_step <= 10")
    assert lines(code, "TL401") == []


def test_the_first_epochs_are_most_of_a_run() -> None:
    assert lines(LOOP.format(test="epoch < 3"), "TL401") == [12]


def test_a_counter_below_a_setting_is_no_gate() -> None:
    # (a warm-up bound a configuration sets may cover most of the run)
    assert lines(LOOP.format(test="ni < warmup_iters"), "TL401") == [12]


def test_a_name_not_counted_across_epochs_is_no_gate() -> None:
    code = LOOP.replace("ni = i + nb * epoch", "ni = x.shape[0] + 1").format(test="ni < 3")
    assert lines(code, "TL401") == [12]


CACHE = """\
import torch
from torch import nn


class SpectralReg(nn.Module):
    def __init__(self):
        super().__init__()
        self.sr_u = {}
        self.skip = set()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        i = x.shape[0]
        if i not in self.sr_u:
            self.sr_u[i] = torch.ones(i, 4).normal_(0, 1).cuda()
        if i not in self.skip:
            x = x + torch.ones(i, 4).cuda()
        return self.lin(x) + self.sr_u[i]


model = SpectralReg().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in loader:
    loss = model(x.cuda()).sum()
    loss.backward()
    opt.step()
"""


def test_a_cache_filled_once_per_key_gates_and_a_filter_does_not() -> None:
    assert lines(CACHE, "TL406") == [17]


def test_the_last_round_of_an_epoch_gates() -> None:
    # (YOLO's classifier validates `if i == len(pbar) - 1:`, once an epoch)
    assert lines(LOOP.format(test="i == len(loader) - 1"), "TL401") == []
    assert lines(LOOP.format(test="i == accum_steps - 1"), "TL401") == [12]
