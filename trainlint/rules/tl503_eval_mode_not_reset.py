"""TL503 eval-mode-not-reset."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.facts import Function, Loop
from trainlint.model.names import tokens
from trainlint.model.lattice import Kind
from trainlint.model.layer_swaps import is_optimizer_construction
from trainlint.rules.rule import Finding, Rule


# copies that are never the model being trained: EMA weights, a teacher, a target network
NOT_TRAINED_WORDS = frozenset({"ema", "teacher", "target", "swa", "averaged", "avg", "shadow", "momentum", "frozen", "ref", "reference", "old", "prev", "pretrained"})


class EvalModeNotReset(Rule):
    code = "TL503"
    name = "eval-mode-not-reset"
    severity = Severity.ERROR
    summary = "`model.eval()` inside the epoch loop with no `model.train()` before the next training step."
    hint = "Call `model.train()` at the start of each training epoch (or at the end of your evaluation function)."
    requires = (".eval()",)
    per_step = True  # an `.eval()` in a loop that holds a training step
    why = (
        "`model.eval()` switches dropout off and makes batch norm use its running statistics. If training "
        "resumes without `model.train()`, the rest of the run trains without dropout and with frozen "
        "batch-norm statistics - silently different from what you think you are training."
    )
    story = "pytorch/tutorials #1624: the official quickstart's `test()` calls `model.eval()` and `train()` never calls `model.train()`; vsepp #4 saw \"non-negligible changes in the results\"."
    example = """\
import torch

for epoch in range(epochs):
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    model.eval()
    evaluate(model)
"""
    fixed_example = """\
import torch

for epoch in range(epochs):
    model.train()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    model.eval()
    evaluate(model)
"""
    not_flagged = "Modules that call `.train()` on the same model anywhere (the evaluation helper may restore it), `eval()` outside the training loops, `eval()` on names that are not models, `eval()` where every optimizer the loop steps holds only tensors its function made (`Adam([latent])`: a latent code fitted through a decoder kept in eval mode, whose weights no step trains), and any `eval()` of a model that a training function itself switches to eval mode before its step loop, or at the top of each step before the backward (a linear probe on frozen features, simsiam's `main_lincls.py`: its evaluations leave the mode the training chose)."
    verification = "`trainlint verify run` checks whether the model is in eval mode at each optimizer step."
    valid = (
        """
def evaluate(model):
    model.eval()
    with torch.no_grad():
        return sum(model(x) for x in val)

for epoch in range(3):
    model.train()
    for x in loader:
        model(x).backward()
        optimizer.step()
    evaluate(model)
""",
    )
    invalid = (
        """
def test(model):
    model.eval()
    with torch.no_grad():
        return sum(model(x) for x in val)

for epoch in range(3):
    for x in loader:
        model(x).backward()
        optimizer.step()
    test(model)
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        loops = model.step_containing_loops
        # conservative: any `.train()` in the module may restore training mode
        if not loops or any(c.method == "train" and len(c.node.args) <= 1 for c in model.calls):
            return
        if any((summary := model.call_summary(c)) is not None and summary.sets_train_mode for c in model.calls):
            return  # a helper (an epoch function in another module) puts the model back in training mode
        reachable = model.called_from(loops)
        # a function with a step loop that switches a module to eval mode before that loop trains it in
        # eval mode by design (a linear probe on frozen features): no switch of that module is a slip
        by_design = {c.receiver_text for c in model.calls if c.method == "eval" and not c.node.args and _before_own_step_loop(model, c)}
        for call in model.calls:
            if call.method != "eval" or call.node.args or not call.receiver_text or call.receiver_text in by_design:
                continue
            if set(tokens(call.receiver_text)) & NOT_TRAINED_WORDS:
                continue
            if model.value(call.receiver, call.site).kind not in (Kind.MODULE, Kind.UNKNOWN):
                continue  # (`.eval()` of something other than a module: a sympy or a metric object's)
            if _fits_tensors_only(model, call, loops):
                continue  # (`Adam([latent])`: the loop fits a code for the module in eval mode, never its weights)
            if any(l in loops for l in call.site.loops) or call.site.function in reachable:
                yield Finding(call.node, f"`{call.receiver_text}.eval()` runs inside the training loop and nothing calls `.train()` again: later steps train without dropout and with frozen batch-norm statistics")


def _before_own_step_loop(model: TrainingModel, call: Call) -> bool:
    """`model.eval()` at the top of a `train()` whose step loop follows, or at the top of that loop's body
    (ungated, before the step's backward): the step trains in eval mode by design."""
    fn = call.site.function
    if fn is None:
        return False
    if not call.site.loops:
        return any(loop.is_step and loop.function is fn and all(call.site.order < c.site.order for c in loop.direct_calls) for loop in model.loops)
    loop = call.site.loops[-1]
    updates = [c.site.order for c in model.calls if loop in c.site.loops and (model.is_backward(c) or model.is_optimizer_step(c))]
    return loop.is_step and loop.function is fn and not any(call.site.gate_nodes) and bool(updates) and call.site.order < min(updates)


def _fits_tensors_only(model: TrainingModel, call: Call, loops: frozenset[Loop]) -> bool:
    """Every optimizer stepped where `call` puts a module in eval mode (its function's own steps, and
    those of the functions its step loops call) is one its function built from a list of tensors it
    made (`Adam([latent])`), no module's parameters: fitting a latent code through a module kept in eval mode."""
    around = frozenset(l for l in call.site.loops if l in loops)
    reached = model.called_from(around) | {call.site.function}
    stepping = {c.site.function for c in model.calls if c.site.function in reached and model.is_optimizer_step(c)}
    return bool(stepping) and all(f is not None and _builds_tensor_optimizers(model, f) for f in stepping)


def _builds_tensor_optimizers(model: TrainingModel, fn: Function) -> bool:
    built = [c for c in fn.calls if c.site.function is fn and is_optimizer_construction(model, c)]
    return bool(built) and all(_tensor_list(model, c.arg(0, "params"), c) for c in built)


def _tensor_list(model: TrainingModel, given: cst.BaseExpression | None, at: Call) -> bool:
    return isinstance(given, (cst.List, cst.Tuple)) and bool(given.elements) and all(
        isinstance(e.value, cst.Name) and model.value(e.value, at.site).kind is Kind.TENSOR for e in given.elements
    )
