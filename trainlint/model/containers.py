"""Where the code says what a collection holds: a list that starts empty (then filled by `append` and
`extend`, which the value model reads), the variables of a comprehension, each an element of what
its clause iterates, the modules a container of modules holds (`nn.ModuleList`, `nn.Sequential`),
and what a dict or a namespace holds under each constant key (`Munch(encoder=enc)`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import libcst as cst

from trainlint.model.gates import child_nodes, isinstance_tests
from trainlint.model.lattice import ACCEL, HOST, NAMESPACE, UNKNOWN, UNKNOWN_DEVICE, Kind, Value, join

DICT = "dict"  # the origin of a dict literal: its subscript is one value, chosen by its key
from trainlint.model.names import dotted, target_names


# a comprehension variable's binding: the iterable it takes elements of, and the target that unpacks
# each element (None: the variable is the element)
Drawn = tuple[cst.BaseExpression, "cst.BaseExpression | None"]


def comprehension_bindings(comprehensions: list[cst.BaseComp]) -> dict[int, Drawn]:
    """Each use of a comprehension's variable (by node), to the iterable it is an element of:
    `x` of `for x in xs` to `xs`, `a` and `b` of `for a, b in zip(xs, ys)` to `xs` and `ys`, and `k`
    and `v` of `for k, v in d.items()` to `d.items()` with the target that unpacks each pair."""
    out: dict[int, Drawn] = {}
    for comp in comprehensions:  # outer first: an inner comprehension rebinds its own
        names: dict[str, Drawn] = {}
        clause: cst.CompFor | None = comp.for_in
        while clause is not None:
            names.update(_comprehension_targets(clause))
            clause = clause.inner_for_in
        if not names:
            continue
        scopes: list[cst.CSTNode] = [comp.key, comp.value] if isinstance(comp, cst.DictComp) else [comp.elt]
        clause = comp.for_in
        while clause is not None:
            scopes.extend(clause.ifs)
            if clause is not comp.for_in:
                scopes.append(clause.iter)
            clause = clause.inner_for_in
        stack = scopes
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Name) and node.value in names:
                out[id(node)] = names[node.value]
            elif isinstance(node, cst.Attribute):
                stack.append(node.value)  # (an attribute's name is not a variable)
            else:
                stack.extend(child_nodes(node))
    return out


def comprehension_value(bound: Drawn, name: str, value_of: Callable[[cst.BaseExpression], Value]) -> Value | None:
    """What the comprehension variable `name`, bound as `comprehension_bindings` says, holds: an element
    of its iterable, or the part of one its target unpacks (None when the pair says nothing of it)."""
    iterable, target = bound
    drawn = element_of(value_of(iterable))
    if target is None:
        return drawn
    drawn = unpacked_element(drawn, target, name)  # `v` of `for k, v in d.items()`
    return drawn if drawn.kind is not Kind.UNKNOWN or drawn.device != UNKNOWN_DEVICE else None


def _comprehension_targets(clause: cst.CompFor) -> dict[str, Drawn]:
    """The variables a `for` clause binds, each to the iterable it takes elements of (only those known)."""
    target = clause.target
    if isinstance(target, cst.Name):
        return {target.value: (clause.iter, None)}
    if not isinstance(target, (cst.Tuple, cst.List)) or any(isinstance(e, cst.StarredElement) for e in target.elements):
        return {}
    if isinstance(clause.iter, cst.Call) and dotted(clause.iter.func) == "zip":
        args = [a.value for a in clause.iter.args if a.keyword is None and not a.star]
        names = [e.value for e in target.elements]
        if len(args) == len(names) and all(isinstance(n, cst.Name) for n in names):
            return {n.value: (a, None) for n, a in zip(names, args)}  # type: ignore[union-attr]
    if isinstance(clause.iter, cst.Call) and dotted(clause.iter.func) == "enumerate" and clause.iter.args and len(target.elements) == 2:
        element = target.elements[1].value  # (the count is left unbound: not known to be a number of the data)
        return {element.value: (clause.iter.args[0].value, None)} if isinstance(element, cst.Name) else {}
    if isinstance(clause.iter, cst.Call) and isinstance(clause.iter.func, cst.Attribute) and clause.iter.func.attr.value == "items" and not clause.iter.args:
        return {name: (clause.iter, target) for name in target_names(target)}  # (each pair unpacked by place)
    return {}


# torch's containers of modules: iterated and indexed for their modules, and `Sequential` runs each in turn
MODULE_CONTAINERS = frozenset({"ModuleList", "Sequential"})


def held_modules(container: str, args: list[tuple[Value, bool]]) -> Value | None:
    """The modules a container is built with (each argument's value, and whether it is starred): the
    list given to `nn.ModuleList([Block(c) for _ in range(n)])`, each module of `nn.Sequential(a, b)`
    or of `nn.Sequential(*layers)`. None when not all of them are known to be modules."""
    if container == "ModuleList":
        given = [element_of(v) for v, _ in args] if len(args) == 1 else []
    else:  # (an OrderedDict of named modules is not read)
        given = [element_of(v) if starred else v for v, starred in args]
    return join(given) if given and all(g.kind is Kind.MODULE for g in given) else None


def what_a_call_runs(module: Value) -> Value:
    """The modules whose `forward` calling `module` runs: each one an `nn.Sequential` holds (it runs
    them in turn), else the module itself."""
    if module.origin == "torch.nn.Sequential" and module.element is not None:
        return module.element
    return module


def element_of(iterable: Value) -> Value:
    """What iterating over a value gives: a collection's element, a tensor's rows (same device), a
    container's modules."""
    if iterable.kind in (Kind.COLLECTION, Kind.MODULE) and iterable.element is not None:
        return iterable.element
    if iterable.kind is Kind.TENSOR:
        return iterable
    if iterable.kind is Kind.HOST_ARRAY:  # (an array's rows: arrays, on the host)
        return iterable
    if iterable.kind is Kind.UNKNOWN and iterable.device in (HOST, ACCEL):
        # (`for n in lengths.cpu():`; `for row in y:` of `y = y.to(device)`: rows there too)
        return Value(Kind.UNKNOWN, iterable.device)
    return UNKNOWN


def is_empty_list(assign: Any, name: str) -> bool:
    """`name = []`, or `name` given an empty list by a tuple assignment (`xs, ys = [], []`)."""
    value = assign.value
    if isinstance(value, cst.Tuple) and len(assign.targets) == len(value.elements) and name in assign.targets:
        value = value.elements[assign.targets.index(name)].value
    elif len(assign.targets) != 1 or assign.op is not None:
        return False
    return isinstance(value, cst.List) and not value.elements


def is_empty_dict(assign: Any, name: str) -> bool:
    """`name = {}` or `name = dict()`: a dict the function fills later (`update`, `name[key] = v`)."""
    value = assign.value
    if len(assign.targets) != 1 or assign.op is not None or assign.targets[0] != name:
        return False
    return (isinstance(value, cst.Dict) and not value.elements) or (isinstance(value, cst.Call) and dotted(value.func) == "dict" and not value.args)


def unpacked_element(element: Value, target: cst.BaseExpression, name: str) -> Value:
    """What `name` takes from one element in a `for` target: the element itself for a plain name; by
    place for a tuple target (`for t, l in zip(ts, losses)`: the first and second of each pair), and
    each part of a tensor's row unpacked (`for a, b in pairs_tensor`) is a tensor where the row is."""
    if isinstance(target, cst.Name):
        return element if target.value == name else UNKNOWN
    if not isinstance(target, (cst.Tuple, cst.List)) or any(isinstance(e, cst.StarredElement) for e in target.elements):
        return UNKNOWN
    for place, e in enumerate(target.elements):
        if name not in target_names(e.value):
            continue
        if element.kind is Kind.TENSOR:
            part = element
        elif element.items is not None and element.keys is None and len(element.items) == len(target.elements):
            part = element.items[place]
        else:
            return UNKNOWN
        return unpacked_element(part, e.value, name)
    return UNKNOWN


SEQUENCE_TYPES = frozenset({"list", "tuple", "Sequence", "List", "Tuple", "collections.abc.Sequence", "typing.Sequence", "typing.List", "typing.Tuple"})


def tested_as_sequence(gates: tuple[cst.If | None, ...], value: cst.BaseExpression) -> bool:
    """Whether an enclosing `if isinstance(value, (list, tuple)):` (or `if not isinstance(value,
    torch.Tensor):`) holds the statement: there `value` is a sequence of things nobody knows, and
    `loss, extra = loss` unpacks whatever a loss function returned besides a tensor."""
    text = dotted(value)
    if text is None:
        return False
    for tested, classes, negated in isinstance_tests(gates):
        names = {dotted(c) for c in classes}
        if dotted(tested) == text and ((names & SEQUENCE_TYPES) if not negated else any(n is not None and n.endswith("Tensor") for n in names)):
            return True
    return False


def dict_value(expr: cst.Dict, evaluate: Callable[[cst.BaseExpression], Value]) -> Value:
    """A dict literal: what it holds, and under which key where every key is a constant string."""
    values = [evaluate(e.value) for e in expr.elements if isinstance(e, cst.DictElement)]
    keys = [e.key.evaluated_value for e in expr.elements if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)]
    exact = len(keys) == len(expr.elements) and all(isinstance(k, str) for k in keys)  # (by key: `nets["encoder"]`)
    return Value(Kind.COLLECTION, HOST, origin=DICT, element=join(values) if values else None,
                 items=tuple(values) if exact else None, keys=tuple(keys) if exact else None)  # type: ignore[arg-type]


def namespace_value(call: cst.Call, evaluate: Callable[[cst.BaseExpression], Value]) -> Value:
    """`Munch(text_encoder=enc, decoder=dec)` or `EasyDict({"encoder": enc})`: what it holds under
    each key, read by attribute too (`model.text_encoder`)."""
    if len(call.args) == 1 and call.args[0].keyword is None and not call.args[0].star:
        inner = evaluate(call.args[0].value)
        return replace(inner, origin=NAMESPACE) if inner.kind is Kind.COLLECTION and inner.keys is not None else Value(Kind.COLLECTION, HOST, origin=NAMESPACE)
    if any(a.keyword is None for a in call.args):  # (`**kwargs`: what else it holds is unknown)
        return Value(Kind.COLLECTION, HOST, origin=NAMESPACE)
    values = tuple(evaluate(a.value) for a in call.args)
    keys = tuple(a.keyword.value for a in call.args if a.keyword is not None)
    return Value(Kind.COLLECTION, HOST, origin=NAMESPACE, element=join(values) if values else None, items=values, keys=keys)


def constant_key(expr: cst.Subscript) -> str | None:
    """`nets["encoder"]`: the constant string a subscript reads."""
    index = expr.slice[0].slice if len(expr.slice) == 1 else None
    key = index.value if isinstance(index, cst.Index) else None
    value = key.evaluated_value if isinstance(key, cst.SimpleString) else None
    return value if isinstance(value, str) else None


def returned_dict(returned: Value | None, output: Value) -> Value | None:
    """What calling a module gives when its class's `forward` returns a dict of tensors (a criterion's
    `{"loss_ce": ..., "loss_bbox": ...}`): that dict, each tensor carrying the graph a forward pass's
    `output` would; None for any other return."""
    if returned is None or returned.kind is not Kind.COLLECTION or returned.origin != DICT or returned.element is None or not returned.element.is_tensor:
        return None

    def with_graph(value: Value) -> Value:
        return replace(value, graph=output.graph) if value.kind is Kind.TENSOR else value

    return replace(returned, element=with_graph(returned.element), items=tuple(map(with_graph, returned.items)) if returned.items is not None else None)
