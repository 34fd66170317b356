"""TL102 fp16-autocast-without-scaler."""

from __future__ import annotations

from typing import Iterator

from trainlint.diagnostics import Severity
from trainlint.model import TrainingModel
from trainlint.model.torchnames import AUTOCAST, GRAD_SCALER, autocast_dtype
from trainlint.model.precision import on_training_path
from trainlint.rules.rule import Finding, Rule


class Fp16AutocastWithoutScaler(Rule):
    code = "TL102"
    name = "fp16-autocast-without-scaler"
    severity = Severity.ERROR
    summary = "fp16 autocast around a loss that is backpropagated, with no GradScaler."
    hint = "Scale the loss: `scaler = torch.amp.GradScaler(\"cuda\")`, `scaler.scale(loss).backward()`, `scaler.step(opt)`, `scaler.update()` - or use bfloat16."
    requires = ("autocast",)
    why = (
        "fp16's smallest subnormal is 2^-24 (about 6e-8) and its smallest normal 6.1e-5. Gradients of "
        "activations computed in fp16 are often smaller: they flush to zero, and the layers they feed stop "
        "learning (\"the loss curve just flattens\"). The GradScaler multiplies the loss (by 65536 at first) "
        "so gradients stay representable, unscales them before the step, and skips steps that overflow. "
        "`torch.autocast(\"cuda\")` and `torch.cuda.amp.autocast()` compute in fp16 when no dtype is given."
    )
    story = (
        "nanoGPT #167: `dtype='float16'` without loss scaling gave NaN losses after ~6000 iterations; "
        "PR #87 added a GradScaler for float16. pytorch/pytorch #115785: small gradients underflow in fp16, "
        "\"this is what our GradScaler exists to handle\"."
    )
    example = """\
import torch

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""
    fixed_example = """\
import torch

scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
    not_flagged = (
        "bf16 autocast (`dtype=torch.bfloat16`, or `torch.autocast(\"cpu\")`, whose default is bf16), "
        "autocast with an unknown dtype (a config variable), modules that build a GradScaler or use "
        "accelerate/Lightning (which scale for you), and inference-only autocast (no backward in the module)."
    )
    verification = (
        "`trainlint verify` measures the fraction of gradient elements that underflow to 0 in fp16 without "
        "loss scaling, against a 65536 scale. `trainlint verify run` reports non-finite losses, gradient norms "
        "and parameters."
    )
    valid = (
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for x in loader:
    with torch.cuda.amp.autocast():
        loss = model(x)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        """
import torch
for x in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
    loss.backward()
    optimizer.step()
""",
        """
import torch
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    preds = model(x)
""",
    )
    invalid = (
        """
import torch
for x in loader:
    with torch.cuda.amp.autocast():
        loss = model(x)
    loss.backward()
    optimizer.step()
""",
        """
from torch import autocast, float16
def train_step(batch):
    with autocast(device_type="cuda", dtype=float16):
        loss = model(batch)
    loss.backward()
    optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        if model.is_test_code or not any(model.is_backward(c) or model.project_backprops(c) for c in model.calls):
            return
        for call in model.calls:
            qual = call.qualname or ""
            if qual in GRAD_SCALER or qual.endswith(("ShardedGradScaler", "accelerate.Accelerator")) or call.method == "scale":
                return
            summary = model.call_summary(call)
            if summary is not None and summary.scales:
                return  # a loss-scaler helper of the project (`loss_scaler(loss, optimizer)`)
        for call in model.calls:
            if model.framework_internal(call.site) or not on_training_path(model, call):
                continue
            if call.qualname in AUTOCAST and autocast_dtype(call.node, call.qualname, model.imports) == "float16":
                yield Finding(
                    call.node,
                    "fp16 autocast with no GradScaler: gradients below fp16's smallest subnormal (~6e-8) flush to zero and their layers stop learning",
                )
                return
