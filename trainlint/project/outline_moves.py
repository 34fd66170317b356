"""Moving helpers read from Python's own tree, for the outline of a module with no training code
(`model/moving_helpers.py` reads those of the modules analysed): `def cuda(xs): return [x.cuda()
for x in xs]` in a `utils.py`, `def to_var(x): if torch.cuda.is_available(): x = x.cuda(); return
Variable(x)`. Their summaries say so with the fact "moves 0 xs"."""

from __future__ import annotations

import ast

from trainlint.model.moving_helpers import MOVE_METHODS, WRAPPERS
from trainlint.model.parameter_facts import MOVES, fact
from trainlint.project.outline_effects import explicit_parameters, own_statements_from

Function = ast.FunctionDef | ast.AsyncFunctionDef


def moves_fact(fn: Function, method: bool) -> tuple[str, ...]:
    """("moves 0 x",) when every `return` of `fn` gives back its parameter `x` moved to the device, or
    as it came, at least one moving it (a name rebound only to a move of itself counts as moved)."""
    positional = explicit_parameters(fn, method)
    params = positional + [fn.args.vararg.arg] if fn.args.vararg is not None else positional
    statements = [n for s in fn.body for n in own_statements_from(s)]
    returns = [n.value for n in statements if isinstance(n, ast.Return)]
    if not params or not returns or any(r is None for r in returns):
        return ()
    rebound: dict[str, bool] = {}  # name -> whether every rebinding moves it
    for node in statements:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            given = _given(node.value, params)
            name = node.targets[0].id
            rebound[name] = rebound.get(name, True) and given == (name, True)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.With)):
            return ()  # (other bindings: not read here)
    found = [_given(r, params, rebound) for r in returns]  # type: ignore[arg-type]
    names = {f[0] for f in found if f is not None}
    if None in found or len(names) != 1 or not any(f[1] for f in found if f is not None):
        return ()
    name = names.pop()
    star = "*" if name not in positional else ""  # (`def to_cuda(*args)`: every positional argument from there on)
    return (fact(MOVES, f"{params.index(name)} {star}{name}"),)


def _given(expr: ast.expr, params: list[str], rebound: dict[str, bool] | None = None) -> tuple[str, bool] | None:
    """The parameter `expr` gives back, and whether moved."""
    if isinstance(expr, ast.Call) and len(expr.args) == 1 and not expr.keywords and ast.unparse(expr.func) in WRAPPERS:
        return _given(expr.args[0], params, rebound)  # `Variable(x)`
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in MOVE_METHODS:
        if expr.func.attr == "to" and (not expr.args or (isinstance(expr.args[0], ast.Constant) and expr.args[0].value == "cpu")):
            return None
        inner = _given(expr.func.value, params, rebound)
        return (inner[0], True) if inner is not None else None
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)) and len(expr.generators) == 1:
        loop = expr.generators[0]
        element = _unless_none(expr.elt)  # (`[None if x is None else x.cuda() for x in args]`)
        if loop.ifs or not isinstance(loop.target, ast.Name) or not isinstance(loop.iter, ast.Name) or loop.iter.id not in params:
            return None
        moved = isinstance(element, ast.Call) and isinstance(element.func, ast.Attribute) and element.func.attr in MOVE_METHODS
        if not moved or not isinstance(element.func.value, ast.Name) or element.func.value.id != loop.target.id:  # type: ignore[union-attr]
            return None
        return loop.iter.id, True
    if isinstance(expr, ast.Name) and expr.id in params:
        if rebound is not None and expr.id in rebound:
            return (expr.id, True) if rebound[expr.id] else None
        return expr.id, False
    return None


def _unless_none(expr: ast.expr) -> ast.expr:
    """`x.cuda()` of `None if x is None else x.cuda()` (or of `x.cuda() if x is not None else None`)."""
    if isinstance(expr, ast.IfExp):
        if isinstance(expr.body, ast.Constant) and expr.body.value is None:
            return expr.orelse
        if isinstance(expr.orelse, ast.Constant) and expr.orelse.value is None:
            return expr.body
    return expr
