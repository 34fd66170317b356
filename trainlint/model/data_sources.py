"""Tensors made from data, not constants: what a data loader cuts from the data it holds.

`torch.tensor(self.tokens[pos:pos + n].astype(np.int32))` builds a batch from a slice of a stored
array at a position the code computes: data, copied to the device because it comes from the host,
as a DataLoader's batch is (TL406 is about constants that could be built on the device)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.lattice import Kind
from trainlint.model.names import dotted
from trainlint.model.walk import iter_nodes

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainlint.model.facts import Function, Site
    from trainlint.model.lattice import Value
    from trainlint.model.reaching import ReachingDefinitions

# conversions that keep what was read: methods of it (`buf.astype(np.int32)`), functions of it (`np.array(buf)`)
_METHODS = frozenset({"astype", "copy", "view", "reshape", "numpy", "long", "int"})
_FUNCTIONS = frozenset({"array", "asarray", "ascontiguousarray"})


def drawn(model: "ReachingDefinitions", expr: cst.BaseExpression, fn: "Function | None", at: "Site | None", depth: int = 0) -> bool:
    """Whether `expr` is a slice or element of a stored array at a computed position (through
    conversions, and names bound only to such reads in the same function)."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        name = expr.func.attr.value
        if name in _METHODS:
            return drawn(model, expr.func.value, fn, at, depth)
        if name in _FUNCTIONS and expr.args:
            return drawn(model, expr.args[0].value, fn, at, depth)
    if isinstance(expr, cst.Subscript):
        # the position is computed (a name), and what is cut is held (an attribute or a name), not built here
        position = any(
            isinstance(n, cst.Attribute) or (isinstance(n, cst.Name) and n.value not in ("None", "True", "False"))
            for e in expr.slice for n in iter_nodes(e)
        )
        return position and isinstance(expr.value, (cst.Attribute, cst.Name))
    if isinstance(expr, cst.Name) and at is not None and depth < 2:
        bound = model.reaching(fn, expr.value, at)
        return bool(bound) and all(a.value is not None and drawn(model, a.value, fn, a.site, depth + 1) for a in bound)
    return False


def read_data(model: "ReachingDefinitions", value_of: "Callable[..., Value]", expr: cst.BaseExpression, fn: "Function | None", at: "Site | None") -> bool:
    """`torch.tensor(encode(text))`: what a function made of the data it read (a call, not torch's,
    NumPy's or a builtin's, whose result the value model does not know, or a list of such), not
    numbers known here (`torch.tensor([0.5, 0.5])`, `torch.tensor(pad)`)."""
    if not isinstance(expr, cst.Call):
        return False
    qual = model.imports.resolve(expr.func) or ""  # type: ignore[attr-defined]
    if qual.startswith(("torch.", "numpy.", "math.")) or dotted(expr.func) in ("list", "tuple", "range", "sorted", "len"):
        return False
    value = value_of(expr, fn, at)
    element = value.element if value.kind is Kind.COLLECTION else None
    return value.kind is Kind.UNKNOWN or (element is not None and element.kind is Kind.UNKNOWN)
