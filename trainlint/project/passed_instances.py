"""What a module with no training code of its own hands to other modules, read with Python's own
parser: the objects of classes it builds and passes to their functions and classes. A notebook that
builds `lstm = LSTMScratch(...)` and `d2l.RNNLMScratch(lstm, vocab_size=28)` hands an `LSTMScratch`
to `RNNLMScratch`'s `rnn`, though all its training happens in the library's `Trainer`."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol

from trainlint.model.lattice import MAX_ALTERNATIVES, Kind, origins
from trainlint.model.summary import ATTRIBUTES, Argument, ModuleSummary
from trainlint.model.torchnames import LIBRARY_CLASS, MODULE_MOVES, MODULE_WRAPPERS
from trainlint.project.outline_returns import BUILDERS
from trainlint.project.python_trees import children, python_tree, walk


class Finder(Protocol):
    """What resolving passed instances asks of the project phase (`index.Project`)."""

    def locate(self, importer: Path, qualname: str) -> tuple[Path, list[str]] | None: ...
    def locate_any(self, importer: Path, qualname: str) -> tuple[Path, list[str]] | None: ...
    def defined_in(self, path: Path, rest: list[str], hops: int) -> tuple[Path, list[str]] | None: ...
    def outline(self, path: Path, unknown_if_training: bool = False) -> ModuleSummary: ...
    def class_candidates(self, from_file: str, kind: str, qualname: str) -> tuple[str, ...]: ...


MAX_TABLE_CLASSES = 3  # (as for the objects a step calls: more say nothing)


def passed_instances(source: str) -> list[tuple[str, str, str]]:
    """(callee, parameter key, class) for each call of an imported name (or of an imported dict of
    functions, `[]losses.loss_registry`) that passes an object of a class: the callee and an imported
    class as the imports spell them in full ("d2l.torch.RNNLM"), a class of this module as "::Name"; the key is the position ("0") or the keyword. A name is an
    object of a class where every binding of it that can reach the call builds one; top-level
    statements rebind in order, a binding inside a compound statement joins the earlier ones."""
    try:
        tree = python_tree(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    imported: dict[str, str] = {}
    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    for node in walk(tree):  # (a function's own imports too: `from train.loops import train_epoch` in `main`)
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if alias.name != "*":
                    imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    out: list[tuple[str, str, str]] = []
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for name in functions:  # (a factory of this module, "::build_model_main": what it returns, the project phase reads)
        imported.setdefault(name, f"::{name}")
    given: dict[int, tuple[str, dict[str, set[str] | None]]] = {}  # what each call of a module function passes

    def emit(call: ast.Call, bound: Bound) -> None:
        if isinstance(call.func, ast.Name) and call.func.id in functions and call.func.id not in bound:
            given[id(call)] = (call.func.id, _given(call, functions[call.func.id], bound, classes, imported))
            return
        callee = _spelled(call.func, imported) or _method_of_bound(call.func, bound)
        if callee is None and isinstance(call.func, ast.Subscript):  # `loss_registry[cfg.loss](model, x)`
            table = _spelled(call.func.value, imported)
            callee = f"{TABLE}{table}" if table is not None else None
        if callee is None:
            return
        keyed: list[tuple[str, ast.expr]] = []
        for index, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break  # (positions after `*args` are not known)
            keyed.append((str(index), arg))
        keyed.extend((k.arg, k.value) for k in call.keywords if k.arg is not None)
        for key, arg in keyed:
            for built in _built(arg, bound, classes, imported):
                out.append((callee, key, built))

    _walk(tree.body, {}, True, emit, classes, imported)
    for node in tree.body:
        # (each function's own statements, and each method's: `Runner.train` building the model it passes)
        for function in [node] if not isinstance(node, ast.ClassDef) else node.body:
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                _walk(function.body, {}, True, emit, classes, imported)
    # a module function handed objects by this module's calls passes them on (`main` building the
    # criterion, `do_train(..., criterion)` handing it to `engine.train_one_epoch`): its statements
    # again, with its parameters bound where every call of it passes an object of a class
    walked: dict[str, Bound] = {}
    for _ in range(MAX_FORWARDING):
        params = _parameters(given.values())
        todo = [(name, bound) for name, bound in params.items() if walked.get(name) != bound]
        if not todo:
            break
        for name, bound in todo:
            walked[name] = bound
            _walk(functions[name].body, dict(bound), True, emit, classes, imported)
    return list(dict.fromkeys(out))


MAX_FORWARDING = 3  # module functions an object is handed through (`main` -> `do_train` -> `fit`)


def _given(call: ast.Call, function: ast.FunctionDef | ast.AsyncFunctionDef, bound: Bound, classes: set[str], imported: dict[str, str]) -> dict[str, set[str] | None]:
    """What a call of a module function passes for each of its parameters: the classes of the objects
    it built, or None (something else)."""
    names = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    out: dict[str, set[str] | None] = {name: None for name in names + [a.arg for a in function.args.kwonlyargs]}
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred) or index >= len(names):
            return {name: None for name in out}  # (`f(*args)`: which parameter gets what is not known)
        out[names[index]] = _built(arg, bound, classes, imported) or None
    for keyword in call.keywords:
        if keyword.arg is None:
            return {name: None for name in out}
        if keyword.arg in out:
            out[keyword.arg] = _built(keyword.value, bound, classes, imported) or None
    return out


def _parameters(calls: "Iterable[tuple[str, dict[str, set[str] | None]]]") -> dict[str, Bound]:
    """For each module function called, its parameters that every call passes an object of a class for."""
    joined: dict[str, dict[str, set[str] | None]] = {}
    for name, passed in calls:
        known = joined.get(name)
        if known is None:
            joined[name] = dict(passed)
            continue
        for param, made in passed.items():
            before = known.get(param)
            known[param] = before | made if before is not None and made is not None else None
    return {name: {p: m for p, m in passed.items() if m} for name, passed in joined.items() if any(passed.values())}


Bound = dict[str, "set[str] | None"]


def _walk(body: list[ast.stmt], bound: Bound, top: bool, emit: "Callable[[ast.Call, Bound], None] | None", classes: set[str], imported: dict[str, str]) -> None:
    """The statements of `body` in the order they run: each call sees the bindings that can reach it.
    At the top (a module's or function's own statements, or under `if __name__ == "__main__":`) a
    binding replaces the earlier ones; in a branch it joins them, the branches of an `if` or a `try`
    each start from what came before, and a loop's body is read twice (its later bindings reach its
    earlier calls on the next round)."""
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        branches = _branches(statement)
        if branches is None:  # a simple statement: its calls, then what it binds
            if emit is not None:
                for call in _calls(statement):
                    emit(call, bound)
            _bind(statement, bound, top, classes, imported)
            continue
        for header in _headers(statement):
            if emit is not None:
                for call in _calls(header):
                    emit(call, bound)
        _bind_header(statement, bound)
        main = top and _is_main_guard(statement)
        if isinstance(statement, (ast.For, ast.AsyncFor, ast.While)):
            for part in branches:
                _walk(part, bound, False, None, classes, imported)
            for part in branches:
                _walk(part, bound, False, emit, classes, imported)
            continue
        before = dict(bound)
        after: list[Bound] = []
        for part in branches:
            state = bound if main and part is statement.body else dict(before)  # type: ignore[attr-defined]
            _walk(part, state, main and part is statement.body, emit, classes, imported)  # type: ignore[attr-defined]
            after.append(state)
        if main:
            continue
        for name in {n for state in after for n in state}:
            values = [state.get(name, before.get(name, set())) for state in after]
            bound[name] = None if any(v is None for v in values) else set().union(*values)  # type: ignore[arg-type]


def _branches(statement: ast.stmt) -> list[list[ast.stmt]] | None:
    """The bodies a compound statement runs, or None for a simple statement."""
    if isinstance(statement, (ast.If, ast.For, ast.AsyncFor, ast.While)):
        return [statement.body, statement.orelse]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return [statement.body]
    if isinstance(statement, ast.Try):
        return [statement.body, *(h.body for h in statement.handlers), statement.orelse, statement.finalbody]
    return None


def _headers(statement: ast.stmt) -> list[ast.AST]:
    """The expressions a compound statement evaluates itself (its test, iterable, context managers)."""
    if isinstance(statement, (ast.If, ast.While)):
        return [statement.test]
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return [statement.iter]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return [i.context_expr for i in statement.items]
    return []


def _bind_header(statement: ast.stmt, bound: Bound) -> None:
    """A loop variable or a `with ... as` name is no object this module built."""
    for target in _bound_names(statement):
        bound[target] = None


def _bind(statement: ast.stmt, bound: Bound, top: bool, classes: set[str], imported: dict[str, str]) -> None:
    for node in _own_nodes(statement):
        places = _unpacked(node)
        prepared = _prepared(node, bound) if places is not None else None
        for target in _bound_names(node):
            made = _made_any(node.value, classes, imported, bound) if isinstance(node, ast.Assign) and len(node.targets) == 1 else set()
            if prepared is not None:  # `model, opt = accelerator.prepare(model, opt)`: each what it is given
                made = prepared.get(target, set())
            elif places is not None:  # `model, criterion, post = build_model(args)`: a place of what the call returns
                made = {f"{m}{PLACE}{places[target]}" for m in made if PLACE not in m and m[2:] not in classes and not m.startswith((TABLE, ATTRIBUTES))} if target in places else set()
            if top and isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                bound[target] = made or None
            else:
                earlier = bound.get(target, set())
                bound[target] = earlier | made if made and earlier is not None else None


PLACE = "#"  # `made#1`: the second place of the tuple a call of `made` returns


def _prepared(node: ast.Assign, bound: Bound) -> dict[str, set[str]] | None:
    """`model, optimizer = accelerator.prepare(model, optimizer)` with `accelerator` an Accelerate
    `Accelerator`: each target what its argument was bound to (Accelerate's `prepare` wraps what it is
    given and returns it in order); None for any other unpacking."""
    call, targets = node.value, node.targets[0].elts  # type: ignore[attr-defined]
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "prepare" and isinstance(call.func.value, ast.Name)):
        return None
    if bound.get(call.func.value.id) != {"accelerate.Accelerator"} or len(call.args) != len(targets) or call.keywords:
        return None
    return {t.id: set(bound.get(a.id) or ()) if isinstance(a, ast.Name) else set() for t, a in zip(targets, call.args)}  # type: ignore[attr-defined]


def _unpacked(node: ast.AST) -> dict[str, int] | None:
    """`a, b, c = f(...)`: each name's place in the tuple, where every target is a plain name."""
    if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.targets[0], (ast.Tuple, ast.List)):
        return None
    names = node.targets[0].elts
    if not isinstance(node.value, ast.Call) or not all(isinstance(n, ast.Name) for n in names):
        return None
    places: dict[str, int] = {}
    for index, name in enumerate(names):
        places.setdefault(name.id, index)  # type: ignore[attr-defined]
    return places


def _is_main_guard(statement: ast.stmt) -> bool:
    """`if __name__ == "__main__":`, whose body runs in order whenever the script does."""
    test = statement.test if isinstance(statement, ast.If) else None
    return (
        isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
        and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "__main__"
    )


def _calls(statement: ast.stmt) -> Iterator[ast.Call]:
    for node in _own_nodes(statement, expressions=True):
        if isinstance(node, ast.Call):
            yield node


def _own_nodes(statement: ast.AST, expressions: bool = False) -> Iterator[ast.AST]:
    """The statement and what is nested in it (statements only, or every node), not the insides of
    the functions, lambdas and classes it defines."""
    stack: list[ast.AST] = [statement]
    while stack:
        node = stack.pop()
        if node is not statement and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        if expressions:
            stack.extend(children(node))
        else:
            for name in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(node, name, None) or ())


def _bound_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
    else:
        return []
    return [name for t in targets for name in _target_names(t)]


def _target_names(target: ast.AST) -> list[str]:
    """The names an assignment target binds: `a`, `a, (b, *c)`; not `a.x = ...` nor `a[i] = ...`,
    which change the object `a` holds and leave the name bound to it."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _target_names(element)]
    return _target_names(target.value) if isinstance(target, ast.Starred) else []


def _spelled(func: ast.expr, imported: dict[str, str]) -> str | None:
    """An imported name called (`d2l.RNNLM`, `Trainer`), as the imports spell it in full."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or func.id not in imported:
        return None
    return ".".join((imported[func.id], *reversed(parts)))


TABLE = "[]"  # what `MODELS[cfg.name](...)` builds: a class (or a factory's) of an imported dict, `[]models.MODELS`


def _made(value: ast.expr, classes: set[str], imported: dict[str, str]) -> str | None:
    """What an expression calls to make an object: a class of this module ("::Name"), or an imported
    name (`d2l.GRU(...)`), which the project phase keeps only where it is a class, or an entry of an
    imported dict of classes (`TABLE`); else None."""
    if not isinstance(value, ast.Call):
        return None
    if isinstance(value.func, ast.Subscript):
        table = _spelled(value.func.value, imported)
        return f"{TABLE}{table}" if table is not None else None
    lookup = value.func
    if isinstance(lookup, ast.Call) and isinstance(lookup.func, ast.Name) and lookup.func.id == "getattr" and len(lookup.args) >= 2:
        module = _spelled(lookup.args[0], imported)  # `getattr(base_model, "build_%s" % args.model)(...)`
        return f"{ATTRIBUTES}{_name_prefix(lookup.args[1])}:{module}" if module is not None and not isinstance(lookup.args[1], ast.Constant) else None
    if isinstance(value.func, ast.Name) and value.func.id in classes:
        return f"::{value.func.id}"
    return _spelled(value.func, imported)


def _name_prefix(name: ast.expr) -> str:
    """The constant start of a name computed from a setting (`"build_%s" % args.model`: "build_"),
    as `candidates.name_prefix` reads it from libcst's tree."""
    if isinstance(name, ast.BinOp) and isinstance(name.op, (ast.Mod, ast.Add)) and isinstance(name.left, ast.Constant) and isinstance(name.left.value, str):
        return name.left.value.split("%")[0]
    if isinstance(name, ast.JoinedStr) and name.values and isinstance(name.values[0], ast.Constant) and isinstance(name.values[0].value, str):
        return name.values[0].value
    return ""


def _built(arg: ast.expr, bound: dict[str, set[str] | None], classes: set[str], imported: dict[str, str]) -> set[str]:
    if isinstance(arg, ast.Name):
        return bound.get(arg.id) or set()
    return _made_any(arg, classes, imported, bound)


def _made_any(value: ast.expr, classes: set[str], imported: dict[str, str], bound: Bound | None = None) -> set[str]:
    """The classes an expression makes an object of: one call, or either branch of a conditional
    (`PGPolicy(net) if discrete else A2CPolicy(net)`) where both make one; with `bound`, also an
    object already made, moved or wrapped (`model.to(device)`, `DDP(model)`, `torch.compile(model)`)."""
    if isinstance(value, ast.IfExp):
        body, orelse = _made_any(value.body, classes, imported, bound), _made_any(value.orelse, classes, imported, bound)
        return body | orelse if body and orelse else set()
    if bound is not None:
        value = _wrapped(value, imported)
        if isinstance(value, ast.Name):
            return bound.get(value.id) or set()
    made = _made(value, classes, imported)
    return {made} if made else set()


_WRAPPER_NAMES = frozenset(w.rpartition(".")[2] for w in MODULE_WRAPPERS)  # (as an import may spell them)


def _wrapped(value: ast.expr, imported: dict[str, str]) -> ast.expr:
    """`model.to(device)`, `DDP(model, ...)`, `torch.compile(model)`: the object inside."""
    for _ in range(4):
        if not isinstance(value, ast.Call):
            break
        func = value.func
        if isinstance(func, ast.Attribute) and func.attr in MODULE_MOVES:
            value = func.value
        elif value.args and (_spelled(func, imported) or "").rpartition(".")[2] in _WRAPPER_NAMES:
            value = value.args[0]
        else:
            break
    return value


def _method_of_bound(func: ast.expr, bound: Bound) -> str | None:
    """`diffusion.training_losses(...)` with `diffusion` bound only to an object of one imported
    class: that class's method, as the imports spell it; `loss_fn(model, x)`, its `__call__`."""
    name, method = (func.value, func.attr) if isinstance(func, ast.Attribute) else (func, "__call__")
    if not isinstance(name, ast.Name):
        return None
    made = bound.get(name.id)
    if not made or len(made) != 1:
        return None
    (cls,) = made
    return None if cls.startswith(("::", TABLE, ATTRIBUTES)) else f"{cls}.{method}"  # (`factory#1.method`: a place's method)


def resolved_arguments(project: Finder, real: Path, path: Path, passed: list[tuple[str, str, str]]) -> tuple[Argument, ...]:
    """The instances module `path` (resolved: `real`) passes to other project modules (`passed_instances`),
    resolved to the files that define the callee and the class; `project` finds names and outlines."""
    out: list[Argument] = []
    for spelled, key, origin in passed:
        # (a dict of functions called: each function it holds, where they are few)
        table = project.class_candidates(str(path), "functions", spelled[len(TABLE):]) if spelled.startswith(TABLE) else ()
        for callee in table if len(table) <= MAX_TABLE_CLASSES else ():
            out.extend(_resolved_argument(project, real, path, callee, key, origin))
        if not spelled.startswith(TABLE):
            out.extend(_resolved_argument(project, real, path, spelled, key, origin))
    return tuple(out)


def _resolved_argument(project: Finder, real: Path, path: Path, callee: str, key: str, origin: str) -> list[Argument]:
    """One instance passed to `callee` (as module `path` spells it, or "file::name"), resolved."""
    out: list[Argument] = []
    factory, _, placed = callee.partition(PLACE)
    place, _, method = placed.partition(".")
    where = project.locate_any(path, f"{factory}.{method}" if placed else callee)
    final = project.defined_in(where[0], where[1], hops=0) if where is not None else None
    if final is not None and len(final[1]) == 2 and final[1][0] in project.outline(final[0]).functions:
        final = _factory_method(project, final[0], *final[1], int(place) if place.isdigit() else None)
    elif placed:
        return out
    if final is None or len(final[1]) not in (1, 2):
        return out
    library = origin.startswith(f"{LIBRARY_CLASS}::")
    if origin.startswith("=") or library:  # what a call passes (a fact), or a library's class
        out.append(Argument(str(final[0]), ".".join(final[1]), key, LIBRARY_CLASS if library else "", origin.split("::")[-1]))
        return out
    if origin.startswith((TABLE, ATTRIBUTES)):  # each class the dict (or the module's names) may give, where they are few
        kind, name = ("table", origin[len(TABLE):]) if origin.startswith(TABLE) else origin.rsplit(":", 1)
        chosen = project.class_candidates(str(path), kind, name)
        for found in chosen if len(chosen) <= MAX_TABLE_CLASSES else ():
            file, _, name = found.rpartition("::")
            out.append(Argument(str(final[0]), ".".join(final[1]), key, file, name))
        return out
    cls: tuple[Path, list[str]] | None = (real, [origin[2:]])
    own, _, place = origin[2:].partition(PLACE)
    if origin.startswith("::") and own in project.outline(real).functions:  # (a factory of the module passing it)
        for file, name in _factory_classes(project, real, own, int(place) if place.isdigit() else None):
            out.append(Argument(str(final[0]), ".".join(final[1]), key, file, name))
        return out
    if not origin.startswith("::"):
        spelled, _, place = origin.partition(PLACE)
        found = project.locate_any(path, spelled)
        cls = project.defined_in(found[0], found[1], hops=0) if found is not None else None
        if cls is not None and len(cls[1]) == 1 and (place or cls[1][0] not in project.outline(cls[0]).classes):
            # (a function called, not a class built: the classes its outline says it returns)
            for file, name in _factory_classes(project, cls[0], cls[1][0], int(place) if place.isdigit() else None):
                out.append(Argument(str(final[0]), ".".join(final[1]), key, file, name))
            return out
    if cls is not None and len(cls[1]) == 1:
        out.append(Argument(str(final[0]), ".".join(final[1]), key, str(cls[0]), cls[1][0]))
    return out


def _factory_method(project: Finder, path: Path, factory: str, method: str, place: int | None = None) -> tuple[Path, list[str]] | None:
    """`diffusion.training_losses(model, ...)` after `diffusion = create_diffusion()`: the method of the
    one class factory `factory` of module `path` returns (`return SpacedDiffusion(...)`; or at `place`
    of the tuple it returns), where it is."""
    made = _factory_classes(project, path, factory, place)
    if len(made) != 1:
        return None
    file, cls = made[0]
    info = project.outline(Path(file)).classes.get(cls)
    return (Path(file), [cls, method]) if info is not None and method in info.methods else None


def _factory_classes(project: Finder, path: Path, name: str, place: int | None = None, hops: int = 0) -> list[tuple[str, str]]:
    """The project classes factory `name` of module `path` returns (`def build(cfg): return UNet(cfg)`),
    or returns at `place` of a tuple (`return model, criterion, postprocessors`), as (file, class), where
    its outline knows them and they are few; through a factory of another module it returns the call of
    (`def build_model(args): return build(args)` in a package's `__init__`); else none."""
    function = project.outline(path).functions.get(name)
    if function is None or hops > 3:
        return []
    value = function.returns
    if place is not None and value.kind is Kind.COLLECTION:
        value, place = (value.items[place], None) if value.items is not None and place < len(value.items) else (value, place)
    if value.kind not in (Kind.MODULE, Kind.OBJECT) or (place is not None and value.kind is Kind.MODULE):
        return []
    out: list[tuple[str, str]] = []
    made = origins(value)
    for origin in made if len(made) <= (MAX_TABLE_CLASSES if any(o.startswith(BUILDERS) for o in made) else MAX_ALTERNATIVES) else ():  # (a registry's builders: few)
        if origin.startswith(BUILDERS):  # (the tuple a builder function of a registry returns, handed on)
            builders = project.class_candidates(str(path), "builders", origin[len(BUILDERS):])
            for builder in builders if len(builders) <= MAX_TABLE_CLASSES else ():
                file, _, function = builder.rpartition("::")
                out.extend(_factory_classes(project, Path(file), function, place, hops + 1))
            continue
        file, _, cls = origin.rpartition("::")
        if not file:  # (a class the factory imports, as its module spells it)
            found = project.locate_any(path, origin)
            where = project.defined_in(found[0], found[1], hops=0) if found is not None else None
            if where is None or len(where[1]) != 1:
                continue
            file, cls = str(where[0]), where[1][0]
        if cls in project.outline(Path(file)).functions:
            out.extend(_factory_classes(project, Path(file), cls, place, hops + 1))
        elif place is None:
            out.append((file, cls))
    return out
