"""Tensors made from data, not constants: what a data loader cuts from the data it holds; and the
NumPy arrays a function builds from numbers alone, which are constants made on the host.

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


def bound_to_read_data(model: "ReachingDefinitions", value_of: "Callable[..., Value]", name: cst.Name, fn: "Function | None", at: "Site | None") -> bool:
    """A name bound only to what a function made of the data it read, or to a part of it (`states,
    rewards = memory.sample(n)`): the arrays a legacy constructor wraps (`torch.FloatTensor(states)`)."""
    bound = model.reaching(fn, name.value, at) if at is not None else []
    return bool(bound) and all(a.op is None and a.value is not None and read_data(model, value_of, a.value, fn, a.site) for a in bound)


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
    if value.kind is Kind.UNKNOWN or (element is not None and element.kind is Kind.UNKNOWN):
        return True
    # host arrays a method gives back from what its class stores (a replay buffer's `sample` returning
    # `np.array(x)` of the transitions `self.storage[i]` that its `push` appended): rows of stored data
    arrays = value.kind is Kind.HOST_ARRAY or (element is not None and element.kind is Kind.HOST_ARRAY)
    return arrays and _samples_stored_rows(model, expr)


def _samples_stored_rows(model: "ReachingDefinitions", expr: cst.Call) -> bool:
    """Whether every method of this module `expr` may call reads rows of a container its class fills
    in another method (`self.storage[i]`, with `self.storage.append(data)` in `push`)."""
    known = model.call_at(expr)  # type: ignore[attr-defined]
    callees = model.callees(known) if known is not None else ()  # type: ignore[attr-defined]
    return bool(callees) and all(_reads_stored_rows(model, f) for f in callees)


def _reads_stored_rows(model: "ReachingDefinitions", fn: "Function") -> bool:
    """`self.storage[i]` in a method, `self.storage` appended to (or, `stored_rows`, assigned into) by another method of its class."""
    if fn.class_name is None:
        return False
    filled = {
        c.receiver_text for c in model.calls  # type: ignore[attr-defined]
        if c.method in ("append", "extend", "insert") and (c.receiver_text or "").startswith("self.")
        and c.site.function is not None and c.site.function is not fn and c.site.function.class_name == fn.class_name
    }
    reads = [n for n in iter_nodes(fn.node) if isinstance(n, cst.Subscript)]
    return bool(filled & {dotted(n.value) for n in reads}) or any(stored_rows(model, n, fn) for n in reads)


def stored_rows(model: "ReachingDefinitions", expr: cst.BaseExpression, fn: "Function | None") -> bool:
    """`self.state[ind]` in a method of a class another method of which stores into `self.state[...]`
    (a replay buffer's arrays, `self.state[self.ptr] = state` in its `add`): rows of what was stored."""
    if not (isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Attribute) and dotted(expr.value.value) == "self"):
        return False
    if fn is None or fn.class_name is None:
        return False
    prefix = f"self.{expr.value.attr.value}["
    return any(
        a.site.function is not None and a.site.function is not fn and a.site.function.class_name == fn.class_name
        and any(t.startswith(prefix) for t in a.targets)
        for a in model.assigns  # type: ignore[attr-defined]
    )


NUMPY_FACTORIES = frozenset({"zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "empty", "empty_like", "arange", "eye", "linspace"})
# draws from a count or a shape (`np.random.permutation(n)`; `permutation(array)` shuffles data)
NUMPY_DRAWS = frozenset({"rand", "randn", "randint", "random", "random_sample", "uniform", "normal", "permutation", "choice"})
# functions whose result is built from numbers when each array given is (`np.vstack((x.ravel(), y.ravel()))`)
NUMPY_COMBINING = frozenset("vstack hstack stack concatenate column_stack dstack meshgrid".split())
# functions of one array, the rest of whose arguments are numbers (`np.repeat(labels, n_query)`)
NUMPY_ELEMENTWISE = frozenset("floor ceil round abs exp log sqrt clip tile repeat transpose cumsum broadcast_to reshape expand_dims squeeze".split())
MAX_ARRAY_STEPS = 12  # expressions and names followed back from the array a tensor wraps
ARRAY_METHODS = frozenset({"astype", "copy", "reshape", "ravel", "flatten", "transpose", "squeeze"})


def numpy_built(
    model: "ReachingDefinitions", resolve: "Callable[[cst.BaseExpression], str | None]", value_of: "Callable[..., Value]",
    expr: cst.BaseExpression, fn: "Function | None", at: "Site | None", depth: int = 0,
) -> bool:
    """An array made here by NumPy from numbers (`np.zeros(...)`, `np.arange(n) * stride`, a draw
    `np.random.permutation(n)` or `np.random.choice(np.arange(n), k)`), possibly cast, reshaped, sliced
    or indexed (`perm[i:i + batch_size]`), or combined with others of its kind
    (`np.vstack((sx.ravel(), sy.ravel())).transpose()` of a `np.meshgrid` of two such), or a name
    bound only to such: nothing in it came from data. `resolve` gives a call's qualified name."""

    def built(e: cst.BaseExpression, f: "Function | None" = fn, site: "Site | None" = at) -> bool:
        return numpy_built(model, resolve, value_of, e, f, site, depth + 1)

    if depth > MAX_ARRAY_STEPS:
        return False
    if isinstance(expr, cst.BinaryOperation):
        return built(expr.left) or built(expr.right)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ARRAY_METHODS:
        if not (isinstance(expr.func.value, cst.Name) and expr.func.value.value in ("np", "numpy")):
            return built(expr.func.value)
    if isinstance(expr, cst.Attribute) and expr.attr.value == "T":
        return built(expr.value)
    if isinstance(expr, cst.Subscript):  # `perm[i:i + batch_size]`, `np.arange(n)[None, :]`: values of the array
        return built(expr.value)
    if isinstance(expr, cst.Call):
        name = (resolve(expr.func) or "").removeprefix("numpy.")
        args = [a.value for a in expr.args if a.keyword is None and not a.star]
        if name in NUMPY_FACTORIES or (name.startswith("random.") and name[7:] in NUMPY_DRAWS - {"permutation", "choice"}):
            return True
        if name in ("random.permutation", "random.choice"):  # of a count, not of an array (which shuffles data)
            return bool(args) and (_a_count(args[0]) or value_of(args[0], fn, at).kind is Kind.NUMBER or built(args[0]))
        if name in ("array", "asarray") and args and (_numbers(args[0], resolve) or value_of(args[0], fn, at).kind is Kind.NUMBER):
            return True  # `np.array([1, 0, 0, 0, 1, 0])`, `np.array(rot_label)` of a number the code chose
        if name in NUMPY_COMBINING and args:
            return all(built(e.value) for a in args for e in (a.elements if isinstance(a, (cst.Tuple, cst.List)) else [cst.Element(a)]))
        if name in NUMPY_ELEMENTWISE and args:
            return built(args[0])
        # `range(n_way)` handed to NumPy (`np.repeat(range(n_way), n_query)`): numbers, whatever its bounds are
        return name == "builtins.range" or (not name and isinstance(expr.func, cst.Name) and expr.func.value == "range")
    if isinstance(expr, cst.Name):
        assigns = model.reaching(fn, expr.value, at)
        return bool(assigns) and all(a.op is None and built(a.value, a.site.function, a.site) for a in assigns)
    return False


NUMBER_CONSTANTS = frozenset({"numpy.pi", "numpy.e", "math.pi", "math.e", "math.tau"})


def _numbers(expr: cst.BaseExpression, resolve: "Callable[[cst.BaseExpression], str | None]") -> bool:
    """A list or tuple written of numbers (`[1, 0, -1]`, `[[2. * np.pi]]`), nested or not: a constant."""
    if isinstance(expr, (cst.List, cst.Tuple)):
        return bool(expr.elements) and all(not isinstance(e, cst.StarredElement) and _numbers(e.value, resolve) for e in expr.elements)
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return isinstance(expr.operator, (cst.Minus, cst.Plus)) and _numbers(expr.expression, resolve)
    if isinstance(expr, cst.BinaryOperation):
        return _numbers(expr.left, resolve) and _numbers(expr.right, resolve)
    return isinstance(expr, cst.Attribute) and resolve(expr) in NUMBER_CONSTANTS


def _a_count(expr: cst.BaseExpression) -> bool:
    """`t.size(0)`, `t.numel()`, `len(x)`, `t.shape[0]`: a number, whatever `t` is."""
    if isinstance(expr, cst.Call):
        func = expr.func
        return (isinstance(func, cst.Attribute) and func.attr.value in ("size", "numel")) or (isinstance(func, cst.Name) and func.value == "len")
    return isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "shape"
