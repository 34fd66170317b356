"""Host tensors copied to the device every step where the value of the moved name alone does not say
so (TL406): tables an object keeps, `self.mel_basis.to(x)` of a table built once in `__init__`, or
`th.from_numpy(arr).to(device)` in a helper every call of which passes such a table
(`_extract_into_tensor(self.sqrt_alphas_cumprod, t, shape)`), where a registered buffer would move
once, with the module; and a tensor a branch of the loop builds anew on each round before the move
(`if opt.mode == "S": noise = torch.randn(n)`, then `noise = noise.cuda()`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.arguments import argument_for
from trainlint.model.arithmetic import built_on_host
from trainlint.model.lattice import HOST, UNKNOWN, Kind, Value, join
from trainlint.model.module_classes import PARAMETER_CLASSES
from trainlint.model.names import dotted
from trainlint.model.walk import iter_nodes

if TYPE_CHECKING:
    from trainlint.model.facts import Assign, Call, Loop, Site
    from trainlint.model.training import TrainingModel


def kept_on_host(model: "TrainingModel", call: "Call", value: Value) -> str | None:
    """`self.mel_basis.to(x)` where `self.mel_basis` is a host tensor the object builds once (in
    `__init__` or a builder no step runs) and never replaces with the copy: the same data crosses to
    the device every step, where a registered buffer would move once with the module. The
    attribute's text, or None."""
    receiver = call.receiver
    if isinstance(receiver, cst.Call) and receiver.args and receiver.args[0].keyword is None and model.imports.resolve(receiver.func) in PARAMETER_CLASSES:
        receiver = receiver.args[0].value  # (`nn.Parameter(self.pe, requires_grad=False).to(device)`: the same data)
        value = model.value(receiver, call.site)
    while isinstance(receiver, cst.Subscript):
        receiver = receiver.value  # (`self.P[:, :n]`: slices of it)
    text = dotted(receiver) if isinstance(receiver, cst.Attribute) else None
    fn = call.site.function
    if not text or text.count(".") != 1 or not text.startswith("self.") or fn is None or fn.class_name is None:
        return None
    assigns = model.attribute_assigns(fn.class_name, text)
    if value.kind is Kind.MODULE and value.origin in PARAMETER_CLASSES:
        value = _parameter_data(model, fn.class_name, assigns)
    if not value.is_tensor or value.device != HOST:
        return None
    if not assigns or any(a.site.function in model.step_functions or a.site.loops for a in assigns):
        return None  # (rebuilt every step, or in a loop: not one kept tensor)
    return text


def _parameter_data(model: "TrainingModel", class_name: str, assigns: "list[Assign]") -> Value:
    """What `self.proj = nn.Parameter(torch.linspace(0, n, n + 1), requires_grad=False)` wraps, in a
    class that is no `nn.Module` (a loss object): nothing moves it with a model, so it stays where it
    was built. Unknown in a module, whose `.to(device)` moves its parameters."""
    info = model.local_class(class_name)
    if info is None or model.is_module_class(info) or not assigns:
        return UNKNOWN
    wrapped = []
    for a in assigns:
        call = a.value
        if not (isinstance(call, cst.Call) and model.imports.resolve(call.func) in PARAMETER_CLASSES and call.args and call.args[0].keyword is None):
            return UNKNOWN
        wrapped.append(model.value(call.args[0].value, a.site))
    return join(wrapped)


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


def rebuilt_each_round(model: "TrainingModel", name: str, move: "Call") -> Value | None:
    """`if opt.mode == "S": noise = torch.randn(n)` then `noise = Variable(noise.cuda())` in a loop:
    the device tensor the previous round's move left reaches the move again only on a round where no
    branch built `noise`, and a branch whose test the loop does not change runs on every round or on
    none (then `noise` was never bound, or moved once as it was before the loop). The host tensor this
    round builds, when such a branch binds it, and every binding that reaches the move is a host
    factory's tensor (also one from before the loop) or the move's own result; else None."""
    site, loop = move.site, move.site.innermost_loop
    if loop is None:
        return None
    found = model.reaching(site.function, name, site)
    carried = [a for a in found if any(n is move.node for n in iter_nodes(a.value))]
    # (`noise = None` before the loop: a round that moved it would fail, so none does)
    fresh = [a for a in found if a not in carried and not (isinstance(a.value, cst.Name) and a.value.value == "None")]
    this_round = [a for a in fresh if loop in a.site.loops and a.site.order < site.order]
    if not this_round or not carried:
        return None
    shared = {id(n) for n in (*site.gate_nodes, *site.else_of) if n is not None}
    tests = [n.test for a in this_round for n in (*a.site.gate_nodes, *a.site.else_of) if n is not None and id(n) not in shared]
    if any(_varies(model, test, loop, site) for test in tests):
        return None  # (`if step == 0: buf = torch.zeros(n)`: built once, then the move copies nothing)
    values = [model.value(a.value, a.site) for a in fresh]
    return values[fresh.index(this_round[0])] if all(built_on_host(v) for v in values) else None


def _varies(model: "TrainingModel", test: cst.BaseExpression, loop: "Loop", site: "Site") -> bool:
    """Whether a test may hold on some rounds of `loop` and not on others: it calls something, or
    reads a name the loop binds or assigns."""
    for node in iter_nodes(test):
        if isinstance(node, cst.Call):
            return True
        if isinstance(node, cst.Name) and (
            model.binding_loop(node.value, site) is not None
            or any(loop in a.site.loops for a in model.reaching(site.function, node.value, None))
        ):
            return True
    return False
