"""TL201 clip-before-unscale."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from trainlint.diagnostics import Applicability, Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.torchnames import is_clip_name
from trainlint.model.precision import scaled_backward_scaler
from trainlint.rules.rule import Finding, NodeEdit, NodeFix, Rule


def is_clip(call: Call) -> bool:
    last = (call.qualname or call.method or call.name or "").rsplit(".", 1)[-1]
    return is_clip_name(last) and last != "clip_gradients" and call.receiver_text not in ("accelerator", "self.accelerator", "fabric")


def clip_facts(call: Call) -> dict[str, object]:
    """The clip threshold when it is a literal: `clip_grad_norm_(params, 0.5)` -> {"max_norm": 0.5}."""
    value = call.kwarg("max_norm") or call.kwarg("clip_value") or call.positional(1)
    if isinstance(value, (cst.Integer, cst.Float)):
        return {"max_norm": float(value.evaluated_value)}
    return {}


def _inner_clip(model: TrainingModel, call: Call) -> Call | None:
    """torch's clip in the helper of this module that `call` runs (`self._clip_gradients(max_norm)`,
    whose body calls `clip_grad_norm_`), or None."""
    callee = model.callee(call)
    return next((c for c in callee.calls if is_clip(c) and (c.qualname or "").startswith("torch.")), None) if callee is not None else None


def _later(model: TrainingModel, call: Call) -> Iterator[Call]:
    """The calls of the same function after `call`, in source order (read on only as far as asked)."""
    calls = model.calls
    for i in range(model.call_position(call) + 1, len(calls)):
        if calls[i].site.function is call.site.function:
            yield calls[i]


class ClipBeforeUnscale(Rule):
    code = "TL201"
    name = "clip-before-unscale"
    severity = Severity.ERROR
    summary = "Gradients clipped after `scaler.scale(loss).backward()` without `scaler.unscale_(optimizer)` first."
    hint = "Call `scaler.unscale_(optimizer)` after backward and before clipping, then `scaler.step(optimizer)`."
    requires = ("clip_grad",)
    why = (
        "After `scaler.scale(loss).backward()` every gradient is multiplied by the loss scale (65536 at "
        "first). Clipping them then compares the *scaled* norm with `max_norm`: the effective threshold is "
        "`max_norm x scale`, so either clipping never triggers or, when it does, it shrinks the real "
        "gradients by the scale factor (\"a very flat learning curve\"). The AMP docs: \"If you wish to modify "
        "or inspect the parameters' .grad attributes between backward() and scaler.step(optimizer), you "
        "should unscale them first.\""
    )
    story = "Lightning #9599 (a P0 bug: clip before unscale_, fixed in 1.4.9); pytorch/examples #1196 (minGPT-ddp clips scaled gradients); milesial/Pytorch-UNet #468."
    example = """\
import torch

scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""
    fixed_example = """\
import torch

scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""
    not_flagged = "Clipping after `scaler.unscale_(...)`, `accelerator.clip_grad_norm_` (accelerate unscales first), clipping without a scaled backward."
    verification = (
        "`trainlint verify` computes the effective clipping threshold (`max_norm x 65536`, with the code's "
        "max_norm) and shows what clipping scaled gradients leaves of the real gradient norm."
    )
    valid = (
        """
import torch
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
""",
        """
accelerator.backward(loss)
accelerator.clip_grad_norm_(model.parameters(), 1.0)
optimizer.step()
""",
    )
    invalid = (
        """
import torch
for x in loader:
    with torch.autocast("cuda"):
        loss = model(x)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(optimizer)
    scaler.update()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for backward in model.calls:
            scaler = scaled_backward_scaler(backward)
            if scaler is None:
                continue
            for call in _later(model, backward):
                if call.method == "unscale_" and call.receiver_text == scaler:
                    break
                if call.method == "step" and call.receiver_text == scaler:
                    break
                if is_clip(call):
                    message = f"gradients are clipped while still multiplied by the loss scale: call `{scaler}.unscale_(optimizer)` first (the threshold is effectively max_norm x 65536)"
                    fix = self._fix(model, call, scaler, list(_later(model, backward)))
                    clip = _inner_clip(model, call) or call  # (reported where it clips; the fix stays before the call)
                    yield Finding(clip.node, message, fix=fix, facts=clip_facts(clip))
                    break

    @staticmethod
    def _fix(model: TrainingModel, clip: Call, scaler: str, later: list[Call]) -> NodeFix | None:
        step = next((c for c in later if c.method == "step" and c.receiver_text == scaler and c.node.args), None)
        if step is None or clip.site.statement is None:
            return None
        optimizer = model.module.code_for_node(step.node.args[0].value)
        return NodeFix(
            f"insert `{scaler}.unscale_({optimizer})` before the clip",
            (NodeEdit(clip.site.statement, f"{scaler}.unscale_({optimizer})", "line_before"),),
            Applicability.UNSAFE,
        )
