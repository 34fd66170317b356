"""TL203 scaler-step-without-update."""

from __future__ import annotations

from typing import Iterator

from trainlint.diagnostics import Severity
from trainlint.model import TrainingModel
from trainlint.rule import Finding, Rule
from trainlint.rules.tl201_clip_before_unscale import scaled_backward_scaler


class ScalerStepWithoutUpdate(Rule):
    code = "TL203"
    name = "scaler-step-without-update"
    severity = Severity.ERROR
    summary = "`scaler.step()` with no `scaler.update()`; or a scaled backward followed by a plain `optimizer.step()`."
    hint = "Per step: `scaler.scale(loss).backward()`, `scaler.step(optimizer)`, then `scaler.update()`."
    requires = (".scale(",)
    why = (
        "`scaler.update()` adjusts the loss scale and resets the per-step state; without it the next "
        "`scaler.step()` raises \"step() has already been called since the last update()\", and the scale "
        "never backs off after an overflow. Worse is the silent variant: `scaler.scale(loss).backward()` "
        "followed by a plain `optimizer.step()` applies gradients that are still multiplied by the scale "
        "(65536x), and inf/NaN steps are not skipped."
    )
    story = "Azure/MS-AMP #45 (\"add scaler.update() in MNIST examples\"); nerfstudio-project/nerfacc #307 (scaled gradients stepped by a plain optimizer: \"probably an abuse of grad_scaler\")."
    example = """\
import torch

scaler.scale(loss).backward()
optimizer.step()
"""
    fixed_example = """\
import torch

scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
"""
    not_flagged = "Modules that call `scaler.update()` anywhere (it may sit behind the accumulation boundary)."
    verification = "`trainlint verify run` counts `scaler.scale()` and `scaler.update()` calls: losses scaled by a scale that is never updated confirm it."
    valid = (
        """
for x in loader:
    scaler.scale(model(x)).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
""",
    )
    invalid = (
        """
for x in loader:
    scaler.scale(model(x)).backward()
    scaler.step(optimizer)
""",
        """
for x in loader:
    scaler.scale(model(x)).backward()
    optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        scalers = {s for c in model.calls if (s := scaled_backward_scaler(c))}
        for scaler in sorted(scalers):
            steps = [c for c in model.calls if c.method == "step" and c.receiver_text == scaler]
            updates = [c for c in model.calls if c.method == "update" and c.receiver_text == scaler]
            if steps and not updates:
                yield Finding(steps[0].node, f"`{scaler}.step()` without `{scaler}.update()`: the loss scale never adapts and the next step raises")
            if not steps:
                plain = next((c for c in model.calls if model.is_optimizer_step(c) and c.receiver_text != scaler), None)
                if plain is not None:
                    yield Finding(plain.node, f"gradients scaled by `{scaler}` are applied by a plain `{plain.receiver_text}.step()`: they are still multiplied by the loss scale; use `{scaler}.step({plain.receiver_text})` and `{scaler}.update()`")
