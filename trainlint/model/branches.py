"""Branches the steps never take: `if mode == "cpu":` in a function that every caller off the error
path calls with another mode (a fallback kept for an out-of-memory handler), and the branch for None
of a parameter that every call, in any module, gives a tensor or an object. And branches taken on
some steps only: `if storer is not None:` where `storer` is None on all steps but a few.

A value handed on only on logging steps gates what tests for it: a loss's helper returns the
caller's record (`storer`) when `self.n_train_steps % self.record_loss_every == 1` and None
otherwise, and each loss term appends `loss.item()` to it under `if storer is not None:`. A plain
presence test is no gate (`if log_writer is not None:` holds on every step or on none); it is one
when every value that reaches the name is None but under a periodic test of DESIGN.md.

Nor does a branch on what an object keeps from a constructor parameter that no construction gives:
taming's `VectorQuantizer2(..., remap=None)` keeps `self.remap = remap`, and where the project builds
it by name and never passes `remap`, `if self.remap is not None:` runs in no object; YOLO's
`ComputeLoss(model)` leaves `use_dfl=True`, so the `else` of `if self.use_dfl:` never runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.facts import Assign, Call, Function, Site
from trainlint.model.gates import is_gate_test
from trainlint.model.names import dotted
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
        _none_branch(model, fn, node.test, body) or _flag_branch(model, fn, node.test, body) or _kept_default_branch(model, fn, node.test, body)
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
    external = model.passed_facts(fn, name, receivers=True) if model.project is not None else None
    if fn in getattr(model, "_external_chains", {}) and external is None:
        return []
    passed = [fallback if f == "default" else f for f in external or ()]
    for call in (c for c in (*model.calls_of(fn), *model.method_calls_of(fn)) if not c.site.in_except):
        if any(a.star for a in call.node.args):
            return ["?"]
        arg = passed_argument(fn, call, name)
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
    external = model.passed_facts(fn, name, receivers=True) if model.project is not None else None
    if not external or any(f != "default" for f in external) or any(name in a.targets for a in model.assigns if a.site.function is fn):
        return False  # (only what other modules' steps pass is known: none, no answer)
    return all(not any(a.star for a in c.node.args) and passed_argument(fn, c, name) is None for c in (*model.calls_of(fn), *model.method_calls_of(fn)))


@_memo("never none")
def _never_none(model: "TrainingModel", fn: Function, name: str) -> bool:
    from trainlint.model.lattice import Kind

    if name not in fn.params or model._is_hook(fn):
        return False
    default = fn.defaults.get(name)
    given_default = default is not None and not (isinstance(default, cst.Name) and default.value == "None")
    external = model.passed_facts(fn, name, receivers=True) if model.project is not None else None
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
        arg = passed_argument(fn, call, name)
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
        arg = passed_argument(fn, call, name)
        value = _literal(model, arg) if arg is not None else default
        if value is None:
            return None
        found.add(value)
    return found


def passed_argument(fn: Function, call: "Call", name: str) -> cst.BaseExpression | None:
    """What a call of `fn` passes for parameter `name`, by name or by position (None: its default)."""
    named = next((a.value for a in call.node.args if a.keyword is not None and a.keyword.value == name), None)
    if named is not None:
        return named
    positional = fn.explicit_params
    args = [a for a in call.node.args if a.keyword is None]
    index = positional.index(name) if name in positional else len(args)
    return args[index].value if index < len(args) else None


def _after_unpacked(fn: Function, call: "Call", name: str) -> cst.BaseExpression | None | bool:
    """What `f(*pair, storer)` passes for a trailing parameter: the positional arguments after the
    one unpacked fill the last parameters (as they do when it unpacks to the ones before); None:
    its default; False: not known (an unpacked mapping, or the parameter not among the last)."""
    args = call.node.args
    if any(a.star == "**" for a in args):
        return False
    named = next((a.value for a in args if a.keyword is not None and a.keyword.value == name), None)
    if named is not None:
        return named
    positional = [a for a in args if a.keyword is None]
    last_star = max(i for i, a in enumerate(positional) if a.star)
    after = positional[last_star + 1 :]
    params = fn.explicit_params
    if name not in params or isinstance(fn.node.params.star_arg, cst.Param):  # (`*args` may take them)
        return False
    from_end = len(params) - params.index(name)
    return after[-from_end].value if from_end <= len(after) else False


# what a value is, for a presence test: None, given under a gate, given on some steps only, or always
NONE, GATED, SOMETIMES, ALWAYS = "none", "gated", "sometimes", "always"
MAX_DEPTH = 6  # calls and parameters followed from a test to the values that reach it


def presence_gate(model: "TrainingModel", site: Site) -> cst.If | None:
    """The `if x is not None:` (or `if x:`, or the rest after `if x is None: return`) around `site`
    whose `x` is None on all steps but some, or None."""
    fn = site.function
    if fn is None:
        return None
    tests = [(n, True) for d, n in zip(site.gate_depths, site.gate_nodes) if d == -1 and n is not None]
    tests += [(n, False) for n in site.else_of]
    for node, body in tests:
        name = _tested_for_presence(node.test, body)
        if name is not None and _name_kind(model, fn, name, _test_site(model, node), 0) == SOMETIMES:
            return node
    return None


def _tested_for_presence(test: cst.BaseExpression, body: bool) -> str | None:
    """The name whose being given runs the branch: `x is not None` or `x` (its body), `x is None`
    (its else, or the rest after its early exit); a conjunct of `and` in a body."""
    if body and isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _tested_for_presence(test.left, body) or _tested_for_presence(test.right, body)
    if body and isinstance(test, cst.Name) and test.value not in ("True", "False", "None"):
        return test.value
    if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1):
        return None
    compared = test.comparisons[0]
    if not (isinstance(compared.comparator, cst.Name) and compared.comparator.value == "None"):
        return None
    given = isinstance(compared.operator, (cst.IsNot, cst.NotEqual))
    return test.left.value if given == body and isinstance(compared.operator, (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual)) else None


def _test_site(model: "TrainingModel", node: cst.If) -> Site | None:
    sites = model.__dict__.get("_presence_test_sites")
    if sites is None:
        sites = model.__dict__["_presence_test_sites"] = {id(c.node): c.site for c in model.conditions if c.kind == "if"}
    return sites.get(id(node.test))


def _name_kind(model: "TrainingModel", fn: Function, name: str, site: Site | None, depth: int) -> str:
    """What `name` holds at `site` in `fn`: the join of the values that reach it (a parameter's: what
    every call passes)."""
    if site is None or depth > MAX_DEPTH:
        return ALWAYS
    memo = model.__dict__.setdefault("_presence_kinds", {})
    key = (id(fn), name, id(site.statement))
    if key in memo:
        return memo[key]
    memo[key] = ALWAYS  # (a cycle through calls or parameters gives nothing)
    assigns = model.reaching(fn, name, site)
    kinds = [_assign_kind(model, a, depth) for a in assigns]
    if name in fn.params and not _hidden(assigns, site):
        kinds.append(_parameter_kind(model, fn, name, depth))
    memo[key] = kind = _join(kinds)
    return kind


def _join(kinds: list[str]) -> str:
    if not kinds or ALWAYS in kinds:
        return ALWAYS
    return SOMETIMES if GATED in kinds or SOMETIMES in kinds else NONE


def _gated(model: "TrainingModel", site: Site) -> bool:
    """Whether a statement sits in the body of a periodic test of its own function."""
    return any(
        depth >= 0 and node is not None and is_gate_test(node.test, set(), model.settings.gate_names)
        for depth, node in zip(site.gate_depths, site.gate_nodes)
    )


def _assign_kind(model: "TrainingModel", assign: Assign, depth: int) -> str:
    if assign.op is not None or len(assign.targets) != 1:
        return ALWAYS
    if isinstance(assign.value, cst.Name) and assign.value.value in ("True", "False"):
        return ALWAYS  # a flag, never None: `struc_flag = True` at an epoch's start holds on its later steps
    if _gated(model, assign.site):
        return GATED
    return _value_kind(model, assign.value, assign.site, depth)


def _value_kind(model: "TrainingModel", expr: cst.BaseExpression, site: Site, depth: int) -> str:
    """`None`; `x if <periodic test> else None`; a name or a call of a project function whose value
    is one of these on all steps but some; else always given."""
    if isinstance(expr, cst.Name) and expr.value == "None":
        return NONE
    if isinstance(expr, cst.IfExp):
        if isinstance(expr.orelse, cst.Name) and expr.orelse.value == "None" and is_gate_test(expr.test, set(), model.settings.gate_names):
            return SOMETIMES
        return ALWAYS
    if isinstance(expr, cst.Name) and site.function is not None:
        return _name_kind(model, site.function, expr.value, site, depth + 1)
    if isinstance(expr, cst.Call):
        call = model.call_at(expr)
        callees = model.callees(call) if call is not None else ()
        if not callees:
            return ALWAYS
        return _join([_returns_kind(model, callee, depth + 1) for callee in callees])
    return ALWAYS


def _returns_kind(model: "TrainingModel", fn: Function, depth: int) -> str:
    """The join of what a function returns (`return storer` of a name given under a periodic test)."""
    if not fn.return_facts:
        return ALWAYS
    kinds = [GATED if _gated(model, r.site) else _value_kind(model, r.value, r.site, depth) for r in fn.return_facts]
    return _join(kinds)


def _hidden(assigns: list[Assign], use: Site) -> bool:
    """Whether a parameter's own value no longer reaches `use`: an assignment under no branch that
    the use is not in rebinds it, or both branches of one `if` do (`if t: x = a` / `else: x = b`)."""
    branches = {id(n) for n in (*use.gate_nodes, *use.else_of) if n is not None}
    if any({id(n) for n in (*a.site.gate_nodes, *a.site.else_of) if n is not None} <= branches for a in assigns):
        return True
    bodies = {id(n) for a in assigns for n in a.site.gate_nodes if n is not None}
    return any(id(n) in bodies for a in assigns for n in a.site.else_of)


def _parameter_kind(model: "TrainingModel", fn: Function, name: str, depth: int) -> str:
    """What every call of `fn` in this module passes for parameter `name` (its default where a call
    passes none); always given when other modules call it every step or no call is seen."""
    if model._is_hook(fn) or fn in getattr(model, "_external_chains", {}):
        return ALWAYS
    calls = [c for c in (*model.calls_of(fn), *model.method_calls_of(fn)) if not c.site.in_except]
    if not calls:
        return ALWAYS
    kinds = []
    for call in calls:
        arg = _after_unpacked(fn, call, name) if any(a.star for a in call.node.args) else passed_argument(fn, call, name)
        if arg is False:
            return ALWAYS
        if arg is None:
            default = fn.defaults.get(name)
            kinds.append(NONE if isinstance(default, cst.Name) and default.value == "None" else ALWAYS)
        else:
            kinds.append(_value_kind(model, arg, call.site, depth + 1))
    return _join(kinds)


_LITERALS = {"None": None, "True": True, "False": False}


def _kept_default_branch(model: "TrainingModel", fn: Function, test: cst.BaseExpression, body: bool) -> bool:
    """Whether the branch (`body` or else) of `if self.x is [not] None:`, `if self.x:` or `if not
    self.x:` in a method is one no object of its class takes: `self.x` is set only in `__init__`, from
    a parameter with a literal default that no construction gives."""
    negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
    tested = test.expression if negated else test  # type: ignore[attr-defined]
    is_none = None
    if isinstance(tested, cst.Comparison) and len(tested.comparisons) == 1 and dotted(tested.comparisons[0].comparator) == "None":
        operator = tested.comparisons[0].operator
        if not isinstance(operator, (cst.Is, cst.IsNot)):
            return False
        is_none, tested = isinstance(operator, cst.Is), tested.left
    attr = dotted(tested)
    if fn.class_name is None or attr is None or not attr.startswith("self.") or attr.count(".") != 1:
        return False
    kept = _kept_default(model, fn.class_name, attr)
    ask = getattr(model.project, "constructed_values", None)
    given = ask(model.path, fn.class_name, kept[0], kept[1]) if kept is not None and ask is not None and model.path else None
    if not given:
        return False
    values = {kept[2] if v == "default" else v for v in given}  # type: ignore[index]
    return all((((value is None) == is_none if is_none is not None else bool(value)) != negated) != body for value in values)


def _kept_default(model: "TrainingModel", class_name: str, attr: str) -> tuple[str, int, object] | None:
    """(parameter, its place among `__init__`'s explicit parameters, its default) when `attr` is set
    once, in `__init__`, to that parameter as given, and no class of the module derives from the class."""
    info = model.local_class(class_name)
    init = info.methods.get("__init__") if info is not None else None
    assigns = model.attribute_assigns(class_name, attr)
    if init is None or len(assigns) != 1 or any(class_name in c.bases or any(b.endswith(f".{class_name}") for b in c.bases) for c in model.classes):
        return None
    assign = assigns[0]
    if assign.site.function is not init or assign.op is not None or assign.unpacked or not isinstance(assign.value, cst.Name):
        return None
    param = assign.value.value
    default = init.defaults.get(param)
    if not isinstance(default, cst.Name) or default.value not in _LITERALS or param not in init.explicit_params:
        return None
    if any(param in a.targets for a in model.assigns if a.site.function is init):
        return None  # (rebound before it is kept)
    return param, init.explicit_params.index(param), _LITERALS[default.value]
