"""TL205 clip-after-step."""

from __future__ import annotations

from typing import Callable, Iterator

from trainlint.diagnostics import Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.torchnames import is_clip_name
from trainlint.rules.rule import Finding, Rule


def _is_clip(call: Call) -> bool:
    last = (call.qualname or call.method or call.name or "").rsplit(".", 1)[-1]
    return is_clip_name(last)


def _event(model: TrainingModel, call: Call) -> str | None:
    """What a call does to the gradients: "backward" (makes them), "step" (uses them), "zero" (clears
    them), directly or through a function whose summary says so; None for anything else."""
    if model.is_backward(call):
        return "backward"
    if model.is_optimizer_step(call):
        return "step"
    if call.method == "zero_grad" or call.name == "zero_grad":
        return "zero"
    if _is_clip(call):
        return None
    summary = model.call_summary(call)
    if summary is None:
        return None
    if summary.steps:
        return "step"  # a step helper: its last act uses the gradients
    if summary.backprops:
        return "backward"
    if summary.clears_grads:
        return "zero"
    return None


def _always_with(event: Call, clip: Call) -> bool:
    """The event runs whenever the clip does: it sits under no `if` (or `else`) the clip is not under."""
    outer, inner = event.site.gate_nodes, clip.site.gate_nodes
    return len(outer) <= len(inner) and all(a is b for a, b in zip(outer, inner)) and not event.site.in_except


class ClipAfterStep(Rule):
    code = "TL205"
    name = "clip-after-step"
    severity = Severity.ERROR
    preview = True
    summary = "Gradients clipped after `optimizer.step()` (or right after `zero_grad()`): the step already used the unclipped gradients."
    hint = "Clip between `loss.backward()` (after `scaler.unscale_(optimizer)` with AMP) and `optimizer.step()`."
    requires = ("clip_grad",)

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        return "step" in source or "zero_grad" in source

    why = (
        "`clip_grad_norm_` rescales the `.grad` tensors in place; only a later `optimizer.step()` reads them. "
        "Called after the step, it changes gradients that the next `zero_grad()` throws away, so the update "
        "used the unclipped gradients and the clipping threshold never limits anything; called right after "
        "`zero_grad()`, it clips zeros (or skips `None`) and the coming backward writes unclipped gradients. "
        "awslabs/graphstorm#1366 (\"Clipping is currently applied after the optimizer step\"; fixed in "
        "awslabs/graphstorm#1382: \"`--max-grad-norm` silently does nothing\")."
    )
    story = "awslabs/graphstorm#1366: every trainer clipped after `optimizer.step()`, so `--max-grad-norm` had no effect."
    example = """\
import torch

for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
"""
    fixed_example = """\
import torch

for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
"""
    not_flagged = (
        "A clip whose nearest preceding gradient event in the same loop body (or step function) is a backward; "
        "a clip after a step when the next gradient event is not a `zero_grad()` (another optimizer's step may "
        "use the clipped gradients, or nothing clears them: TL501's case); a clip after `zero_grad()` unless a "
        "backward follows; steps and clears under an `if` (or in a branch) the clip is not under, and in "
        "`except` handlers."
    )
    verification = '`trainlint verify` steps SGD (lr 1) on a gradient spike, then clips: the update the step applied is larger than the clip norm.'
    valid = (
        """
import torch
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
""",
        # AMP branch and plain branch: the plain branch's clip follows its own backward
        """
import torch
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    if use_amp:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
""",
        # two optimizers: the generator's clip follows the generator's backward
        """
import torch
for x in loader:
    d_opt.zero_grad()
    d_loss.backward()
    d_opt.step()
    g_opt.zero_grad()
    g_loss.backward()
    torch.nn.utils.clip_grad_norm_(G.parameters(), 1.0)
    g_opt.step()
""",
        # gradient accumulation: the step and clear only on the boundary
        """
import torch
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accum
    loss.backward()
    if (i + 1) % accum == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
""",
    )
    invalid = (
        """
import torch
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
""",
        """
import torch
def train_step(model, batch, optimizer, scaler):
    with torch.autocast("cuda"):
        loss = model(batch)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
    optimizer.zero_grad()
""",
        """
import torch
for x, y in loader:
    optimizer.zero_grad()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for clip in model.calls:
            if not _is_clip(clip):
                continue
            scope = self._iteration(model, clip)
            before = [(c, e) for c, e in scope if c.site.order < clip.site.order and _always_with(c, clip)]
            if not before:
                continue
            previous, kind = before[-1]
            if kind == "backward":
                continue
            after = [(c, e) for c, e in scope if c.site.order > clip.site.order and _always_with(c, clip)]
            # the loop body (or the step function) runs again: what follows the clip wraps round to its top
            following = after or [(c, e) for c, e in scope if c.site.order < previous.site.order and _always_with(c, clip)]
            upcoming = following[0][1] if following else None
            name = (clip.qualname or clip.method or clip.name or "clip").rsplit(".", 1)[-1]
            step = model.module.code_for_node(previous.node.func) + "()"
            if kind == "step" and upcoming == "zero":
                clear = model.module.code_for_node(following[0][0].node.func) + "()"
                yield Finding(
                    clip.node,
                    f"`{name}` runs after `{step}`: the step already used the unclipped gradients, and `{clear}` clears the clipped ones before they are used",
                    facts={"after": "step"},
                )
            elif kind == "zero" and upcoming == "backward":
                yield Finding(
                    clip.node,
                    f"`{name}` runs right after `{step}`, before any backward: it clips cleared gradients, and the step uses the unclipped ones the next backward writes",
                    facts={"after": "zero_grad"},
                )

    @staticmethod
    def _iteration(model: TrainingModel, clip: Call) -> list[tuple[Call, str]]:
        """The gradient events of one iteration around the clip, in order: the calls of its function
        inside its innermost loop (the whole function body when the clip is in no loop)."""
        fn, loop = clip.site.function, clip.site.innermost_loop
        out = []
        for call in model.calls:
            if call.site.function is not fn or (loop not in call.site.loops if loop is not None else bool(call.site.loops)):
                continue
            kind = _event(model, call)
            if kind is not None:
                out.append((call, kind))
        return out
