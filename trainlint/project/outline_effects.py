"""What an outlined module's functions do to what they are given, read with Python's own parser (a
module with no training code is not analysed, see `importers.module_outline`): the layers a function
or method replaces (`FunctionSummary.replaces_layers`) and whether it returns probabilities
(`FunctionSummary.returns_activation`). A model file (`models.py`: a `forward` ending in
`F.softmax`, a `reset_classifier` assigning `self.head = nn.Linear(...)`) has no training token, so
this is how the modules that train its models learn what they do. Read as `model/layer_swaps.py` and
`model/activations.py` read an analysed module, more cautiously: only straight-line code counts."""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Callable, Iterator

from trainlint.model.activations import ACTIVATION_FUNCTIONS, ACTIVATION_MODULES, ACTIVATIONS, VALUE_PRESERVING
from trainlint.model.lattice import Kind
from trainlint.model.layer_swaps import PARAMETERLESS_MODULES
from trainlint.model.summary import ClassSummary, FunctionSummary, ModuleSummary
from trainlint.project.python_trees import walk

MAX_DEPTH = 6
# torch.nn names that are no module (a `Parameter` assigned is a tensor, not a layer)
_NOT_MODULES = frozenset({"Parameter", "Buffer", "UninitializedParameter", "UninitializedBuffer"})

Resolve = Callable[[ast.expr], str]
Function = ast.FunctionDef | ast.AsyncFunctionDef


def add_effects(
    tree: ast.Module, functions: dict[str, FunctionSummary], classes: dict[str, ClassSummary], imported: dict[str, str], exports: dict[str, str]
) -> None:
    """Set `replaces_layers` and `returns_activation` on the outline's summaries of `tree`'s top-level
    functions and its classes' methods."""

    def resolve(expr: ast.expr) -> str:
        text = _dotted(expr)
        head, dot, rest = text.partition(".")
        full = exports.get(head) or imported.get(head)
        return f"{full}{dot}{rest}" if full and text else text

    modules = {name for name, c in classes.items() if c.kind is Kind.MODULE}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in functions:
            functions[node.name] = _with_effects(functions[node.name], node, False, resolve, modules, {})
        elif isinstance(node, ast.ClassDef) and node.name in classes:
            layers = _activation_layers(node, resolve)
            methods = dict(classes[node.name].methods)
            for method in node.body:
                if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.name in methods:
                    methods[method.name] = _with_effects(methods[method.name], method, True, resolve, modules, layers)
            classes[node.name] = replace(classes[node.name], methods=methods)


def _with_effects(summary: FunctionSummary, fn: Function, method: bool, resolve: Resolve, modules: set[str], layers: dict[str, str]) -> FunctionSummary:
    replaced = _replaced_layers(fn, method, resolve, modules)
    activation = _returned_activation(fn, resolve, layers)
    if not replaced and activation is None:
        return summary
    return replace(summary, replaces_layers=replaced, returns_activation=activation)


def imported_names(node: ast.ImportFrom) -> list[tuple[str, str]]:
    """The names `from a.b import c as d` binds, each with what it names as the module's imports spell
    it: ("d", "a.b.c"); relative imports keep their dots (`.utils.c`, `from . import c`: ".c")."""
    base = "." * node.level + (node.module or "")
    return [
        (alias.asname or alias.name, f"{base}.{alias.name}" if node.module else f"{base}{alias.name}" if node.level else alias.name)
        for alias in node.names if alias.name != "*"
    ]


def spelled(base: str, exports: dict[str, str], imported: dict[str, str]) -> str:
    """A name (a base class, a called wrapper) as the module's imports spell it in full (`TrainerModel`
    imported from `trainer`: "trainer.TrainerModel"; `nn.DataParallel`: "torch.nn.DataParallel"); a name the
    module defines itself stays bare (also as `d2l.Module` where `d2l = sys.modules[__name__]`, which
    `imported` maps to "")."""
    head, _, rest = base.partition(".")
    if imported.get(head) == "" and rest:
        return rest
    full = exports.get(head) or imported.get(head)
    if full is None:
        return base
    return f"{full}.{rest}" if rest else full


def explicit_parameters(fn: Function, method: bool) -> list[str]:
    """A function's positional parameters as summaries count them: a method's without `self`."""
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if method and params and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list):
        return params[1:]
    return params


def _replaced_layers(fn: Function, method: bool, resolve: Resolve, modules: set[str]) -> tuple[str, ...]:
    """"self.head", "0 model.fc": the layers of the receiver or a parameter that a top-level statement
    of `fn` (run on every call) replaces by a module with parameters (`model/layer_swaps.py`)."""
    if fn.name == "__init__":
        return ()
    params = explicit_parameters(fn, method)
    every = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    receiver = every[0] if len(params) < len(every) else None  # (a method's own first parameter)
    rebound = {n.id for node in own_statements(fn) for t in bound_targets(node) for n in walk(t) if _stored(n)}
    out: list[str] = []
    for statement in fn.body:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
            continue
        target = statement.targets[0]
        if isinstance(target, ast.Subscript):
            target = target.value  # `model.classifier[6] = nn.Linear(...)`
        text = _dotted(target)
        root, dot, rest = text.partition(".")
        if not dot or root in rebound or not _builds_parameters(statement.value, resolve, modules):
            continue
        if root == receiver == "self":
            out.append(text)
        elif root in params:
            out.append(f"{params.index(root)} {root}.{rest}")
    return tuple(dict.fromkeys(out))


def _builds_parameters(value: ast.expr, resolve: Resolve, modules: set[str]) -> bool:
    """`nn.Linear(...)` (a torch.nn class with parameters) or a module class of this module."""
    if not isinstance(value, ast.Call):
        return False
    if isinstance(value.func, ast.Name) and value.func.id in modules:
        return True
    full = resolve(value.func)
    if not full.startswith("torch.nn.") or full.count(".") != 2:
        return False
    name = full.rsplit(".", 1)[-1]
    return name[:1].isupper() and name not in PARAMETERLESS_MODULES and name not in _NOT_MODULES


def _activation_layers(cls: ast.ClassDef, resolve: Resolve) -> dict[str, str]:
    """The attributes of `self` every assignment of which (in any method) builds an `nn.Softmax` or
    `nn.Sigmoid`, or an `nn.Sequential` ending in one: attribute -> "softmax"/"sigmoid"."""
    seen: dict[str, set[str | None]] = {}
    for node in walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                value = getattr(node, "value", None)
                seen.setdefault(target.attr, set()).add(_layer_activation(value, resolve) if len(targets) == 1 and isinstance(node, ast.Assign) else None)
    return {attr: found.pop() for attr, found in seen.items() if len(found) == 1 and None not in found}  # type: ignore[misc]


def _layer_activation(value: ast.expr | None, resolve: Resolve) -> str | None:
    if not isinstance(value, ast.Call):
        return None
    full = resolve(value.func)
    if full.startswith("torch.nn.") and full.count(".") == 2:
        name = full.rsplit(".", 1)[-1]
        if name in ACTIVATION_MODULES:
            return ACTIVATION_MODULES[name]
        if name == "Sequential" and value.args and not isinstance(value.args[-1], ast.Starred):
            return _layer_activation(value.args[-1], resolve)
    return None


def _returned_activation(fn: Function, resolve: Resolve, layers: dict[str, str]) -> str | None:
    """"softmax"/"sigmoid" when every `return` of `fn` certainly gives that activation's output."""
    returned = _returns(fn)
    if not returned:
        return None
    for activation in ACTIVATIONS:
        if all(value is not None and _holds(value, reaching, activation, resolve, layers, 0) for value, reaching in returned):
            return activation
    return None


Bindings = dict[str, list["ast.expr | None"]]


def _returns(fn: Function) -> list[tuple[ast.expr | None, Bindings]]:
    """Each `return`'s value, with the bindings of each name that may reach it (None: a binding whose
    value is not one expression). A top-level `x = f(x)` hides the earlier bindings of `x` from the
    top-level statements after it; a binding inside a compound statement joins them; a `return` inside
    one sees every binding of the function."""
    bound: Bindings = {}
    last: Bindings = {}
    out: list[tuple[ast.expr | None, Bindings]] = []
    for statement in fn.body:
        top = isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)
        for node in own_statements_from(statement):
            if isinstance(node, ast.Return):
                out.append((node.value, dict(last) if node is statement else bound))
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                bound.setdefault(name, []).append(node.value)
                last[name] = [node.value] if top else [*last.get(name, ()), node.value]
            else:
                for target in bound_targets(node):
                    for n in walk(target):
                        if _stored(n):
                            bound.setdefault(n.id, []).append(None)
                            last.setdefault(n.id, []).append(None)
    return out


def _holds(expr: ast.expr, reaching: Bindings, activation: str, resolve: Resolve, layers: dict[str, str], depth: int) -> bool:
    if depth > MAX_DEPTH:
        return False
    if isinstance(expr, ast.Subscript):
        return _holds(expr.value, reaching, activation, resolve, layers, depth + 1)
    if isinstance(expr, ast.Name):
        values = reaching.get(expr.id)
        return bool(values) and all(v is not None and _holds(v, reaching, activation, resolve, layers, depth + 1) for v in values)  # type: ignore[union-attr]
    if not isinstance(expr, ast.Call):
        return False
    full = resolve(expr.func)
    if full.split(".", 1)[0] == "torch":
        return ACTIVATION_FUNCTIONS.get(full) == activation
    func = expr.func
    if isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Name) and func.value.id == "self":
            return layers.get(func.attr) == activation  # `self.softmax(x)`, `self.head(x)` ending in one
        if func.attr in VALUE_PRESERVING:
            return _holds(func.value, reaching, activation, resolve, layers, depth + 1)
        if func.attr == activation:  # `x.softmax(dim=-1)`: a tensor's method, given at most the dimension
            keywords = all(k.arg in ("dim", "dtype") for k in expr.keywords)
            return keywords and all(_integer(a) for a in expr.args)
    return False


def _integer(expr: ast.expr) -> bool:
    if isinstance(expr, ast.UnaryOp):
        expr = expr.operand
    return isinstance(expr, ast.Constant) and type(expr.value) is int


def _stored(node: ast.AST) -> bool:
    """A name a statement binds (not `model` in `model.fc = ...`, which binds an attribute)."""
    return isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)


def _dotted(expr: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return ""
    parts.append(expr.id)
    return ".".join(reversed(parts))


def own_statements(fn: Function) -> Iterator[ast.AST]:
    """The statements (and `except` clauses) of a function's own scope, not of the functions and
    classes nested in it (see `own_statements_from`)."""
    for statement in fn.body:
        yield from own_statements_from(statement)


def own_statements_from(statement: ast.AST) -> Iterator[ast.AST]:
    """A statement of a function's body and the statements (and `except` clauses) nested in it, not
    those of the functions and classes nested in it. Only statements: returns, and the targets that
    rebind a name, are statements
    (an assignment expression `(x := ...)` is not looked for), and an outline is read for every module
    a project analysis touches, so the expressions inside are not walked."""
    stack: list[ast.AST] = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue  # a nested scope's returns and names are its own
        yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            stack.extend(getattr(node, name, None) or ())


def bound_targets(node: ast.AST) -> list[ast.AST]:
    """The expressions a statement (or an `except` clause) binds names to."""
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
        return [node.target]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [i.optional_vars for i in node.items if i.optional_vars is not None]
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [ast.Name(node.name, ast.Store())]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [ast.Name((a.asname or a.name).split(".")[0], ast.Store()) for a in node.names]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []


def with_outline_facts(summary: ModuleSummary, outline: ModuleSummary) -> ModuleSummary:
    """A module's summary with the facts its outline reads (the gradient-flag names a class lacks,
    `ClassSummary.lacks`, the parameters its constructor keeps, `ClassSummary.holds`, and what each
    function's result is computed from, `FunctionSummary.returns_computed`: a walk of Python's own
    tree, cheaper than one over libcst's)."""
    read = {name: (c.lacks, c.holds) for name, c in outline.classes.items() if c.lacks or c.holds}
    computed = {name: f.returns_computed for name, f in outline.functions.items() if f.returns_computed}
    methods = {(k, name): f.returns_computed for k, c in outline.classes.items() for name, f in c.methods.items() if f.returns_computed}
    if not read and not computed and not methods:
        return summary
    return replace(
        summary,
        functions={k: replace(f, returns_computed=computed[k]) if k in computed else f for k, f in summary.functions.items()},
        classes={
            k: replace(
                c, lacks=read.get(k, ((), ()))[0], holds=read.get(k, ((), ()))[1],
                methods={n: replace(f, returns_computed=methods[k, n]) if (k, n) in methods else f for n, f in c.methods.items()},
            )
            for k, c in summary.classes.items()
        },
    )
