"""What the factories of a module with no training code return, read from Python's own tree: the
project classes they build (`setup_model(config)` returning a `UNet`), directly, through another
factory of the module (`return build_unet(config)`), or as the places of a tuple
(`return model, diffusion`, unpacked by the caller as `model, diffusion = create_both(...)`)."""

from __future__ import annotations

import ast

from trainlint.model.lattice import HOST, MAX_ALTERNATIVES, NAMESPACE, NAMESPACE_CLASSES, UNKNOWN, Kind, Value, join, origins
from trainlint.model.summary import ClassSummary
from trainlint.model.torchnames import MODULE_MOVES, MODULE_WRAPPERS
from trainlint.project.outline_effects import bound_targets, imported_names, own_statements_from, spelled

Function = ast.FunctionDef | ast.AsyncFunctionDef
Bindings = dict[str, list[ast.expr]]


class Imported(ast.expr):
    """A name a factory binds by importing it (`from .istftnet import Decoder` under `if`), as the
    module's own imports would spell it."""

    _fields = ("spelled",)


class Unpacked(ast.expr):
    """A name bound by unpacking a call's result (`model, criterion, postprocessors = build_func(args)`):
    the call, and the name's place in the tuple."""

    _fields = ("call", "place")


# what a factory returns when it hands on the tuple of a builder function a registry holds
# (`build_func = MODULE_BUILD_FUNCS.get(args.modelname)`, then `model, criterion, pp = build_func(args)`
# and `return model, criterion, pp`): the registry as the module spells it, after the prefix
BUILDERS = "builders:"
UNPACKED = "#unpacked"  # the key of a name's bindings by unpacking a call, apart from its others


class ReturnedClasses:
    """The returns of a module's factories, each read once (a factory may call another)."""

    def __init__(
        self, factories: list[tuple[Function, str]], classes: dict[str, ClassSummary], exports: dict[str, str], path: str, imported: dict[str, str]
    ) -> None:
        self._classes = classes
        self._exports = exports
        self._imported = imported  # (`import torch.nn as nn`: "nn" -> "torch.nn")
        self._path = path
        self._functions = {node.name: node for node, owner in factories if not owner}  # (called by bare name)
        self._known: dict[int, Value | None] = {}
        self._reading: set[int] = set()

    def of(self, fn: Function, owner: str = "") -> Value | None:
        """What every `return` of `fn` gives: an instance of one of at most `MAX_ALTERNATIVES` classes
        of one kind ("file::A|file::B" for this module's classes, as the imports spell the others,
        which the module using the result names in full), or a tuple of such places (a place no
        factory fills is unknown; one at least is known); None when a `return` gives anything else."""
        key = id(fn)
        if key not in self._known:
            if key in self._reading:  # (factories calling each other: no answer from the cycle)
                return None
            self._reading.add(key)
            try:
                self._known[key] = self._returned(fn)
            finally:
                self._reading.discard(key)
        return self._known[key]

    def _returned(self, fn: Function) -> Value | None:
        returned = _returns(fn)
        tuples = [(value, reaching) for value, reaching in returned if isinstance(value, ast.Tuple)]
        handed_on = self._handed_on(*tuples[0]) if len(tuples) == 1 and len(returned) == 1 else None
        if handed_on is not None:
            return handed_on
        if tuples:  # (`return model, optimizer` when training, else `return model`: a caller unpacking it took the first)
            return self._tuple(tuples)
        if len(returned) == 1:
            keyed = self._namespace(*returned[0])
            if keyed is not None:
                return keyed
        found = [self._built(value, reaching) for value, reaching in returned]
        return _one_of(found) if returned and all(found) else None  # type: ignore[arg-type]

    def _tuple(self, returned: list[tuple[ast.expr, Bindings]]) -> Value | None:
        places = {len(value.elts) for value, _ in returned}  # type: ignore[attr-defined]
        if len(places) != 1 or any(isinstance(e, ast.Starred) for value, _ in returned for e in value.elts):  # type: ignore[attr-defined]
            return None
        items: list[Value] = []
        for index in range(places.pop()):
            keyed = self._namespace(returned[0][0].elts[index], returned[0][1]) if len(returned) == 1 else None  # type: ignore[attr-defined]
            found = [self._built(value.elts[index], reaching) for value, reaching in returned]  # type: ignore[attr-defined]
            items.append(keyed or (_one_of(found) if all(found) else None) or UNKNOWN)  # type: ignore[arg-type]
        if all(item is UNKNOWN for item in items):
            return None
        return Value(Kind.COLLECTION, HOST, element=join(items), items=tuple(items))

    def _handed_on(self, value: ast.Tuple, reaching: Bindings) -> Value | None:
        """`model, criterion, pp = build(args)` then `return model, criterion, pp`: what the call returns,
        place by place: another factory of the module or an imported one (by its name), or a builder a
        registry holds (`build = REGISTRY.get(name)`: `BUILDERS` and the registry)."""
        bound = [reaching.get(f"{e.id}{UNPACKED}", []) if isinstance(e, ast.Name) and e.id not in reaching else [] for e in value.elts]
        if not bound or not all(b and all(isinstance(u, Unpacked) and u.place == i for u in b) for i, b in enumerate(bound)):
            return None
        calls = [{id(u.call) for u in b} for b in bound]  # type: ignore[attr-defined]
        if any(c != calls[0] for c in calls):
            return None  # (each place from the same statements: `model, criterion = build_a(args)` in each branch)
        funcs = [u.call.func for u in bound[0]]  # type: ignore[attr-defined]
        if len(funcs) > 1:  # one factory per branch (`if args.model == "dn_dab_detr": ... = build_DABDETR(args)`)
            named = [f.id for f in funcs if isinstance(f, ast.Name) and (f.id in self._functions or f.id in self._exports)]
            if len(named) != len(funcs) or len(set(named)) > MAX_ALTERNATIVES:
                return None
            return Value(Kind.OBJECT, origin="|".join(dict.fromkeys(self._exports.get(n, n) for n in named)))
        func = funcs[0]
        if not isinstance(func, ast.Name):
            return None
        if func.id in self._functions or func.id in self._exports:
            return Value(Kind.OBJECT, origin=self._exports.get(func.id, func.id))
        getter = reaching.get(func.id, [])
        registry = getter[0].func.value if len(getter) == 1 and isinstance(getter[0], ast.Call) and isinstance(getter[0].func, ast.Attribute) and getter[0].func.attr == "get" else None
        if not isinstance(registry, ast.Name):
            return None
        imported = [b.spelled for b in reaching.get(registry.id, ()) if isinstance(b, Imported)]  # type: ignore[attr-defined]
        spelled = imported[0] if len(imported) == 1 else self._exports.get(registry.id)
        return Value(Kind.OBJECT, origin=f"{BUILDERS}{spelled}") if spelled else None

    def _namespace(self, value: ast.expr, reaching: Bindings) -> Value | None:
        """`return Munch(bert=bert, text_encoder=text_encoder)` (or the name bound to it): the objects
        it holds under each key (one no factory fills is unknown; one at least is known)."""
        calls = reaching.get(value.id, []) if isinstance(value, ast.Name) else [value]
        call = calls[0] if len(calls) == 1 else None
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or self._exports.get(call.func.id) not in NAMESPACE_CLASSES:
            return None
        if call.args or any(k.arg is None for k in call.keywords):
            return None
        items: list[Value] = []
        for keyword in call.keywords:
            found = self._built(keyword.value, reaching)
            items.append((_one_of([found]) if found else None) or UNKNOWN)
        if all(item is UNKNOWN for item in items):
            return None
        return Value(Kind.COLLECTION, HOST, origin=NAMESPACE, element=join(items), items=tuple(items), keys=tuple(k.arg or "" for k in call.keywords))

    def _built(self, value: ast.expr, reaching: Bindings) -> list[tuple[str, Value]] | None:
        """The objects `value` may be, each with the name it is sorted by; None when one is unknown."""
        out: list[tuple[str, Value]] = []
        value = self._unwrapped(value)
        calls = reaching.get(value.id, [ast.Constant(None)]) if isinstance(value, ast.Name) else [value]
        for call in [made for call in calls for made in _table_entries(self._unwrapped(call), reaching)]:
            name = call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else None
            imported = [b.spelled for b in reaching.get(name, ()) if isinstance(b, Imported)] if name is not None else []  # type: ignore[attr-defined]
            if imported and len(imported) == len(reaching[name]):  # (imported in the function, on each path)
                out.extend((full, Value(Kind.OBJECT, origin=full)) for full in imported)
            elif name is not None and name in self._classes:
                out.append((name, Value(self._classes[name].kind, origin=f"{self._path}::{name}")))
            elif name is not None and name in self._exports:
                out.append((name, Value(Kind.OBJECT, origin=self._exports[name])))
            elif name is not None and name in self._functions:  # another factory of this module
                made = self.of(self._functions[name])
                if made is None or made.kind not in (Kind.MODULE, Kind.OBJECT):
                    return None
                out.extend((origin, Value(made.kind, origin=origin)) for origin in origins(made))
            else:
                return None
        return out


    def _unwrapped(self, value: ast.expr) -> ast.expr:
        """`nn.DataParallel(MappingNetwork(...)).to(device)`: the module a wrapper (`MODULE_WRAPPERS`)
        runs, whose `forward` a call of the wrapper runs; moved or not."""
        value = _unmoved(value)
        while isinstance(value, ast.Call) and value.args and spelled(ast.unparse(value.func), self._exports, self._imported) in MODULE_WRAPPERS:
            value = _unmoved(value.args[0])
        return value


def _unmoved(value: ast.expr) -> ast.expr:
    """`UNet(cfg).to(device)`, `net.cuda()`: a module moved (or cast, or set to train) gives itself back."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in MODULE_MOVES:
        value = value.func.value
    return value


def _table_entries(call: ast.expr, reaching: Bindings) -> list[ast.expr]:
    """`models[name](params)` with `models = {"gated": GatedNet, "gin": build_gin}` bound in the
    function: a call of each entry (what one of them builds); any other value as it is."""
    func = call.func if isinstance(call, ast.Call) else None
    if not isinstance(func, ast.Subscript) or not isinstance(func.value, ast.Name):
        return [call]
    tables = reaching.get(func.value.id, [])
    if not tables or not all(isinstance(t, ast.Dict) and None not in t.keys for t in tables):
        return [call]
    return [ast.Call(func=entry, args=[], keywords=[]) for t in tables for entry in t.values]  # type: ignore[attr-defined]


def _one_of(found: list[list[tuple[str, Value]]]) -> Value | None:
    """An object of one of the classes found, when they are few and of one kind."""
    by_name = dict(pair for pairs in found for pair in pairs)
    kinds = {v.kind for v in by_name.values()}
    if kinds == {Kind.MODULE, Kind.OBJECT}:  # (a class of this module and an imported one, whose kind the outline does not know)
        kinds = {Kind.OBJECT}
    if not by_name or len(by_name) > MAX_ALTERNATIVES or len(kinds) != 1:
        return None
    return Value(kinds.pop(), origin="|".join(dict.fromkeys(by_name[name].origin or "" for name in sorted(by_name))))


def _returns(fn: Function) -> list[tuple[ast.expr, Bindings]]:
    """Each `return`'s value with the bindings of each name that may reach it: a top-level `x = B(x)`
    hides the earlier bindings of `x` from the statements after it; a `return` inside a compound
    statement sees every binding of the function; a name bound otherwise is bound to nothing known."""
    bound: Bindings = {}  # every binding of each name
    last: Bindings = {}  # the bindings that reach the current top-level statement
    returned: list[tuple[ast.expr, Bindings]] = []
    for statement in fn.body:
        top = isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)
        for node in own_statements_from(statement):
            if isinstance(node, ast.Return):
                value = node.value if node.value is not None else ast.Constant(None)
                returned.append((value, dict(last) if node is statement else bound))
            elif isinstance(node, ast.ImportFrom) and node.names[0].name != "*":
                for name, full in imported_names(node):
                    bound.setdefault(name, []).append(Imported(spelled=full))
                    last[name] = [Imported(spelled=full)] if node is statement else [*last.get(name, ()), Imported(spelled=full)]
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                moved = _unmoved(node.value)
                if moved is not node.value and isinstance(moved, ast.Name) and moved.id == node.targets[0].id:
                    continue  # `net = net.to(device)`: the same object, as it was bound
                bound.setdefault(node.targets[0].id, []).append(node.value)
                last[node.targets[0].id] = [node.value] if top else [*last.get(node.targets[0].id, ()), node.value]
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Call):
                for place, target in enumerate(node.targets[0].elts):  # `model, criterion = build(args)`: kept apart
                    key = f"{getattr(target, 'id', '')}{UNPACKED}"  # (read only by `_handed_on`)
                    made = Unpacked(call=node.value, place=place) if not isinstance(target, ast.Starred) else ast.Constant(None)
                    bound.setdefault(key, []).append(made)
                    last[key] = [made] if node is statement else [*last.get(key, ()), made]
            else:
                for target in bound_targets(node):
                    name = getattr(target, "id", "")
                    bound.setdefault(name, []).append(ast.Constant(None))
                    last.setdefault(name, []).append(ast.Constant(None))
    return returned
