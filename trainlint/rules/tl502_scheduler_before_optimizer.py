"""TL502 scheduler-before-optimizer."""

from __future__ import annotations

from typing import Callable, Iterator

from trainlint.diagnostics import Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.names import tokens
from trainlint.model.training import STEP_CALL_TEXT
from trainlint.rules.rule import Finding, Rule


def is_scheduler_step(call: Call) -> bool:
    return call.method == "step" and bool({"scheduler", "sched", "lr"} & set(tokens((call.receiver_text or "").split(".")[-1])))


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

for x in loader:
    scheduler.step()
    loss = model(x)
    loss.backward()
    optimizer.step()
"""
    fixed_example = """\
import torch

for x in loader:
    loss = model(x)
    loss.backward()
    optimizer.step()
    scheduler.step()
"""
    not_flagged = "Scheduler steps after an optimizer step in the same loop, per-epoch steps after the inner step loop, and scheduler steps with no optimizer step in the same function."
    verification = "`trainlint verify run` counts the scheduler steps the script takes before its first optimizer step."
    valid = (
        """
for epoch in range(10):
    for x in loader:
        model(x).backward()
        optimizer.step()
    scheduler.step()
""",
    )
    invalid = (
        """
for epoch in range(10):
    lr_scheduler.step()
    for x in loader:
        model(x).backward()
        optimizer.step()
""",
        """
def train_step(batch):
    self.scheduler.step()
    model(batch).backward()
    scaler.step(optimizer)
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        steps = [c for c in model.calls if model.is_optimizer_step(c)]
        for sched in model.calls:
            if not is_scheduler_step(sched):
                continue
            fn = sched.site.function
            scope = sched.site.innermost_loop
            related = [o for o in steps if o.site.function is fn and (scope is None or scope in o.site.loops)]
            if related and all(o.site.order > sched.site.order for o in related):
                yield Finding(sched.node, f"`{sched.receiver_text}.step()` runs before `{related[0].receiver_text}.step()`: the first learning-rate value of the schedule is skipped")
