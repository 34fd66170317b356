"""TL501 zero-grad-missing."""

from __future__ import annotations

from typing import Iterator

from trainlint.diagnostics import Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.extract import is_early_exit
from trainlint.model.names import tokens
from trainlint.rules.rule import Finding, Rule

ENGINE_WORDS = frozenset({"engine", "deepspeed", "ds", "accelerator", "fabric"})


def _clears_through(model: TrainingModel, call: Call) -> bool:
    """A call of a helper (this module's or the project's) that clears gradients."""
    summary = model.call_summary(call)
    return summary is not None and summary.clears_grads


class ZeroGradMissing(Rule):
    code = "TL501"
    name = "zero-grad-missing"
    severity = Severity.ERROR
    summary = "A training loop that never clears gradients, or `zero_grad()` between `backward()` and `step()`."
    hint = "Call `optimizer.zero_grad(set_to_none=True)` at the start of each step (or right after `optimizer.step()`)."
    requires = ("backward",)
    per_step = True
    why = (
        "`.backward()` adds into `.grad`. Without clearing, each step applies the sum of all gradients so "
        "far: the effective learning rate grows without bound and the model diverges or stalls. Clearing "
        "between `backward()` and `step()` throws the gradients away, so `step()` applies zeros (or only "
        "weight decay) and nothing learns."
    )
    story = "pytorch/pytorch #47175 asked PyTorch to warn when `zero_grad` is never called; it does not. wekws #72 (\"It's a bug\"), torchforge #71, cloneofsimo/lora #263 (`zero_grad()` after `loss.backward()`)."
    example = """\
import torch

for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""
    fixed_example = """\
import torch

for x, y in loader:
    optimizer.zero_grad(set_to_none=True)
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""
    not_flagged = (
        "Modules that clear or overwrite gradients anywhere (`zero_grad`, `p.grad = None`, `grad.zero_()`, "
        "`grad.fill_()`, `grad.copy_()`), DeepSpeed/"
        "accelerate/Fabric engines whose `step()` clears them, gradient accumulation with `zero_grad` under "
        "the accumulation boundary (also when a last partial window is flushed after the loop, `if step % n != 0: "
        "optimizer.step()`: a step of the same optimizer between the backward and the `zero_grad` consumed the "
        "gradients), and a `zero_grad` followed by another backward before the step (GANs)."
    )
    verification = (
        "`trainlint verify run` counts `zero_grad()` calls and checks whether the `.grad` tensors are replaced "
        "between steps; with neither, gradients accumulate, and the gradient norm's growth shows it."
    )
    valid = (
        # a batch whose loss is not finite is skipped: its gradients are cleared and that path never steps
        """
import torch
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    if not torch.isfinite(loss):
        optimizer.zero_grad()
        continue
    optimizer.step()
    optimizer.zero_grad()
""",
        """
for i, x in enumerate(loader):
    model(x).backward()
    if (i + 1) % 4 == 0:
        optimizer.step()
        optimizer.zero_grad()
""",
        # gradient accumulation that flushes the last partial window after the epoch's loop
        """
def train_epoch(loader, model, optimizer):
    for i, x in enumerate(loader, start=1):
        model(x).backward()
        if i % 4 == 0:
            optimizer.step()
            optimizer.zero_grad()
    if i % 4 != 0:
        optimizer.step()
        optimizer.zero_grad()

for epoch in range(3):
    train_epoch(loader, model, optimizer)
""",
        """
for real in loader:
    d_opt.zero_grad()
    d_loss(real).backward()
    d_opt.step()
    g_opt.zero_grad()
    g_loss().backward()
    g_opt.step()
""",
        """
import torch.distributed.autograd as dist_autograd
for x in loader:
    with dist_autograd.context() as context_id:
        dist_autograd.backward(context_id, [model(x)])
        opt.step(context_id)
""",
        """
for batch in loader:
    loss = model_engine(batch)
    model_engine.backward(loss)
    model_engine.step()
""",
    )
    invalid = (
        """
for x in loader:
    model(x).backward()
    optimizer.step()
""",
        """
for x in loader:
    loss = model(x)
    loss.backward()
    optimizer.zero_grad()
    optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        steps = [
            c for c in model.calls
            if model.is_optimizer_step(c) and model.in_step(c.site) and not model.framework_internal(c.site)
        ]
        # distributed autograd accumulates into a fresh context per iteration, not into `.grad`
        if not steps or model.imports.imports_module("torch.distributed.autograd") or not any(model.is_backward(c) for c in model.calls):
            return
        # `p.grad.fill_(v)` / `p.grad.copy_(g)` overwrite the gradient as surely as clearing it
        clears = [
            c for c in model.calls
            if c.method in ("zero_grad", "zero_")
            or c.name == "zero_grad"
            or (c.method in ("fill_", "copy_") and (c.receiver_text or "").endswith(".grad"))
            or _clears_through(model, c)
        ]
        clears_by_assign = any(t.endswith(".grad") for a in model.assigns for t in a.targets)
        if not clears and not clears_by_assign:
            for step in steps:
                receiver = step.receiver_text or ""
                if receiver in model.engine_names or ENGINE_WORDS & set(tokens(receiver)) or "scaler" in receiver:
                    continue
                yield Finding(step.node, "gradients are never cleared: every `backward()` adds into `.grad`, so each step applies the sum of all past gradients")
                return
            return
        yield from self._cleared_before_step(model, steps, clears)

    @staticmethod
    def _cleared_before_step(model: TrainingModel, steps: list[Call], clears: list[Call]) -> Iterator[Finding]:
        backwards = [c for c in model.calls if model.is_backward(c)]
        for step in steps:
            fn = step.site.function
            optimizer = step.receiver_text
            for clear in clears:
                if clear.method != "zero_grad" or clear.site.function is not fn or clear.receiver_text != optimizer:
                    continue
                if clear.site.order > step.site.order:
                    continue
                if any(n is not None and is_early_exit(n) and n not in step.site.gate_nodes for n in clear.site.gate_nodes):
                    continue  # `if not torch.isfinite(loss): optimizer.zero_grad(); continue`: that path never steps
                between = [b for b in backwards if b.site.function is fn and clear.site.order < b.site.order < step.site.order]
                before = [b for b in backwards if b.site.function is fn and b.site.order < clear.site.order and set(b.site.loops) >= set(step.site.loops)]
                last = max((b.site.order for b in before), default=None)
                if last is not None and any(s.receiver_text == optimizer and s.site.function is fn and last < s.site.order < clear.site.order for s in steps):
                    continue  # (`step(); zero_grad()` in the loop, then a flush `step()` after it: nothing was discarded)
                if before and not between:
                    yield Finding(clear.node, f"`{optimizer}.zero_grad()` between `backward()` and `{optimizer}.step()` discards the gradients: the step applies zeros")
