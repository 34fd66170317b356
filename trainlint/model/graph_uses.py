"""What a function does with the autograd graphs its forward passes record: keeps them beyond the call,
or differentiates them. A function that does neither lets them die unused (TL303's prediction helpers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.facts import Call, Function
from trainlint.model.lattice import Kind

if TYPE_CHECKING:
    from trainlint.model.facts import Site
    from trainlint.model.training import TrainingModel

# what no backward can reach
NOT_DIFFERENTIABLE = frozenset({Kind.STRING, Kind.NUMBER, Kind.BOOL, Kind.NONE, Kind.HOST_ARRAY})
GRADIENT_FUNCTIONS = frozenset({"torch.autograd.grad"})


def differentiates(model: "TrainingModel", call: Call) -> bool:
    """`torch.autograd.grad(...)`, or a call of a function of this module that calls it, itself or
    through others of the module (FROMP's `self.cac_grad(loss, outputs)`, and `self.cac_jacobian(preds,
    outputs)` calling it per output): the graphs it is given are used."""
    if call.qualname in GRADIENT_FUNCTIONS:
        return True
    callee = model.callee(call)
    return callee is not None and id(callee) in _differentiating(model)


def _differentiating(model: "TrainingModel") -> set[int]:
    """The functions of the module (by id) that call `torch.autograd.grad`, themselves or through
    others of it: a fixpoint over its call graph, made once per model."""
    known: set[int] | None = model.__dict__.get("_differentiating")
    if known is None:
        known = {id(f) for f in model.functions if any(c.qualname in GRADIENT_FUNCTIONS for c in f.calls)}
        grew = bool(known)
        while grew:
            added = {id(f) for f in model.functions if id(f) not in known and any(id(model.callee(c)) in known for c in f.calls)}
            known |= added
            grew = bool(added)
        model.__dict__["_differentiating"] = known
    return known


def graphs_used(model: "TrainingModel", fn: Function) -> bool:
    """Whether the graphs `fn` records are used: it keeps what may carry one beyond the call, on an object
    or in an item (`self.cache = out`; a number, a flag or a string stored, `self.time_step += 1`, keeps none),
    in a parameter or an attribute (`outputs.append(y)`), or by handing it to a method of an object it holds
    (`self.gpt.store_prefix_emb(emb)`); or it differentiates it (a backward, `autograd.grad`, also in a
    function nested in it: `def hvp(y, w, v)`)."""

    def graph(expr: cst.BaseExpression | None, site: "Site") -> bool:
        return expr is None or model.value(expr, site).kind not in NOT_DIFFERENTIABLE

    def kept(c: Call) -> bool:
        if c.method in ("append", "extend", "insert", "update", "add", "put"):
            return "." in (c.receiver_text or ".") or (c.receiver_text or "") in fn.params
        return c.discarded and (c.receiver_text or "").startswith("self.") and any(graph(a.value, c.site) for a in c.node.args)

    nested = [c for f in model.functions if f.parent is fn for c in f.calls]
    stored = any(any("." in t or "[" in t for t in a.targets) and graph(a.value, a.site) for a in model.assigns if a.site.function is fn)
    return stored or any(model.is_backward(c) or differentiates(model, c) or (c.site.function is fn and kept(c)) for c in (*fn.calls, *nested))
