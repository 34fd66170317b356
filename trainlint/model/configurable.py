"""detectron2's `@configurable` constructors: what `from_config` hands each parameter of `__init__`.

detectron2 builds its models, heads and losses from a configuration: `build_model(cfg)` calls
`Cls(cfg)`, and `@configurable` on `Cls.__init__` turns that into `Cls(**Cls.from_config(cfg))`. The
keyword arguments the constructor receives are the keys of the dict `from_config` returns
(`return {"criterion": criterion, ...}`, or `ret = super().from_config(cfg); ret["matcher"] = m;
return ret`), so a parameter's value is the expression its key is given there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import libcst as cst

if TYPE_CHECKING:
    from trainlint.model.facts import ClassInfo, Function, Site
    from trainlint.model.lattice import Value

LocalClass = Callable[[str], "ClassInfo | None"]  # a class of the module by name (`TrainingModel.local_class`)

CONFIGURABLE = frozenset({"detectron2.config.configurable", "detectron2.config.config.configurable"})


def configured_value(of: "Callable[[cst.BaseExpression, Function, Site], Value]", local_class: LocalClass, fn: "Function", name: str) -> "Value | None":
    """What `from_config` gives parameter `name` of `fn`, a `@configurable` constructor, as `of` evaluates
    it there (None: not one)."""
    given = configured_argument(local_class, fn, name)
    return of(given[0], given[1], given[2]) if given is not None else None


def configured_argument(local_class: LocalClass, fn: "Function", name: str) -> "tuple[cst.BaseExpression, Function, Site] | None":
    """The expression `from_config` of `fn`'s class gives parameter `name` of `fn`, a `@configurable`
    `__init__`, with the function and the place it is read at (its `return`); None if it gives none
    this module can read (a key built at run time, a `from_config` of a base class elsewhere)."""
    if fn.name != "__init__" or fn.class_name is None or fn.parent is not None or not CONFIGURABLE.intersection(fn.decorators):
        return None
    info = local_class(fn.class_name)
    source = info.methods.get("from_config") if info is not None else None
    if source is None:
        return None
    found = None
    for ret in source.return_facts:
        value = ret.value
        if isinstance(value, cst.Dict):
            given = _keyed(value, name)
        elif isinstance(value, cst.Name):
            given = _stored(source.node, value.value, name)
        else:
            return None
        if given is None or found is not None:
            return None  # (two returns, or one that leaves the key out: no single expression)
        found = (given, source, ret.site)
    return found


def _keyed(value: cst.Dict, key: str) -> cst.BaseExpression | None:
    """The value of string key `key` in a dict display (None if absent, or if a `**` could override it)."""
    found = None
    for element in value.elements:
        if isinstance(element, cst.StarredDictElement):
            found = None
        elif isinstance(element.key, cst.SimpleString) and element.key.evaluated_value == key:
            found = element.value
    return found


def _stored(function: cst.FunctionDef, holder: str, key: str) -> cst.BaseExpression | None:
    """What `holder[key] = value` (or `holder = {key: value, ...}`) stores last in the function's own
    top-level statements (a store under a branch may or may not run: none then)."""
    found = None
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else ()
    for statement in body:
        if not isinstance(statement, cst.SimpleStatementLine):
            if _assigns_within(statement, holder):
                return None
            continue
        for small in statement.body:
            if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                continue
            target = small.targets[0].target
            if isinstance(target, cst.Name) and target.value == holder:
                found = _keyed(small.value, key) if isinstance(small.value, cst.Dict) else None
            elif _subscript_of(target, holder) == key:
                found = small.value
    return found


def _subscript_of(target: cst.BaseExpression, holder: str) -> str | None:
    """`key` of a `holder["key"]` target."""
    if not (isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and target.value.value == holder):
        return None
    if len(target.slice) != 1 or not isinstance(target.slice[0].slice, cst.Index):
        return None
    key = target.slice[0].slice.value
    return key.evaluated_value if isinstance(key, cst.SimpleString) and isinstance(key.evaluated_value, str) else None


def _assigns_within(statement: cst.CSTNode, holder: str) -> bool:
    """Whether a compound statement stores into `holder` or its items anywhere inside."""
    return any(
        isinstance(t.target, cst.Name) and t.target.value == holder or _subscript_of(t.target, holder) is not None
        for node in _nodes(statement) if isinstance(node, cst.Assign) for t in node.targets
    )


def _nodes(node: cst.CSTNode) -> "list[cst.CSTNode]":
    """Every node under `node`, itself included (an explicit stack: deep code is no recursion)."""
    found, stack = [], [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(current.children)
    return found
