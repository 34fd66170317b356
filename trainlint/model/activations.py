"""Which values certainly hold the output of `softmax` or `sigmoid` (probabilities), for the loss
that applies the activation itself (`CrossEntropyLoss`, `BCEWithLogitsLoss`). Followed through names,
reshapes, `nn.Softmax` modules, `nn.Sequential`s ending in one, the `forward` of a class of this
module, and what summaries say a project class's `forward` (or a project function) returns
(`FunctionSummary.returns_activation`), so that a model defined in another module is known too."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.lattice import Kind
from trainlint.model.names import dotted

if TYPE_CHECKING:
    from trainlint.model.facts import Function, Site
    from trainlint.model.training import TrainingModel

ACTIVATIONS = ("softmax", "sigmoid")
ACTIVATION_FUNCTIONS = {
    "torch.softmax": "softmax",
    "torch.nn.functional.softmax": "softmax",
    "torch.special.softmax": "softmax",
    "torch.sigmoid": "sigmoid",
    "torch.nn.functional.sigmoid": "sigmoid",
    "torch.special.expit": "sigmoid",
}
ACTIVATION_MODULES = {"Softmax": "softmax", "Sigmoid": "sigmoid"}
# tensor methods that reshape or convert values without changing them: probabilities stay probabilities
VALUE_PRESERVING = frozenset(
    {"view", "reshape", "squeeze", "unsqueeze", "permute", "transpose", "contiguous", "flatten", "float", "double", "to", "view_as", "reshape_as", "clone"}
)
MAX_DEPTH = 6
# the last part of what a module calls when it applies an activation somewhere (else no function of
# it can return probabilities of its own making, and its summaries need not look)
_ACTIVATION_WORDS = frozenset({"softmax", "sigmoid", "Softmax", "Sigmoid", "expit"})


def mentions_activation(model: "TrainingModel") -> bool:
    """Whether the module calls (or builds) a softmax or sigmoid anywhere."""
    return any((c.qualname or c.method or c.name or "").rsplit(".", 1)[-1] in _ACTIVATION_WORDS for c in model.calls)


def returned_activation(model: "TrainingModel", fn: "Function") -> str | None:
    """"softmax" (or "sigmoid") when every `return` of `fn` certainly gives that activation's output:
    a `forward` ending in `F.softmax(logits, dim=1)`. A `forward` that returns logits on some path
    (`if self.training: return logits`) returns no probabilities as a fact."""
    returned = [r for r in fn.return_facts if r.site.function is fn]
    if not returned:
        return None
    for activation in ACTIVATIONS:
        if all(activation_of(model, r.value, r.site, fn, activation, 0) for r in returned):
            return activation
    return None


def activation_of(model: "TrainingModel", expr: cst.BaseExpression, site: "Site | None", fn: "Function | None", activation: str, depth: int) -> bool:
    """Whether `expr` certainly holds the output of `activation` ("softmax" or "sigmoid"): the call
    itself, a reshape of it, a name every reaching binding of which is one, the output of a module
    whose every `forward` return is one, or of a function whose summary says it returns one."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(expr, cst.Subscript):
        return activation_of(model, expr.value, site, fn, activation, depth + 1)
    if isinstance(expr, cst.Name):
        assigns = model.reaching(fn, expr.value, site)
        if not assigns or any(a.op is not None or len(a.targets) != 1 or a.unpacked for a in assigns):
            return False
        return all(activation_of(model, a.value, a.site, a.site.function, activation, depth + 1) for a in assigns)
    if not isinstance(expr, cst.Call):
        return False
    qual = model.imports.resolve(expr.func)
    if qual is not None and qual.split(".", 1)[0] == "torch":
        return ACTIVATION_FUNCTIONS.get(qual) == activation
    if isinstance(expr.func, cst.Attribute):
        method = expr.func.attr.value
        if method in VALUE_PRESERVING:  # proven below only when the receiver holds the activation's output
            return activation_of(model, expr.func.value, site, fn, activation, depth + 1)
        if method == activation and _tensor_method_call(model, expr, site, fn):
            return True
    if _module_output(model, expr.func, site, fn, activation, depth + 1):
        return True
    call = model.call_at(expr)
    summary = model.call_summary(call) if call is not None else None
    return summary is not None and summary.returns_activation == activation


def _tensor_method_call(model: "TrainingModel", call: cst.Call, site: "Site | None", fn: "Function | None") -> bool:
    """`x.softmax(-1)`, `x.softmax(dim=1)`, `x.sigmoid()`: a tensor method (called with at most the
    dimension, on a receiver that is a tensor or unknown, never `self` or a module's attribute holding a layer)."""
    receiver = call.func.value  # type: ignore[attr-defined]
    if isinstance(receiver, cst.Name) and receiver.value in ("self", "cls"):
        return False
    if model.values.of(receiver, fn, site).kind not in (Kind.TENSOR, Kind.UNKNOWN):
        return False
    for arg in call.args:
        value = arg.value
        if isinstance(value, cst.UnaryOperation):
            value = value.expression
        if arg.star or not (isinstance(value, cst.Integer) or (arg.keyword is not None and arg.keyword.value in ("dim", "dtype"))):
            return False
    return True


def _module_output(model: "TrainingModel", callee: cst.BaseExpression, site: "Site | None", fn: "Function | None", activation: str, depth: int) -> bool:
    """Calling `callee` returns the activation's output: an `nn.Softmax`, an `nn.Sequential` ending in
    one, an instance of a class of this module whose `forward` always returns one, or of a project
    class whose `forward` (`__call__`) its summary says returns one."""
    value = model.values.of(callee, fn, site)
    if value.kind is not Kind.MODULE or not value.origin or "|" in value.origin:
        return False
    last = value.origin.rsplit(".", 1)[-1]
    if value.origin.startswith("torch.nn."):
        if last in ACTIVATION_MODULES:
            return ACTIVATION_MODULES[last] == activation
        if last == "Sequential":
            built = _constructions(model, callee, site, fn)
            return bool(built) and all(_sequential_ends_with(model, c, activation) for c in built)
        return False
    info = model.local_class(value.origin)
    if info is None:
        methods = model.class_methods(value.origin) or {}
        called = methods.get("forward") or methods.get("__call__")
        return called is not None and called.returns_activation == activation
    forward = info.methods.get("forward")
    if forward is None or not forward.return_facts:
        return False
    return all(activation_of(model, r.value, r.site, forward, activation, depth + 1) for r in forward.return_facts)


def _constructions(model: "TrainingModel", callee: cst.BaseExpression, site: "Site | None", fn: "Function | None") -> list[cst.Call]:
    """The constructor calls a name or `self.attribute` is bound to (empty when one binding is not a call)."""
    text = dotted(callee)
    if text is None:
        return [callee] if isinstance(callee, cst.Call) else []
    if "." not in text:
        values = [a.value for a in model.reaching(fn, text, site)] or [a.value for a in model.reaching(None, text, None)]
    elif text.startswith("self.") and text.count(".") == 1 and fn is not None:
        values = [a.value for a in model.attribute_assigns(fn.class_name, text)]
    else:
        return []
    return [v for v in values if isinstance(v, cst.Call)] if all(isinstance(v, cst.Call) for v in values) else []


def _sequential_ends_with(model: "TrainingModel", built: cst.Call, activation: str) -> bool:
    layers = [a.value for a in built.args if a.keyword is None and not a.star]
    if not layers or not isinstance(layers[-1], cst.Call):
        return False
    qual = model.imports.resolve(layers[-1].func) or ""
    return qual.startswith("torch.nn.") and ACTIVATION_MODULES.get(qual.rsplit(".", 1)[-1]) == activation
