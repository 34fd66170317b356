"""TL301 retain-graph-in-loop."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.environments import AFTER, BACKWARD
from trainlint.model.names import root_name, target_names
from trainlint.model.torchnames import is_true
from trainlint.rules.rule import Finding, Rule

GRAD_FUNCTIONS = frozenset({"torch.autograd.grad", "torch.autograd.backward"})


class RetainGraphInLoop(Rule):
    code = "TL301"
    name = "retain-graph-in-loop"
    severity = Severity.WARNING
    summary = "`backward(retain_graph=True)` or `autograd.grad(..., retain_graph=True)` on every training step."
    hint = "Drop `retain_graph=True`: sum the losses and call backward once, and `.detach()` state carried to the next step."
    requires = ("retain_graph",)
    per_step = True
    why = (
        "`retain_graph=True` keeps every tensor the graph saved for backward alive after the backward pass. "
        "Inside a training loop this is almost always a workaround for \"Trying to backward through the "
        "graph a second time\", whose real cause is state (an RNN hidden state, a memory, a running "
        "statistic) that links this step's graph to the previous one. Each step then holds on to the last "
        "step's graph, and memory grows until CUDA runs out. The PyTorch docs: \"in nearly all cases setting "
        "this option to True is not needed and often can be worked around in a much more efficient way.\""
    )
    story = (
        "Field report 004: gradient accumulation with `retain_graph=True` and CUDA tensors stored on `self` "
        "kept graphs alive across batches; training died with a CUDA OOM (28+ GB) on batch 2."
    )
    example = """\
import torch

for x, y in loader:
    out, hidden = rnn(x, hidden)
    loss = criterion(out, y)
    loss.backward(retain_graph=True)   # hidden links every step's graph
    optimizer.step()
"""
    fixed_example = """\
import torch

for x, y in loader:
    hidden = hidden.detach()           # truncate backprop at the step boundary
    out, hidden = rnn(x, hidden)
    loss = criterion(out, y)
    loss.backward()
    optimizer.step()
"""
    not_flagged = (
        "A `retain_graph=True` backward followed by another backward in the same step (two losses over one "
        "graph, the GAN pattern; also in a helper that other modules call every step, each before a backward of its own: "
        "`calculate_lambda` taking `autograd.grad(..., retain_graph=True)` before its caller's `loss.backward()`, also through a `forward` "
        "of its module whose loss the trainer backpropagates), `retain_graph` given a non-literal value (`retain_graph=i < n - 1`), "
        "`create_graph=True` alone, a backward per loss in a loop of its own inside the step over the losses one forward computed before it "
        "(`for name, loss in losses: accelerator.backward(loss, retain_graph=True)`; a loop running a forward per round is reported), and calls outside training steps."
    )
    verification = (
        "`trainlint verify` measures the growth per step of an accumulated graph's autograd nodes. "
        "`trainlint verify run` names the script's variables whose graphs grow per step, and the bytes saved "
        "for backward that stay alive."
    )
    valid = (
        """
for x in loader:
    loss_a, loss_b = model(x)
    loss_a.backward(retain_graph=True)
    loss_b.backward()
    optimizer.step()
""",
        """
for x in loader:
    loss = model(x)
    loss.backward()
    optimizer.step()
""",
    )
    invalid = (
        """
for x in loader:
    loss = model(x)
    loss.backward(retain_graph=True)
    optimizer.step()
""",
        """
import torch as T
def train_step(batch):
    loss = model(batch)
    grads = T.autograd.grad(loss, model.parameters(), retain_graph=True)
    optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        grads = [c for c in model.calls if model.is_backward(c) or c.qualname in GRAD_FUNCTIONS]
        for call in grads:
            if not is_true(call.kwarg("retain_graph")) or not model.in_step(call.site) or call.site.in_except:
                continue
            # `autograd.grad(..., create_graph=True)`: the gradient is differentiated again (a gradient
            # penalty), so the graph must survive until that backward consumes it
            if is_true(call.kwarg("create_graph")):
                continue
            if any(_same_step_later(call, other) for other in grads) or _per_loss(model, call) or _consumed_by_caller(model, call, grads):
                continue
            yield Finding(
                call.kwarg_node("retain_graph") or call.node,
                "`retain_graph=True` on every training step keeps the graph's saved tensors alive; "
                "state linking steps grows memory until OOM",
            )


def _consumed_by_caller(model: TrainingModel, call: Call, grads: list[Call], depth: int = 0) -> bool:
    """The retaining helper is called from a step that backpropagates after the call returns: in this
    module, or, where only other modules call it every step, in each of those calls' functions
    (`lam = calculate_lambda(...)` taking `autograd.grad(..., retain_graph=True)`, then `loss.backward()`),
    also through one function of this module between them (a `forward` computing the adaptive weight,
    whose loss the trainer of another module backpropagates)."""
    fn = call.site.function
    if fn is None:
        return False
    callers = [*model.calls_of(fn), *model.method_calls_of(fn)]
    external = model.passed_facts(fn, AFTER) if not callers and model.project is not None else None
    if external:
        return all(f == BACKWARD for f in external)
    return any(
        any(_same_step_later(site_call, other) for other in grads) or (depth < 1 and _consumed_by_caller(model, site_call, grads, depth + 1))
        for site_call in callers
    )


def _per_loss(model: TrainingModel, call: Call) -> bool:
    """`for name, loss in losses: accelerator.backward(loss, retain_graph=True)`: a backward per loss of
    one step, in a loop of its own within the step over losses computed before it (from one graph), each
    consumed by the next round's; not a loop that runs a forward per round (`env_loss` of each
    environment's own graph, which no later backward needs)."""
    inner = call.site.loops[-1] if call.site.loops else None
    if inner is None or inner.is_step or inner.function is not call.site.function or not isinstance(inner.node, cst.For) or not model.in_step(call.site):
        return False
    positional = [a.value for a in call.node.args if a.keyword is None and not a.star]
    given = positional[0] if positional else call.receiver  # (`accelerator.backward(loss)`, `loss.backward()`)
    while isinstance(given, cst.BinaryOperation):  # (`discr_loss / self.grad_accum_every`)
        given = given.left
    return given is not None and root_name(given) in target_names(inner.node.target)


def _same_step_later(call: Call, other: Call) -> bool:
    """Another backward later in the same function and step loop consumes the retained graph."""
    if other is call or other.site.function is not call.site.function:
        return False
    if other.site.order <= call.site.order:
        return False
    shared = [loop for loop in call.site.loops if loop in other.site.loops]
    return bool(shared) or not call.site.loops
