"""What Python's builtins give when the code calls them: `sum(loss_dict.values())` of tensors is a tensor,
`any(...)` of tensors a tensor of one bool, `zip(t_batch, losses)` pairs by place, `len(x)` a number."""

from __future__ import annotations

from typing import Callable

import libcst as cst

from trainlint.model.arithmetic import arithmetic
from trainlint.model.containers import element_of
from trainlint.model.lattice import BOOL, HOST, NUMBER, STRING, UNKNOWN, Kind, Value, join

COLLECTION_BUILTINS = frozenset({"list", "tuple", "dict", "set", "sorted", "zip", "enumerate", "range", "map", "filter", "reversed"})
NUMBER_BUILTINS = frozenset({"float", "int", "len", "round", "abs", "sum", "min", "max", "bool", "hash", "ord"})


def builtin_call(name: str, call: cst.Call, evaluate: Callable[[cst.BaseExpression], Value]) -> Value | None:
    """What calling the builtin `name` (not rebound here) gives, `evaluate` giving each argument's
    value; None for a name that is no builtin this knows."""
    if name in ("any", "all") and call.args:
        inner = evaluate(call.args[0].value)
        if inner.kind is Kind.COLLECTION and inner.element is not None and inner.element.is_tensor:
            # `any(not torch.isfinite(p.grad).all() for p in params)` reads each tensor
            return Value(Kind.TENSOR, inner.element.device, False, "bool")
        return BOOL
    if name in ("sum", "min", "max", "abs") and call.args:
        # `sum(F.mse_loss(q, t) for q in qs)`, `max(a_loss, b_loss)`: tensors in, a tensor out
        inner = [evaluate(a.value) for a in call.args if a.keyword is None]
        elements = [v.element if v.kind is Kind.COLLECTION and v.element is not None else v for v in inner]
        tensors = [e for e in elements if e.kind is Kind.TENSOR]
        if tensors or (name == "sum" and any(e.kind is Kind.UNKNOWN for e in elements)):
            return arithmetic(tensors) if tensors else UNKNOWN  # (`sum(loss_dict.values())` may be a tensor)
    if name in NUMBER_BUILTINS:
        return NUMBER if name != "bool" else BOOL
    if name in ("str", "repr", "format"):
        return STRING
    if name in ("zip", "enumerate") and call.args and not any(a.star or a.keyword is not None for a in call.args):
        # each element a tuple, by place: `for t, l in zip(t_batch, losses)` takes a row of each
        parts = [element_of(evaluate(a.value)) for a in call.args]
        if name == "enumerate":
            parts = [NUMBER, parts[0]]
        return Value(Kind.COLLECTION, HOST, element=Value(Kind.COLLECTION, HOST, element=join(parts), items=tuple(parts)))
    if name in COLLECTION_BUILTINS:
        inner = evaluate(call.args[0].value) if call.args else UNKNOWN
        element = NUMBER if name == "range" else inner.element if inner.kind is Kind.COLLECTION else None
        return Value(Kind.COLLECTION, HOST, element=element)
    if name in ("getattr", "isinstance", "hasattr", "callable", "type", "id", "print", "super"):
        return BOOL if name in ("isinstance", "hasattr", "callable") else UNKNOWN
    return None
