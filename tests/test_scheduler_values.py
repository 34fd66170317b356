"""Learning-rate schedulers known by their value across modules: a warm-up scheduler of the project
built in `main.py` and handed to the training loop of another module, and one built by a helper of
another module from a dict of scheduler classes. Each with a near miss that stays silent: a class of
the project with a `step` of its own that derives from no scheduler."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project


UTILS = """
from torch.optim.lr_scheduler import _LRScheduler


class WarmUpLR(_LRScheduler):
    def __init__(self, optimizer, total_iters, last_epoch=-1):
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * self.last_epoch / (self.total_iters + 1e-8) for base in self.base_lrs]


class StepCounter:
    def __init__(self, optimizer, total_iters):
        self.count = 0

    def step(self):
        self.count += 1
"""

TRAIN = """
def train(model, optimizer, loader, warmup_scheduler, epoch):
    for x, y in loader:
        if epoch <= 0:
            warmup_scheduler.step()
        loss = model(x.cuda()).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

MAIN = """
import torch
import utils
from train import train

model = torch.nn.Linear(4, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
warmup = utils.{cls}(optimizer, 100)
for epoch in range(10):
    train(model, optimizer, loader, warmup, epoch)
"""


def test_a_warm_up_scheduler_of_the_project_handed_to_another_modules_loop(tmp_path: Path) -> None:
    # Teacher-free KD: `utils.WarmUpLR(...)` built in main.py, stepped first in train.py's loop
    files = {"utils.py": UTILS, "train.py": TRAIN, "main.py": MAIN.format(cls="WarmUpLR")}
    assert lint_project(tmp_path, files, "TL502") == ["train.py:5:TL502"]


def test_a_class_with_a_step_of_its_own_handed_in_is_no_scheduler(tmp_path: Path) -> None:
    files = {"utils.py": UTILS, "train.py": TRAIN, "main.py": MAIN.format(cls="StepCounter")}
    assert lint_project(tmp_path, files, "TL502") == []


SCHEDULERS = """
from torch.optim.lr_scheduler import CosineAnnealingLR, MultiStepLR
from utils import StepCounter, WarmUpLR

key2scheduler = {{"multi_step": MultiStepLR, "cosine": CosineAnnealingLR, "warmup": {third}}}


def get_scheduler(optimizer, settings):
    if settings is None:
        return WarmUpLR(optimizer, 100)
    name = settings.pop("name")
    return key2scheduler[name](optimizer, **settings)
"""

SEMSEG = """
import torch
from schedulers import get_scheduler

model = torch.nn.Linear(4, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = get_scheduler(optimizer, cfg["lr_schedule"])
for x, y in loader:
    scheduler.step()
    loss = model(x.cuda()).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_scheduler_built_from_a_dict_of_scheduler_classes_by_a_helper(tmp_path: Path) -> None:
    # pytorch-semseg: `key2scheduler[s_type](optimizer, **scheduler_dict)` in another module
    files = {"utils.py": UTILS, "schedulers.py": SCHEDULERS.format(third="WarmUpLR"), "train.py": SEMSEG}
    assert lint_project(tmp_path, files, "TL502") == ["train.py:9:TL502"]


def test_a_dict_holding_a_class_that_is_no_scheduler_builds_nothing_known(tmp_path: Path) -> None:
    files = {"utils.py": UTILS, "schedulers.py": SCHEDULERS.format(third="StepCounter"), "train.py": SEMSEG}
    assert lint_project(tmp_path, files, "TL502") == []
