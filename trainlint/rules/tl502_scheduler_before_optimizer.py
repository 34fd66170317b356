"""TL502 scheduler-before-optimizer."""

from __future__ import annotations

from typing import Callable, Iterator

from trainlint.diagnostics import Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.lattice import Kind
from trainlint.model.training import STEP_CALL_TEXT
from trainlint.rules.rule import Finding, Rule


def is_scheduler_step(model: TrainingModel, call: Call) -> bool:
    """`scheduler.step()` on a learning-rate scheduler known by its value (built by `torch.optim.
    lr_scheduler` or a library's schedule builder), whatever it is called."""
    return call.method == "step" and call.receiver is not None and model.value(call.receiver, call.site).kind is Kind.SCHEDULER


class SchedulerBeforeOptimizer(Rule):
    code = "TL502"
    name = "scheduler-before-optimizer"
    severity = Severity.ERROR
    summary = "`lr_scheduler.step()` before `optimizer.step()` in the same step."
    hint = "Call `scheduler.step()` after `optimizer.step()` (per-epoch schedulers: after the epoch's steps)."
    requires = ("step(",)

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        # two `.step` calls: the scheduler's and the optimizer's
        found = STEP_CALL_TEXT.finditer(source)
        return next(found, None) is not None and next(found, None) is not None
    why = (
        "Since PyTorch 1.1 the scheduler must step after the optimizer. Stepping it first advances the "
        "schedule before any update: \"PyTorch [will skip] the first value of the learning rate schedule\", "
        "so warm-up starts one step late and every later value is shifted. PyTorch warns only on the very "
        "first call, and wrongly when a GradScaler skipped the first step."
    )
    story = "fast-reid #501, Deformable-ProtoPNet #6, pytorch-transformers-classification #21 (all fixed by reordering); RAFT #104 shows the runtime warning's false positives."
    example = """\
import torch

scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=len(loader))
for x in loader:
    scheduler.step()
    loss = model(x)
    loss.backward()
    optimizer.step()
"""
    fixed_example = """\
import torch

scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=len(loader))
for x in loader:
    loss = model(x)
    loss.backward()
    optimizer.step()
    scheduler.step()
"""
    not_flagged = (
        "Scheduler steps after an optimizer step in the same loop, per-epoch steps after the inner step loop, "
        "and scheduler steps with no optimizer step in the same function. A scheduler is known by its value "
        "(built by `torch.optim.lr_scheduler`, by a transformers or diffusers schedule builder such as "
        "`get_linear_schedule_with_warmup`, or from a library class named as torch names its schedulers, "
        "`*LR`/`*LRScheduler`, or as an instance of a class of the project deriving from one of torch's, "
        "`class WarmupCosineSchedule(LambdaLR)`, or built by a dict whose classes are all schedulers, "
        "`key2scheduler[cfg.name](optimizer)`), never by the name of the variable holding it: a `.step()` on "
        "an object whose kind is not known, or of a class of the project deriving from no scheduler, is not reported."
    )
    verification = "`trainlint verify run` counts the scheduler steps the script takes before its first optimizer step."
    valid = (
        """
import torch
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30)
for epoch in range(10):
    for x in loader:
        model(x).backward()
        optimizer.step()
    scheduler.step()
""",
        # a class of the project with a `step` method of its own, deriving from no scheduler
        """
import torch

class WarmupSchedule:
    def __init__(self, optimizer, warmup):
        self.optimizer, self.warmup, self.count = optimizer, warmup, 0

    def step(self):
        self.count += 1

schedule = WarmupSchedule(optimizer, 100)
for x in loader:
    schedule.step()
    model(x).backward()
    optimizer.step()
""",
        # a dict of classes of which one is no scheduler: what the subscript builds is not known
        """
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR

class Warmup:
    def __init__(self, optimizer):
        self.optimizer, self.count = optimizer, 0

    def step(self):
        self.count += 1

SCHEDULES = {"warmup": Warmup, "cosine": CosineAnnealingLR}
schedule = SCHEDULES[cfg.schedule](optimizer)
for x in loader:
    schedule.step()
    model(x).backward()
    optimizer.step()
""",
    )
    invalid = (
        # a class of the project deriving from torch's LambdaLR
        """
import math
import torch
from torch.optim.lr_scheduler import LambdaLR

class WarmupCosineSchedule(LambdaLR):
    def __init__(self, optimizer, warmup_steps, t_total):
        super().__init__(optimizer, lambda step: min(1.0, step / warmup_steps) * 0.5 * (1 + math.cos(math.pi * step / t_total)))

scheduler = WarmupCosineSchedule(optimizer, warmup_steps=500, t_total=10000)
for x in loader:
    model(x).backward()
    scheduler.step()
    optimizer.step()
    optimizer.zero_grad()
""",
        # a dict of scheduler classes subscripted by a setting (pytorch-semseg's `key2scheduler`)
        """
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, MultiStepLR

key2scheduler = {"multi_step": MultiStepLR, "cosine_annealing": CosineAnnealingLR}

def get_scheduler(optimizer, name, **settings):
    return key2scheduler[name](optimizer, **settings)

scheduler = get_scheduler(optimizer, cfg.schedule, **cfg.schedule_args)
for x in loader:
    scheduler.step()
    model(x).backward()
    optimizer.step()
""",
        """
import torch
lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30)
for epoch in range(10):
    lr_scheduler.step()
    for x in loader:
        model(x).backward()
        optimizer.step()
""",
        """
import torch
from transformers import get_linear_schedule_with_warmup

class Trainer:
    def __init__(self, model, optimizer, scaler):
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        self.scheduler = get_linear_schedule_with_warmup(optimizer, 100, 1000)

    def train_step(self, batch):
        self.scheduler.step()
        self.model(batch).backward()
        self.scaler.step(self.optimizer)
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        steps = [c for c in model.calls if model.is_optimizer_step(c)]
        for sched in model.calls:
            if not is_scheduler_step(model, sched):
                continue
            fn = sched.site.function
            scope = sched.site.innermost_loop
            related = [o for o in steps if o.site.function is fn and (scope is None or scope in o.site.loops)]
            if related and all(o.site.order > sched.site.order for o in related):
                yield Finding(sched.node, f"`{sched.receiver_text}.step()` runs before `{related[0].receiver_text}.step()`: the first learning-rate value of the schedule is skipped")
