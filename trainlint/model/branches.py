"""Branches the steps never take: `if mode == "cpu":` in a function that every caller off the error
path calls with another mode (a fallback kept for an out-of-memory handler), and the branch for None
of a parameter that every call, in any module, gives a tensor or an object."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.facts import Call, Function, Site
from trainlint.model.torchnames import literal_string

if TYPE_CHECKING:
    from trainlint.model.training import TrainingModel


def _memo(question: str):  # type: ignore[no-untyped-def]
    """Answers per (function, parameter), kept on the model: every site under a branch asks again."""

    def wrap(answer):  # type: ignore[no-untyped-def]
        def asked(model: "TrainingModel", fn: Function, name: str):  # type: ignore[no-untyped-def]
            memo = model.__dict__.setdefault("_branch_answers", {})
            key = (question, id(fn), name)
            if key not in memo:
                memo[key] = answer(model, fn, name)
            return memo[key]

        return asked

    return wrap


def branch_not_taken(model: "TrainingModel", site: Site) -> bool:
    """Inside `if mode == "cpu":` of a function whose calls (off the error path) all pass another
    value (`get_assignments(...)` on every step, `get_assignments(..., "cpu")` in an OOM handler),
    or leave a default that is another: a branch the steps never take."""
    fn = site.function
    if fn is None or fn.parent is not None:
        return False
    for depth, node in zip(site.gate_depths, site.gate_nodes):
        if depth != -1 or node is None:
            continue
        test = node.test
        if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1):
            continue
        compared = test.comparisons[0]
        against = _literal(model, compared.comparator)
        if not isinstance(compared.operator, (cst.Equal, cst.NotEqual)) or against is None:
            continue
        if not _unchanged(model, fn, test.left.value, site):
            continue
        passed = _passed_literals(model, fn, test.left.value)
        if passed and all((value == against) != isinstance(compared.operator, cst.Equal) for value in passed):
            return True
    # `if x_mask is not None: ... else: <site>`, with every call passing a tensor for `x_mask`
    branches = [(n, True) for d, n in zip(site.gate_depths, site.gate_nodes) if d == -1 and n is not None]
    return any(
        _none_branch(model, fn, node.test, body) or _flag_branch(model, fn, node.test, body)
        for node, body in (*branches, *((n, False) for n in site.else_of))
    )


def _flag_branch(model: "TrainingModel", fn: Function, test: cst.BaseExpression, body: bool) -> bool:
    """The branch of `if reverse:` / `if not reverse:` (or the rest after `if not reverse: ...
    return`) for a value of a parameter that no call gives: every call of `fn` in this module, and
    every call other modules make every step, passes the other literal (or leaves its default)."""
    negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
    name = test.expression if negated else test  # type: ignore[attr-defined]
    if not isinstance(name, cst.Name) or name.value not in fn.params or model._is_hook(fn):
        return False
    runs_when = str(body != negated)  # "True": the branch runs when the flag is true
    passed = _passed_flags(model, fn, name.value)
    return bool(passed) and all(v in ("True", "False") and v != runs_when for v in passed)


@_memo("flags")
def _passed_flags(model: "TrainingModel", fn: Function, name: str) -> list[str]:
    """What every call of `fn` in this module, and every step call from other modules, passes for
    flag `name`: "True", "False" or "?"; empty when another module calls it and says nothing."""
    default = fn.defaults.get(name)
    fallback = default.value if isinstance(default, cst.Name) and default.value in ("True", "False") else "?"
    external = model.passed_facts(fn, name) if model.project is not None else None
    if fn in getattr(model, "_external_chains", {}) and external is None:
        return []
    passed = [fallback if f == "default" else f for f in external or ()]
    for call in (c for c in (*model.calls_of(fn), *model.method_calls_of(fn)) if not c.site.in_except):
        if any(a.star for a in call.node.args):
            return ["?"]
        arg = _argument(fn, call, name)
        passed.append(fallback if arg is None else arg.value if isinstance(arg, cst.Name) and arg.value in ("True", "False") else "?")
    return passed


def _none_branch(model: "TrainingModel", fn: Function, test: cst.BaseExpression, body: bool) -> bool:
    """Whether the branch (`body` or else) of `if <param> is [not] None:` (or `== None`) is the one for None, and every
    call of `fn`, in this module and every step call from other modules, passes something surely not None."""
    if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1):
        return False
    compared = test.comparisons[0]
    if not (isinstance(compared.comparator, cst.Name) and compared.comparator.value == "None"):
        return False
    # (`if max_len == None:` tests the same, for the values a caller passes: numbers, tensors, objects)
    if not isinstance(compared.operator, (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual)):
        return False
    if isinstance(compared.operator, (cst.Is, cst.Equal)) != body:  # the branch for a value: `else` of `if batch_size is None:`
        return _always_none(model, fn, test.left.value)
    return _never_none(model, fn, test.left.value)


@_memo("always none")
def _always_none(model: "TrainingModel", fn: Function, name: str) -> bool:
    """Whether parameter `name`, None by default and never rebound, is left to its default by every step
    call from other modules (`model(text)`, while only the prediction after training passes `batch_size`)
    and by every call in this module."""
    default = fn.defaults.get(name)
    if not (isinstance(default, cst.Name) and default.value == "None") or model._is_hook(fn):
        return False
    external = model.passed_facts(fn, name) if model.project is not None else None
    if not external or any(f != "default" for f in external) or any(name in a.targets for a in model.assigns if a.site.function is fn):
        return False  # (only what other modules' steps pass is known: none, no answer)
    return all(not any(a.star for a in c.node.args) and _argument(fn, c, name) is None for c in (*model.calls_of(fn), *model.method_calls_of(fn)))


@_memo("never none")
def _never_none(model: "TrainingModel", fn: Function, name: str) -> bool:
    from trainlint.model.lattice import Kind

    if name not in fn.params or model._is_hook(fn):
        return False
    default = fn.defaults.get(name)
    given_default = default is not None and not (isinstance(default, cst.Name) and default.value == "None")
    external = model.passed_facts(fn, name) if model.project is not None else None
    if fn in getattr(model, "_external_chains", {}) and external is None:
        return False  # called from other modules, which say nothing of it
    if external is not None and not all(f in ("tensor", "host", "device", "obs", "value", "True", "False") or (f == "default" and given_default) for f in external):
        return False
    calls = [c for c in (*model.calls_of(fn), *model.method_calls_of(fn)) if not c.site.in_except]
    if not calls and external is None:
        return False
    for call in calls:
        if any(a.star for a in call.node.args):
            return False
        arg = _argument(fn, call, name)
        if arg is None:
            if not given_default:
                return False
            continue
        if model.value(arg, call.site).kind not in (Kind.TENSOR, Kind.MODULE, Kind.OBJECT, Kind.NUMBER, Kind.STRING, Kind.COLLECTION, Kind.BOOL):
            return False
    return True
def _literal(model: "TrainingModel", expr: cst.BaseExpression | None) -> str | float | None:
    """A string, a number (`2.0`, `-1`) or infinity (`inf` from math, NumPy or torch) written there."""
    text = literal_string(expr)
    if text is not None or expr is None:
        return text
    sign = 1.0
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        sign, expr = -1.0, expr.expression
    if isinstance(expr, (cst.Integer, cst.Float)):
        return sign * float(expr.evaluated_value)
    if model.imports.resolve(expr) in ("math.inf", "numpy.inf", "torch.inf", "torch._six.inf"):
        return sign * float("inf")
    return None


def _unchanged(model: "TrainingModel", fn: Function, name: str, site: Site) -> bool:
    """Parameter `name` still holds what the call gave at `site`: never rebound before it, but to
    its own conversion (`norm_type = float(norm_type)`)."""
    for assign in model.reaching(fn, name, site):
        value = assign.value
        if assign.op is not None or not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name):
            return False
        if value.func.value not in ("float", "int", "str") or len(value.args) != 1:
            return False
        if not (isinstance(value.args[0].value, cst.Name) and value.args[0].value.value == name):
            return False
    return True


def _passed_literals(model: "TrainingModel", fn: Function, name: str) -> set[str | float] | None:
    """The strings or numbers every call of `fn` off the error path passes for parameter `name` (its
    default where a call passes none); None when one is not a literal or others may call it."""
    if name not in fn.params or (model.project is not None and fn in getattr(model, "_external_chains", {})) or model._is_hook(fn):
        return None
    calls = [c for c in model.calls_of(fn) if not c.site.in_except]
    if not calls:
        return None
    default = _literal(model, fn.defaults[name]) if name in fn.defaults else None
    found: set[str | float] = set()
    for call in calls:
        if any(a.star for a in call.node.args):
            return None
        arg = _argument(fn, call, name)
        value = _literal(model, arg) if arg is not None else default
        if value is None:
            return None
        found.add(value)
    return found


def _argument(fn: Function, call: "Call", name: str) -> cst.BaseExpression | None:
    """What a call of `fn` passes for parameter `name`, by name or by position (None: its default)."""
    named = next((a.value for a in call.node.args if a.keyword is not None and a.keyword.value == name), None)
    if named is not None:
        return named
    positional = fn.explicit_params
    args = [a for a in call.node.args if a.keyword is None]
    index = positional.index(name) if name in positional else len(args)
    return args[index].value if index < len(args) else None
