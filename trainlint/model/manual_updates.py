"""Weight updates written by hand: a parameter changed in place through its own gradient.

Tutorials and fast-training scripts update weights without `torch.optim` (`param -= lr * param.grad`,
`w.data.add_(w.grad, alpha=-lr)`, `p.data = p.data - lr * p.grad`, d2l's `sgd(params, lr, batch_size)`):
a function doing so updates the weights each time it runs, as an optimizer's `step()` does, even
inside its own loop over the parameters. And the updates of one step spread over a loop: `for opt in
optimizers: opt.step()` steps another optimizer each round, so the loop around it is the training loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.names import dotted, target_names
from trainlint.model.walk import child_nodes

if TYPE_CHECKING:
    from trainlint.model.facts import Call, Function, Loop, Site
    from trainlint.model.training import TrainingModel

# in-place tensor arithmetic that applies an update to its receiver
IN_PLACE_UPDATES = frozenset({"sub_", "add_", "addcdiv_", "addcmul_", "copy_", "lerp_"})


def _own(text: str) -> str:
    """The parameter an update target names: `param` for `param` and `param.data`."""
    return text[: -len(".data")] if text.endswith(".data") else text


def _reads_gradient_of(expr: cst.CSTNode, parameter: str) -> bool:
    """Whether `expr` reads `parameter.grad` (or `parameter.grad.data`)."""
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute) and node.attr.value == "grad" and _own(dotted(node.value) or "") == parameter:
            return True
        stack.extend(child_nodes(node))
    return False


def updated_by_hand(model: "TrainingModel") -> frozenset["Function"]:
    """The functions of a module that change a parameter in place through its gradient, once per call:
    outside loops, or in loops over the parameters that backpropagate nothing (a loop over batches
    that updates by hand is a training loop, its function an epoch's). An optimizer's own `step`,
    which user loops call as one, is left to them."""
    backpropagating = {id(loop) for c in model.calls if model.is_backward(c) for loop in c.site.loops}
    found: set["Function"] = set()

    def once(site: "Site") -> bool:
        return not any(id(loop) in backpropagating for loop in site.loops)

    for assign in model.assigns:
        fn = assign.site.function
        if fn is None or fn in found or len(assign.targets) != 1 or not once(assign.site):
            continue
        target = assign.targets[0]
        if assign.op in ("SubtractAssign", "AddAssign") or (assign.op is None and target.endswith(".data")):
            if _reads_gradient_of(assign.value, _own(target)):
                found.add(fn)
    for call in model.calls:
        fn = call.site.function
        if fn is None or fn in found or call.method not in IN_PLACE_UPDATES or not call.receiver_text or not once(call.site):
            continue
        parameter = _own(call.receiver_text)
        if any(_reads_gradient_of(a.value, parameter) for a in call.node.args):
            found.add(fn)
    return frozenset(fn for fn in found if not any(b.rsplit(".", 1)[-1] == "Optimizer" for b in fn.class_bases))


def updates_once(model: "TrainingModel", update: "Call", known: dict[int, bool]) -> bool:
    """An update (an optimizer step, a project step helper) that runs once per call of its function:
    outside loops, or inside loops that each apply it to one of several parameter sets or optimizers
    (`for param in device_params: sgd(param, lr)`, `for opt in optimizers: opt.step()`,
    d2l's multi-GPU training). Each loop gives the update its variable, and nothing in it
    backpropagates or runs a function of this module (a loop calling a step helper is a training
    loop). `known`: the loops' answers so far."""
    loops = update.site.loops
    if loops and update.method != "step" and update.qualname is None:
        return False  # (in a loop, only `opt.step()` or an imported step helper given the loop's variable)
    given = [a.value for a in update.node.args] + ([update.receiver] if update.receiver is not None else [])
    for loop in loops:  # (the cheap test first: most calls in loops are not given a loop's variable)
        targets = target_names(loop.node.target) if isinstance(loop.node, cst.For) else set()
        if not any((dotted(e) or "").split(".")[0] in targets for e in given):
            return False
    if not (model.is_optimizer_step(update) or model.project_steps(update)):
        return False
    for loop in loops:
        answer = known.get(id(loop))
        if answer is None:
            inside = [c for c in model.calls if loop in c.site.loops]
            summaries = [model.project_call_summary(c) for c in inside]
            answer = known[id(loop)] = not any(model.is_backward(c) or model.callee(c) is not None for c in inside) and not any(
                s is not None and s.backprops for s in summaries
            )
        if not answer:
            return False
    return True


def steps_its_items(model: "TrainingModel", loop: "Loop") -> bool:
    """A loop that steps what it iterates (`for opt in optimizers: opt.step()`, `scaler.step(opt)`,
    `for opt, sched in zip(optimizers, schedulers): opt.step(); sched.step()`)
    and backpropagates nothing: each round is another optimizer's update in the same step."""
    node = loop.node
    if not isinstance(node, cst.For):
        return False
    items = target_names(node.target)  # (`for opt, sched in zip(optimizers, schedulers):`)
    stepped = False
    for c in loop.direct_calls:
        if model.is_backward(c) or model.project_backprops(c):
            return False
        if model.is_optimizer_step(c):
            args = [a.value for a in c.node.args if a.keyword is None]
            if not any(isinstance(e, cst.Name) and e.value in items for e in (c.receiver, *args[:1])):
                return False
            stepped = True
    return stepped
