"""TL203 scaler-step-without-update."""

from __future__ import annotations

from typing import Iterator

from trainlint.diagnostics import Severity
import libcst as cst

from trainlint.model import Call, TrainingModel
from trainlint.model.torchnames import GRAD_SCALER
from trainlint.model.lattice import Kind
from trainlint.model.precision import scaled_backward_scaler
from trainlint.rules.rule import Finding, Rule


def _is_torch_scaler(model: TrainingModel, backward: Call) -> bool:
    """The scaler of `scaler.scale(loss).backward()` is known to be torch's enabled GradScaler: a custom
    loss scaler (fairseq's, apex's) steps and updates through its own optimizer wrapper."""
    scale = backward.receiver
    if not isinstance(scale, cst.Call) or not isinstance(scale.func, cst.Attribute):
        return False
    value = model.value(scale.func.value, backward.site)
    return value.kind is Kind.SCALER and (value.origin or "") in GRAD_SCALER and value.enabled is not False


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

scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
optimizer.step()
"""
    fixed_example = """\
import torch

scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
"""
    not_flagged = (
        "Modules that call `scaler.update()` anywhere (it may sit behind the accumulation boundary); "
        "scalers the analysis does not know to be torch's enabled `GradScaler` (a custom or a framework's "
        "loss scaler steps and updates through its own optimizer wrapper; `GradScaler(enabled=False)` is "
        "the identity); a plain `optimizer.step()` in another function than the scaled backward; test code."
    )
    verification = "`trainlint verify run` counts `scaler.scale()` and `scaler.update()` calls: losses scaled by a scale that is never updated confirm it."
    valid = (
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for x in loader:
    scaler.scale(model(x)).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
""",
        # a custom loss scaler (fairseq/apex style) applied by its own optimizer wrapper
        """
class DynamicLossScaler:
    def scale(self, loss):
        return loss * self.loss_scale
scaler = DynamicLossScaler()
for x in loader:
    scaler.scale(model(x)).backward()
    optimizer.step()
""",
    )
    invalid = (
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for x in loader:
    scaler.scale(model(x)).backward()
    scaler.step(optimizer)
""",
        """
from torch.amp import GradScaler
scaler = GradScaler("cuda")
for x in loader:
    scaler.scale(model(x)).backward()
    optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        scalers: dict[str, Call] = {}
        for c in model.calls:
            name = scaled_backward_scaler(c)
            if name and name not in scalers and _is_torch_scaler(model, c) and not model.is_test_code:
                scalers[name] = c
        for scaler in sorted(scalers):
            steps = [c for c in model.calls if c.method == "step" and c.receiver_text == scaler]
            updates = [c for c in model.calls if c.method == "update" and c.receiver_text == scaler]
            if steps and not updates:
                yield Finding(steps[0].node, f"`{scaler}.step()` without `{scaler}.update()`: the loss scale never adapts and the next step raises")
            if not steps:
                backward = scalers[scaler]
                plain = next(
                    (
                        c for c in model.calls
                        if model.is_optimizer_step(c) and c.receiver_text != scaler
                        and c.site.function is backward.site.function and c.site.order > backward.site.order
                    ),
                    None,
                )
                if plain is not None:
                    yield Finding(plain.node, f"gradients scaled by `{scaler}` are applied by a plain `{plain.receiver_text}.step()`: they are still multiplied by the loss scale; use `{scaler}.step({plain.receiver_text})` and `{scaler}.update()`")
