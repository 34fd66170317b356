"""TL105 backward-under-autocast."""

from __future__ import annotations

from typing import Iterator

from trainlint.diagnostics import Severity
from trainlint.model import TrainingModel
from trainlint.rules.rule import Finding, Rule


class BackwardUnderAutocast(Rule):
    code = "TL105"
    name = "backward-under-autocast"
    severity = Severity.WARNING
    summary = "`.backward()` called inside an autocast block."
    hint = "Dedent the backward call (and the optimizer step) out of the `with autocast(...)` block; wrap only the forward pass and the loss."
    requires = ("autocast",)
    why = (
        "The autocast docs: \"autocast should wrap only the forward pass(es) of your network, including the "
        "loss computation(s). Backward passes under autocast are not recommended.\" Backward ops already run "
        "in the dtype autocast chose for their forward ops; running backward inside the region can recast "
        "and, with torch.compile, bakes a wrong assumption into the compiled backward (\"silent incorrectness\")."
    )
    story = "pytorch/pytorch #120376: \"the bad autocast loss is caused by running the whole training loop inside the autocast context\"; moving autocast to the forward pass fixed it."
    example = """\
import torch

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
"""
    fixed_example = """\
import torch

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""
    not_flagged = "Backward after the `with` block; autocast regions with `enabled=False`; regions that are not autocast."
    verification = "`trainlint verify run` records each backward that runs while autocast is enabled, with its line."
    valid = (
        """
import torch
with torch.autocast("cuda"):
    loss = model(x)
loss.backward()
""",
        """
import torch
with torch.autocast("cuda"):
    loss = model(x)
    with torch.autocast("cuda", enabled=False):
        pass
loss.backward()
""",
    )
    invalid = (
        """
import torch
for x in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x)
        scaler.scale(loss).backward()
""",
        """
import torch
ctx = torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16)
for x in loader:
    with ctx:
        loss = model(x)
        accelerator.backward(loss)
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for call in model.calls:
            if model.is_backward(call) and model.under(call.site, "autocast"):
                innermost = [w for w in call.site.withs if w.kind == "autocast"][-1]
                if innermost.disabled:
                    continue
                yield Finding(call.node, "backward runs inside an autocast region; autocast should wrap only the forward pass and the loss")
