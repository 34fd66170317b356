"""What reads a tensor's value on the host, beyond `.item()`: Python's builtins ordering tensors,
%-formatting, a chain of host copies, a count argument given as a tensor, a lambda that copies to the
host. Facts of values that TL401 asks about each call of a per-step line."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.facts import Call, Site
from trainlint.model.lattice import HOST, Kind, Value

if TYPE_CHECKING:
    from trainlint.model.training import TrainingModel

SYNC_METHODS = frozenset({"item", "cpu", "tolist", "numpy"})


def orders_tensors(model: TrainingModel, call: Call, site: Site) -> bool:
    """`max(lengths)` over a tensor or a list of tensors: Python's builtin compares the elements with
    `>` and asks each answer's truth, reading it on the host. (`max(n, 1)` is left alone: one side
    is usually a number already read, which a tuple's joined value cannot tell apart.)"""
    args = [a.value for a in call.node.args if a.keyword is None and not a.star]
    if len(args) != 1:
        return False
    value = model.value(args[0], site)
    element = value.element if value.kind is Kind.COLLECTION else None
    return device_tensor(value) or (element is not None and device_tensor(element))


def formats_tensor(model: TrainingModel, expr: cst.BaseExpression, site: Site) -> bool:
    """`"loss %f" % (loss,)`: %-formatting converts each tensor operand on the host."""
    if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo)):
        return False
    if not isinstance(expr.left, (cst.SimpleString, cst.ConcatenatedString)):
        return False
    right = expr.right
    operands = [e.value for e in right.elements] if isinstance(right, cst.Tuple) else [right]
    return any(device_tensor(model.value(v, site)) for v in operands)


def chain_base(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`out.argmax(1).cpu()` for the chain `out.argmax(1).cpu().numpy()`: one finding, judged at its first copy."""
    while (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in SYNC_METHODS
        and not expr.args
    ):
        expr = expr.func.value
    return expr


# torch functions whose count is a Python int (the parameter, its place after the input): given a
# tensor, torch reads its value on the host (`torch.topk(cost, k=dynamic_ks[i])`)
COUNT_PARAMETERS = {"topk": ("k", 1), "kthvalue": ("k", 1), "multinomial": ("num_samples", 1)}
GIVEN_A_TENSOR = "the tensor given for the Python int"

def count_argument(call: Call) -> tuple[str, cst.BaseExpression | None]:
    """The count parameter and argument of `torch.topk(x, k)` or `x.topk(k)`, if the call has one."""
    name = call.qualname.rsplit(".", 1)[-1] if call.qualname in (f"torch.{n}" for n in COUNT_PARAMETERS) else None
    if name is None and call.method in COUNT_PARAMETERS and call.qualname is None:
        name = call.method
    if name is None:
        return "", None
    keyword, position = COUNT_PARAMETERS[name]
    position -= 1 if call.method == name and call.qualname is None else 0
    positional = [a.value for a in call.node.args if a.keyword is None and not a.star]
    named = [a.value for a in call.node.args if a.keyword is not None and a.keyword.value == keyword]
    return keyword, named[0] if named else positional[position] if len(positional) > position else None


def device_tensor(value: Value) -> bool:
    """A tensor that may live on the accelerator (known to be a tensor, not known to be on the host)."""
    return value.is_tensor and value.device != HOST

def copies_to_host(model: TrainingModel, expr: cst.BaseExpression, site: Site) -> bool:
    """A lambda's body, inlined at a call, that copies a device tensor to the host: `x.item()`,
    `x.cpu()`, `x.numpy()`, `x.tolist()`, or `x.to(<the CPU>)`."""
    if not isinstance(expr, cst.Call) or not isinstance(expr.func, cst.Attribute):
        return False
    method, args = expr.func.attr.value, expr.args
    if method == "to":
        first = args[0] if args and (args[0].keyword is None or args[0].keyword.value == "device") else None
        if first is None or not model.values.spells_cpu(first.value, site.function, site):
            return False
    elif method not in SYNC_METHODS or args:
        return False
    receiver = model.value(expr.func.value, site)
    return receiver.is_tensor and not receiver.on_host
