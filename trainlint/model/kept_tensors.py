"""Host tensors and arrays an object keeps and copies to the device every step: `self.mel_basis.to(x)`
of a table built once in `__init__`, or `th.from_numpy(arr).to(device)` in a helper every call of
which passes such a table (`_extract_into_tensor(self.sqrt_alphas_cumprod, t, shape)`). A registered
buffer would move once, with the module (TL406)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.arguments import argument_for
from trainlint.model.lattice import HOST, Value
from trainlint.model.names import dotted

if TYPE_CHECKING:
    from trainlint.model.facts import Call
    from trainlint.model.training import TrainingModel


def kept_on_host(model: "TrainingModel", call: "Call", value: Value) -> str | None:
    """`self.mel_basis.to(x)` where `self.mel_basis` is a host tensor the object builds once (in
    `__init__` or a builder no step runs) and never replaces with the copy: the same data crosses to
    the device every step, where a registered buffer would move once with the module. The
    attribute's text, or None."""
    receiver = call.receiver
    while isinstance(receiver, cst.Subscript):
        receiver = receiver.value  # (`self.P[:, :n]`: slices of it)
    text = dotted(receiver) if isinstance(receiver, cst.Attribute) else None
    fn = call.site.function
    if not text or text.count(".") != 1 or not text.startswith("self.") or fn is None or fn.class_name is None:
        return None
    if not value.is_tensor or value.device != HOST:
        return None
    assigns = model.attribute_assigns(fn.class_name, text)
    if not assigns or any(a.site.function in model.step_functions or a.site.loops for a in assigns):
        return None  # (rebuilt every step, or in a loop: not one kept tensor)
    return text


def kept_array_passed(model: "TrainingModel", call: "Call") -> tuple[str, str] | None:
    """`th.from_numpy(arr).to(device)` in a function of the module that a call run every step passes
    an array an object keeps (`_extract_into_tensor(self.sqrt_alphas_cumprod, t, shape)`, the table
    built once in `__init__`): the same table crosses to the device at each such call, where a buffer
    would move once. The attribute's text (of the first such call) and the parameter's name, or None."""
    receiver, fn = call.receiver, call.site.function
    wrapped = model.imports.resolve(receiver.func) if isinstance(receiver, cst.Call) else None
    if wrapped not in ("torch.from_numpy", "torch.as_tensor", "torch.tensor") or fn is None or fn.class_name is not None:
        return None
    args = receiver.args  # type: ignore[union-attr]
    if len(args) != 1 or args[0].keyword is not None or not isinstance(args[0].value, cst.Name) or args[0].value.value not in fn.params:
        return None
    name = args[0].value.value
    callers = model.calls_of(fn)
    kept: list[str] = []
    for c in callers:
        given = argument_for(c.node, f"{fn.params.index(name)} {name}")
        owner = c.site.function
        while owner is not None and owner.class_name is None:
            owner = owner.parent
        parts = _attributes_of(model, given) if given is not None else None
        if not parts or owner is None or not model.every_step(c.site) or not model.value(given, c.site).on_host:  # type: ignore[arg-type]
            continue  # (what other calls pass is theirs: this one copies a kept table every step)
        assigns = [model.attribute_assigns(owner.class_name, text) for text in parts]  # type: ignore[arg-type]
        if all(found and not any(a.site.function in model.step_functions or a.site.loops for a in found) for found in assigns):
            kept.append(parts[0])
    return (kept[0], name) if kept else None


def _attributes_of(model: "TrainingModel", expr: cst.BaseExpression) -> list[str] | None:
    """The attributes of `self` an expression computes from (`1.0 - self.alphas_cumprod`,
    `np.log(self.betas)`), with numbers and NumPy's functions; None if anything else goes in."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return []
    if isinstance(expr, (cst.Attribute, cst.Name)):
        text = dotted(expr)
        if text and text.startswith("self.") and text.count(".") == 1:
            return [text]
        return [] if (model.imports.resolve(expr) or "").startswith(("numpy.", "math.")) else None
    parts: list[cst.BaseExpression]
    if isinstance(expr, cst.BinaryOperation):
        parts = [expr.left, expr.right]
    elif isinstance(expr, cst.UnaryOperation):
        parts = [expr.expression]
    elif isinstance(expr, cst.Call) and (model.imports.resolve(expr.func) or "").startswith("numpy."):
        parts = [a.value for a in expr.args]
    else:
        return None
    found: list[str] = []
    for part in parts:
        inner = _attributes_of(model, part)
        if inner is None:
            return None
        found.extend(inner)
    return found
