"""What a helper computes from the tensors it is given, read with Python's own parser for the modules
that call it (`FunctionSummary.returns_computed`; applied at each call by `model.arguments.computed_value`).

`accuracy(output, target)` of the ImageNet example returns a list its loop fills with
`correct_k.mul_(100.0 / batch_size)`, computed by tensor methods from `output` and `target`: a call
given the device's outputs and labels returns device tensors, and `prec1.data[0]` reads the device.
Such helpers sit in modules with no training code (`utils.py`), which are only outlined; a name's every
binding in the function counts (no flow), and anything but tensor methods, torch's functions (not its
factories), subscripts and arithmetic on the parameters (another call, a host read, a loop's element)
makes the function's result unknown. A function whose every `return` gives what NumPy's functions
compute (`np.log10(r) * 10.0`) returns host data, whatever it was given: NumPy cannot read a device tensor.
"""

from __future__ import annotations

import ast

from trainlint.model.value_calls import HOST_METHODS, NUMBER_METHODS, TENSOR_METHODS
from trainlint.project.outline_effects import Function, bound_targets, explicit_parameters, own_statements

MAX_STEPS = 64  # expressions and bindings followed back from the function's returns
LIST, TENSOR, HOST_DATA = "list", "tensor", "host"
_OPEN = "\0"  # (a name met again while it is followed, `pred = pred.t()`: what its other bindings say)
_NOT_COMPUTING = NUMBER_METHODS | HOST_METHODS | {"cpu", "to", "cuda"}
# torch's functions whose result is not where their arguments are: factories, conversions, predicates
_NOT_FROM_ARGUMENTS = frozenset(
    """tensor as_tensor from_numpy zeros ones full empty arange linspace logspace eye rand randn randint randperm
    normal is_tensor is_floating_point numel equal allclose save load manual_seed device no_grad""".split()
)


def returned_computation(fn: Function, method: bool, torch_names: frozenset[str] = frozenset(), numpy_names: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """("tensor", "0 output", ...) when every `return` of `fn` gives a tensor that tensor methods, torch's
    functions (through `torch_names`, the module's names for torch and its modules: `F` for
    `torch.nn.functional`) and arithmetic compute from those parameters; ("list", ...) when every one
    gives a list the function fills only by `append`s of such tensors; ("host",) when every one gives
    what NumPy (`numpy_names`) computes; () otherwise."""
    returns: list[ast.expr] = []
    bindings: dict[str, list[ast.expr | None]] = {}  # name -> each value bound to it (None: not an expression's)
    appended: dict[str, list[ast.expr | None]] = {}  # name -> what `name.append(x)` adds (None: another change)
    for node in own_statements(fn):
        if isinstance(node, ast.Return):
            if node.value is None:
                return ()
            returns.append(node.value)
        _bind(node, bindings)
        _note_changes(node, appended)
    if not returns:
        return ()
    if numpy_names and all(_numpy_computed(value, {**_number_defaults(fn), **bindings}, numpy_names, set()) for value in returns):
        return (HOST_DATA,)
    params = explicit_parameters(fn, method)
    trace = _Trace(bindings, set(params), [0], torch_names)
    shapes: set[str] = set()
    found: set[str] = set()
    for value in returns:
        collected = _collected(value, bindings, appended, trace)
        got = (collected if collected is not None else trace.computed(value)) - {_OPEN}
        if not got:
            return ()
        shapes.add(LIST if collected is not None else TENSOR)
        found |= got
    if len(shapes) != 1 or not found <= set(params):
        return ()
    return (shapes.pop(), *(f"{params.index(p)} {p}" for p in sorted(found)))


def _bind(node: ast.AST, bindings: dict[str, list[ast.expr | None]]) -> None:
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name):
            bindings.setdefault(target.id, []).append(value)
            return
        if isinstance(target, ast.Tuple) and _returns_pair(value):  # `_, pred = output.topk(k, 1)`
            for element in target.elts:
                if isinstance(element, ast.Name):
                    bindings.setdefault(element.id, []).append(value)
            return
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        bindings.setdefault(node.target.id, []).append(ast.BinOp(node.target, node.op, node.value))
        return
    for target in bound_targets(node):  # (a loop's element, a `with`'s value, anything else: unknown)
        for name in ast.walk(target):
            if isinstance(name, ast.Name):
                bindings.setdefault(name.id, []).append(None)


def _note_changes(node: ast.AST, appended: dict[str, list[ast.expr | None]]) -> None:
    """`res.append(x)` statements, and any other method a statement calls on a name (`res.extend(...)`)."""
    if not isinstance(node, ast.Expr) or not isinstance(node.value, ast.Call):
        return
    call = node.value
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
        single = call.func.attr == "append" and len(call.args) == 1 and not call.keywords
        appended.setdefault(call.func.value.id, []).append(call.args[0] if single else None)


def _returns_pair(value: ast.expr) -> bool:
    """`x.topk(k, 1)`, `x.sort(1)`, `x.max(1)`: a tensor method giving (values, indices), both tensors."""
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("topk", "sort", "max", "min", "median", "kthvalue")


def _collected(value: ast.expr, bindings: dict[str, list[ast.expr | None]], appended: dict[str, list[ast.expr | None]], trace: "_Trace") -> set[str] | None:
    """The parameters its elements are computed from, when `value` names a list bound only to `[]`
    and changed only by `append`s of computed tensors; None when it is no such list."""
    if not isinstance(value, ast.Name):
        return None
    bound = bindings.get(value.id, [])
    if not bound or not all(isinstance(b, ast.List) and not b.elts for b in bound):
        return None
    found: set[str] = set()
    for element in appended.get(value.id, []):
        got = trace.computed(element) - {_OPEN} if element is not None else set()
        if not got:
            return None
        found |= got
    return found or None


class _Trace:
    """Follows an expression back through the function's bindings to the parameters it is computed from."""

    def __init__(self, bindings: dict[str, list[ast.expr | None]], params: set[str], steps: list[int], torch_names: frozenset[str]) -> None:
        self.bindings, self.params, self.steps, self.torch_names = bindings, params, steps, torch_names
        self.open: set[str] = set()

    def computed(self, expr: ast.expr) -> set[str]:
        """The parameters `expr` is computed from (empty: it is not a computation of them)."""
        self.steps[0] += 1
        if self.steps[0] > MAX_STEPS:
            return set()
        if isinstance(expr, ast.Name):
            return self._name(expr.id)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and _root(expr.func) in self.torch_names:
            if expr.func.attr in _NOT_FROM_ARGUMENTS:  # (`F.mse_loss(a, b)`, `torch.sum(x ** 2)`: where a, x are)
                return set()
            found = set()
            for arg in expr.args:
                found |= self.computed(arg)
            return found
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            method = expr.func.attr
            if method in _NOT_COMPUTING or not (method in TENSOR_METHODS or (method.endswith("_") and not method.startswith("_"))):
                return set()
            found = self.computed(expr.func.value)
            if found:  # (`pred.eq(target.view(1, -1))`: the operands' parameters too; `np.where(x)` is NumPy's)
                for arg in expr.args:
                    found |= self.computed(arg)
            return found
        if isinstance(expr, ast.Attribute) and expr.attr in ("data", "T"):
            return self.computed(expr.value)
        if isinstance(expr, ast.Subscript):
            return self.computed(expr.value)
        if isinstance(expr, ast.BinOp):
            return self.computed(expr.left) | self.computed(expr.right)
        if isinstance(expr, ast.UnaryOp):
            return self.computed(expr.operand)
        return set()

    def _name(self, name: str) -> set[str]:
        bound = self.bindings.get(name, [])
        found = {name} if name in self.params else set()
        if name in self.open:
            return found | {_OPEN}
        if not bound:
            return found
        self.open.add(name)
        try:
            for value in bound:
                got = self.computed(value) if value is not None else set()
                if not got:
                    return set()
                found |= got
        finally:
            self.open.discard(name)
        return found


def _numpy_computed(expr: ast.expr | None, bindings: dict[str, list[ast.expr | None]], numpy_names: frozenset[str], open_names: set[str]) -> bool | None:
    """True when `expr` is NumPy's result (`np.log10(r)`, its methods, items and arithmetic with numbers),
    None for a number, False otherwise (a parameter, another call: what it is depends on the caller)."""
    if isinstance(expr, ast.Constant):
        return None if isinstance(expr.value, (int, float)) and not isinstance(expr.value, bool) else False
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and _root(expr.func) in numpy_names:
            return True
        return isinstance(expr.func, ast.Attribute) and _numpy_computed(expr.func.value, bindings, numpy_names, open_names) is True
    if isinstance(expr, ast.Subscript):
        return _numpy_computed(expr.value, bindings, numpy_names, open_names) is True
    if isinstance(expr, ast.UnaryOp):
        return _numpy_computed(expr.operand, bindings, numpy_names, open_names)
    if isinstance(expr, ast.BinOp):
        sides = [_numpy_computed(side, bindings, numpy_names, open_names) for side in (expr.left, expr.right)]
        return False if False in sides else True if True in sides else None
    if isinstance(expr, ast.Name) and expr.id not in open_names and expr.id in bindings:
        open_names.add(expr.id)  # (`x = np.log(x)`: each binding once)
        found = [_numpy_computed(value, bindings, numpy_names, open_names) for value in bindings[expr.id]]
        open_names.discard(expr.id)
        return False if not found or False in found else True if True in found else None
    return False


def _number_defaults(fn: Function) -> dict[str, list[ast.expr | None]]:
    """The parameters whose default is a number (`a=58.53`), bound to it: a caller gives them numbers."""
    args = fn.args
    pairs = [*zip(args.args[len(args.args) - len(args.defaults):], args.defaults), *zip(args.kwonlyargs, args.kw_defaults)]
    return {a.arg: [d] for a, d in pairs if isinstance(d, ast.Constant) and type(d.value) in (int, float)}


def _root(expr: ast.expr) -> str:
    """The name an attribute chain starts from (`torch` of `torch.nn.functional.softmax`)."""
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else ""


def numpy_modules(imported: dict[str, str], exports: dict[str, str]) -> frozenset[str]:
    """The names a module binds to NumPy and its modules (`np` of `import numpy as np`)."""
    return frozenset(name for name, full in (*imported.items(), *exports.items()) if full == "numpy" or full.startswith("numpy."))


def torch_modules(imported: dict[str, str], exports: dict[str, str]) -> frozenset[str]:
    """The names a module binds to torch and its modules (`torch`, `F` of `from torch.nn import functional as F`)."""
    return frozenset(name for name, full in (*imported.items(), *exports.items()) if full == "torch" or full.startswith("torch.nn.functional"))
