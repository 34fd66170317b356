"""What a call passes for each parameter: the argument for a parameter as summaries name it, and
the body of a module-level lambda with the call's arguments put in.

A helper's result computed from its tensor arguments (`FunctionSummary.returns_computed`) is where
those arguments are, at each call (`computed_value`).

Shim modules spell tensor methods as functions (`reduce_sum = lambda x, *args, **kwargs:
x.sum(*args, **kwargs)`, `to = lambda x, *args, **kwargs: x.to(*args, **kwargs)`, as d2l does), so
that `float(d2l.reduce_sum(cmp))` is `float(cmp.sum())`: the value model evaluates the body with
each parameter replaced by the argument given for it, in the caller's scope.
"""

from __future__ import annotations

import builtins
from functools import cached_property
from typing import TYPE_CHECKING, Callable

import libcst as cst

from trainlint.model.lattice import ACCEL, HOST, UNKNOWN_DEVICE, Kind, Value
from trainlint.model.walk import iter_nodes

if TYPE_CHECKING:
    from trainlint.model.facts import Function, Site
    from trainlint.model.training import TrainingModel


BUILTINS = frozenset(dir(builtins))
MAX_INLINED = 4  # one-expression functions put in one another's place at once


class _Substitute(cst.CSTTransformer):
    """The lambda's body with its parameters replaced by the call's arguments; `*args` and
    `**kwargs` passed on become the extra positional and keyword arguments."""

    def __init__(self, given: dict[str, cst.BaseExpression], extra: list[cst.Arg], keywords: list[cst.Arg], star: str, double: str) -> None:
        super().__init__()
        self.given, self.extra, self.keywords, self.star, self.double = given, extra, keywords, star, double
        self.names_kept: set[int] = set()  # attribute and keyword names, never parameters

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self.names_kept.add(id(node.attr))
        return True

    def visit_Arg(self, node: cst.Arg) -> bool:
        if node.keyword is not None:
            self.names_kept.add(id(node.keyword))
        return True

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False  # (a nested lambda's names are its own)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if id(original_node) in self.names_kept:
            return updated_node
        return self.given.get(original_node.value, updated_node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        args: list[cst.Arg] = []
        for arg in updated_node.args:
            passed = arg.value.value if isinstance(arg.value, cst.Name) else None
            if arg.star == "*" and passed == self.star:
                args.extend(self.extra)
            elif arg.star == "**" and passed == self.double:
                args.extend(self.keywords)
            else:
                args.append(arg)
        return updated_node.with_changes(args=args)


def inline(lam: cst.Lambda | cst.FunctionDef, call: cst.Call, body: cst.BaseExpression | None = None) -> cst.BaseExpression | None:
    """`lam`'s body (for a `def`, `body`: what it returns) as `call` runs it, or None when the arguments
    cannot be matched to the parameters (a `*xs` or `**kw` in the call, a parameter given twice or not at all)."""
    params = lam.params
    if params.posonly_params or params.kwonly_params or any(a.star in ("*", "**") for a in call.args):
        return None
    names = [p.name.value for p in params.params]
    given: dict[str, cst.BaseExpression] = {}
    extra: list[cst.Arg] = []
    keywords: list[cst.Arg] = []
    positional = [a for a in call.args if a.keyword is None]
    for index, arg in enumerate(positional):
        if index < len(names):
            given[names[index]] = arg.value
        else:
            extra.append(arg)
    for arg in call.args:
        if arg.keyword is None:
            continue
        name = arg.keyword.value
        if name in names and name not in given:
            given[name] = arg.value
        elif name in names:
            return None
        else:
            keywords.append(arg)
    for p in params.params:
        if p.name.value not in given:
            if p.default is None:
                return None
            given[p.name.value] = p.default
    star = params.star_arg.name.value if isinstance(params.star_arg, cst.Param) else ""
    double = params.star_kwarg.name.value if params.star_kwarg is not None else ""
    if (extra and not star) or (keywords and not double):
        return None
    return (body if body is not None else lam.body).visit(_Substitute(given, extra, keywords, star, double))  # type: ignore[union-attr, return-value]


def returned_expression(fn: "Function", free: Callable[[str], bool]) -> cst.BaseExpression | None:
    """What a one-statement function returns (`def default(v, d): return v if exists(v) else d`), when
    each name in it is a parameter or one that `free` accepts (a builtin, a function of the module):
    the expression a call of it may be read as, with the arguments put in (`inline`)."""
    body = fn.node.body
    statements = [s for s in body.body if not _docstring(s)] if isinstance(body, cst.IndentedBlock) else []
    if fn.node.decorators or len(statements) != 1 or not isinstance(statements[0], cst.SimpleStatementLine):
        return None
    line = statements[0].body
    if len(line) != 1 or not isinstance(line[0], cst.Return) or line[0].value is None:
        return None
    value = line[0].value
    kept: set[int] = set()
    for node in iter_nodes(value):
        if isinstance(node, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.NamedExpr)):
            return None  # (names bound inside would be taken for the parameters)
        if isinstance(node, cst.Attribute):
            kept.add(id(node.attr))
        elif isinstance(node, cst.Arg) and node.keyword is not None:
            kept.add(id(node.keyword))
        elif isinstance(node, cst.Name) and id(node) not in kept and node.value not in fn.params and not free(node.value):
            return None
    return value


def _docstring(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))


def argument_for(call: cst.Call, parameter: str | None) -> cst.BaseExpression | None:
    """The argument a call passes for a parameter named as summaries name it ("0 model": its
    position among the explicit parameters, and its name), if it is plain."""
    if not parameter:
        return None
    index_text, _, name = parameter.partition(" ")
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a.value
    positional = []
    for a in call.args:
        if a.star:
            break  # `*args`: which one lands past here is unknown (`f(model, *args)` still passes `model` first)
        if a.keyword is None:
            positional.append(a.value)
    index = int(index_text) if index_text.isdigit() else -1
    return positional[index] if 0 <= index < len(positional) else None


class LambdaCalls:
    """Calls of this module's top-level lambdas, for `CallValues`."""

    model: "TrainingModel"

    def of(self, expr: cst.BaseExpression, function: "Function | None", at: "Site | None" = None) -> "Value":
        raise NotImplementedError

    def _lambda_call(self, name: str, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value | None:
        """`reduce_sum(x, dim)` for `reduce_sum = lambda x, *args: x.sum(*args)` at the top level of this
        module (and nowhere else): what its body gives with the arguments put in."""
        body = self.inlined_lambda(name, call, fn, at)
        key = (id(call), id(body))
        if body is None or key in self._inlining:
            return None
        self._inlining.add(key)
        try:
            return self.of(body, fn, at)
        finally:
            self._inlining.discard(key)

    def inlined_lambda(self, name: str, call: cst.Call, fn: "Function | None", at: "Site | None") -> cst.BaseExpression | None:
        """The body of this module's top-level lambda `name` as `call` runs it (None when `name` is no
        such lambda where it is called, or the arguments do not fit)."""
        m = self.model
        assigns = m.reaching(None, name, None) if fn is None or not m.reaching(fn, name, at) else ()
        if len(assigns) != 1 or assigns[0].op is not None or not isinstance(assigns[0].value, cst.Lambda):
            return None
        key = (id(call), id(assigns[0].value))
        if key not in self._inlined:  # (kept for the model's life: values are memoised by node identity)
            self._inlined[key] = inline(assigns[0].value, call)
        return self._inlined[key]

    def _expression_call(self, local: "Function", call: cst.Call, fn: "Function | None", at: "Site | None") -> Value | None:
        """`default(mask, None)` of a one-expression function of this module: what its expression gives
        with this call's arguments put in, in the caller's scope (a join over every call would mix the
        tensors other calls pass into this one's result)."""
        m = self.model

        def free(name: str) -> bool:  # (a builtin, or a top-level function the caller sees as well)
            if (fn is not None and name in fn.params) or m.reaching(fn, name, at):
                return False
            return name in BUILTINS or any(f.name == name and f.parent is None and f.class_name is None for f in m.functions)

        if local.parent is not None or local.class_name is not None:
            return None
        key = (id(call), id(local.node))
        if key not in self._inlined:
            expression = returned_expression(local, free)
            self._inlined[key] = inline(local.node, call, expression) if expression is not None else None
        body = self._inlined[key]
        if body is None or key in self._inlining or len(self._inlining) >= MAX_INLINED:
            return None  # (`list_sum(x[1:])` in `list_sum`'s own expression: a new call each time)
        self._inlining.add(key)
        try:
            return self.of(body, fn, at)
        finally:
            self._inlining.discard(key)

    @cached_property
    def _inlined(self) -> dict[tuple[int, int], cst.BaseExpression | None]:
        return {}

    @cached_property
    def _inlining(self) -> set[tuple[int, int]]:
        return set()


def refinable(declared: Value) -> bool:
    """A declared type that leaves open what the values passed can say: which class of module or
    object, where the elements of a collection live."""
    if declared.kind in (Kind.MODULE, Kind.OBJECT):
        return not declared.origin
    return declared.kind is Kind.COLLECTION and (declared.element is None or declared.element.device == UNKNOWN_DEVICE)


def refines(passed: Value, declared: Value) -> bool:
    """Whether a value passed says more than the declared type it is passed for (and agrees with it)."""
    if passed.kind is not declared.kind:
        return False
    if passed.kind is Kind.COLLECTION:
        return passed.element is not None and passed.element.kind is not Kind.UNKNOWN and passed.element.device != UNKNOWN_DEVICE
    return bool(passed.origin)


def computed_value(call: cst.Call, computation: tuple[str, ...], value_of: Callable[[cst.BaseExpression], Value]) -> Value | None:
    """What a call returns of a function whose result is computed from its tensor parameters
    (`computation`: ("list" or "tensor", "0 output", ...)): tensors on the device when an argument it
    is computed from is there, on the host when all are host tensors, where they are when all are
    tensors (a model's outputs); None otherwise."""
    if not computation:
        return None
    if computation[0] == "host":  # (NumPy's result, whatever it was given)
        return Value(Kind.HOST_ARRAY, HOST)
    given = [value_of(a) for a in (argument_for(call, key) for key in computation[1:]) if a is not None]
    if any(v.device == ACCEL for v in given):
        tensor = Value(Kind.TENSOR, ACCEL)
    elif given and all(v.kind is Kind.TENSOR for v in given):
        tensor = Value(Kind.TENSOR, HOST if all(v.device == HOST for v in given) else UNKNOWN_DEVICE)
    else:
        return None
    return Value(Kind.COLLECTION, HOST, element=tensor) if computation[0] == "list" else tensor
