"""TL202 fp16-without-clipping."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.torchnames import (
    GRAD_SCALER,
    LIGHTNING_TRAINERS,
    autocast_dtype,
    is_clip_name,
    AUTOCAST,
    is_false,
    literal_string,
)
from trainlint.rule import Finding, Rule

FP16_PRECISIONS = frozenset({"16", "16-mixed", "16-true", "fp16"})


def is_zero(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, (cst.Integer, cst.Float)) and float(expr.value) == 0.0


def fp16_enabling(model: TrainingModel, call: Call) -> str | None:
    """What about this call turns on fp16 mixed precision, or None."""
    qual = call.qualname or ""
    if qual in GRAD_SCALER or qual.endswith("ShardedGradScaler"):
        if is_false(call.arg(4 if qual.startswith("torch.cuda") else 5, "enabled")):
            return None
        return "a GradScaler (fp16 loss scaling)"
    if qual in AUTOCAST and autocast_dtype(call.node, qual, model.imports) == "float16":
        return "fp16 autocast"
    if qual.endswith("accelerate.Accelerator") and literal_string(call.kwarg("mixed_precision")) == "fp16":
        return '`Accelerator(mixed_precision="fp16")`'
    return None


def clips_gradients(model: TrainingModel) -> bool:
    """Whether the module clips gradients anywhere (manually, or through a framework setting)."""
    for call in model.calls:
        last = (call.qualname or call.method or call.name or "").rsplit(".", 1)[-1]
        if is_clip_name(last):
            return True
        clip = call.kwarg("gradient_clip_val")
        if clip is not None and not is_zero(clip) and not (isinstance(clip, cst.Name) and clip.value == "None"):
            return True
    return False


def superseded_before_backward(model: TrainingModel, call: Call) -> bool:
    """Whether `acc = Accelerator(...)` is replaced before any `acc.backward` in its function uses it.

    Test scripts build an fp16 Accelerator only to check wrapping, then train with another one.
    """
    assign = next((a for a in model.assigns if a.value is call.node and len(a.targets) == 1), None)
    if assign is None:
        return False
    name = assign.targets[0]
    uses = [
        c for c in model.calls
        if c.method == "backward" and c.receiver_text == name and c.site.function is call.site.function
    ]
    return bool(uses) and not any(assign in model.reaching(call.site.function, name, c.site) for c in uses)


class Fp16WithoutClipping(Rule):
    code = "TL202"
    name = "fp16-without-clipping"
    severity = Severity.WARNING
    summary = "fp16 mixed-precision training with no gradient clipping."
    hint = "After `scaler.unscale_(optimizer)`, clip: `torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)`."
    requires = ("GradScaler", "autocast", "mixed_precision", "precision")
    why = (
        "fp16's largest finite value is 65504. A gradient norm of a few hundred squares past it in Adam's "
        "second moment, and an exploding step turns weights into inf/NaN. The GradScaler skips steps whose "
        "gradients overflow, but it cannot stop finite, huge updates; clipping the (unscaled) gradient norm "
        "bounds every update. Without it, fp16 runs diverge where fp32 runs merely wobble."
    )
    story = (
        "Field report 003: a CIFAR-10 CNN trained with DeepSpeed fp16 and no `gradient_clipping`: average "
        "gradient norm inf, loss 17-20, accuracy 10% (random). Field report 004: NaN gradients in a GRU "
        "under AMP with no clipping before `scaler.scale(loss).backward()`; the fix added clipping at 0.1."
    )
    example = """\
import torch

scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
    fixed_example = """\
import torch

scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(optimizer)
    scaler.update()
"""
    not_flagged = (
        "bf16 autocast (no loss scaling, fp32-like range), modules that clip anywhere "
        "(`clip_grad_norm_`, `clip_grad_value_`, `accelerator.clip_grad_norm_`, Lightning's "
        "`gradient_clip_val`), GradScalers built with `enabled=False`, and modules that never backpropagate "
        "(a scaler handed to a trainer elsewhere)."
    )
    verification = (
        "`trainlint verify` sends two finite fp16 gradient spikes through SGD with momentum: without clipping "
        "the fp16 weights turn non-finite, clipped at 1.0 they stay finite. `trainlint verify run` reports "
        "non-finite losses, gradient norms and parameters, and how often the GradScaler lowered its scale."
    )
    valid = (
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        """
import torch
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
    )
    invalid = (
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
for batch in loader:
    loss = model(**batch).loss
    accelerator.backward(loss)
    optimizer.step()
""",
        """
import lightning as L
trainer = L.Trainer(precision="16-mixed", max_epochs=10)
trainer.fit(model, loader)
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        if clips_gradients(model):
            return
        for call in model.calls:
            if (call.qualname or "") in LIGHTNING_TRAINERS:
                precision = call.kwarg("precision")
                text = literal_string(precision) or (precision.value if isinstance(precision, cst.Integer) else None)
                if text in FP16_PRECISIONS:
                    yield Finding(call.node, f"Lightning trains in fp16 (`precision={text!r}`) with no gradient clipping: one exploding step makes the weights inf/NaN")
                    return
        if not any(model.is_backward(c) for c in model.calls):
            return
        for call in model.calls:
            what = fp16_enabling(model, call)
            if what and not superseded_before_backward(model, call):
                yield Finding(call.node, f"{what} enables fp16 training, but gradients are never clipped: fp16 overflows at 65504 and one exploding step makes the weights inf/NaN")
                return
