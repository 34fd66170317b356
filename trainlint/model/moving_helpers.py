"""Helpers that move what they are given to the device: `to_var(x)` (`x = x.cuda()` when a GPU is
there, then `return Variable(x)`), `utils.cuda([imgs, z])` returning `[x.cuda() for x in xs]`,
`self.get_torch_variable(arg)` returning `Variable(arg).cuda(self.cuda_index)`. A call of one is a
move of its argument (of each element of a list or tuple written there, or of each argument given for a
`*args`), as `arg.cuda()` is. What a host tensor is filled with before its move: the batch's own values
(a padded batch, data), or a device tensor (a copy back to the host). And what a function moves later
was on the host before the move (`placed_before_move`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.arguments import argument_for
from trainlint.model.names import dotted
from trainlint.model.arithmetic import built_on_host
from trainlint.model.parameter_facts import MOVES, keys
from trainlint.model.plain_bindings import is_dtype
from trainlint.model.lattice import ACCEL, HOST, UNKNOWN_DEVICE, Kind, Value
from trainlint.model.torchnames import LEGACY_CONSTRUCTORS, literal_string
from trainlint.model.walk import iter_nodes
from trainlint.model.value_calls import CONFIG_NAMES

if TYPE_CHECKING:
    from trainlint.model.facts import Assign, Call, Function, Site
    from trainlint.model.summary import FunctionSummary
    from trainlint.model.training import TrainingModel

MOVE_METHODS = frozenset({"cuda", "to"})
WRAPPERS = frozenset({"Variable", "autograd.Variable", "torch.autograd.Variable"})  # (a no-op since PyTorch 0.4)


def moved_parameter(m: "TrainingModel", fn: "Function") -> str | None:
    """"0 x" when every `return` of `fn` gives back its parameter `x` moved to the device, or as it
    came on a path without a GPU, and at least one moves it; None otherwise. Kept on the model: each
    call of the function, and each move inside it, asks."""
    memo = m.__dict__.setdefault("_moved_parameters", {})
    if id(fn) not in memo:
        memo[id(fn)] = _moved_parameter(m, fn)
    return memo[id(fn)]


def _moved_parameter(m: "TrainingModel", fn: "Function") -> str | None:
    params = fn.explicit_params
    if not fn.return_facts or not params:
        return None
    found: set[str] = set()
    moves = False
    for ret in fn.return_facts:
        given = _given(m, fn, ret.value, ret.site)
        if given is None:
            return None
        name, moved = given
        found.add(name)
        moves = moves or moved
    if len(found) != 1 or not moves:
        return None
    name = found.pop()
    star = fn.node.params.star_arg
    if isinstance(star, cst.Param) and star.name.value == name:
        # (`def to_cuda(*args)`: every positional argument from there on)
        return f"{len([p for p in (*fn.node.params.posonly_params, *fn.node.params.params) if p.name.value in params])} *{name}"
    return f"{params.index(name)} {name}" if name in params else None


def _given(m: "TrainingModel", fn: "Function", expr: cst.BaseExpression, site: object, depth: int = 0) -> tuple[str, bool] | None:
    """The parameter `expr` gives back, and whether moved; None when it gives anything else."""
    if depth > 4:
        return None
    if isinstance(expr, cst.Call) and expr.args and not expr.args[0].keyword and dotted(expr.func) in WRAPPERS:
        return _given(m, fn, expr.args[0].value, site, depth + 1)  # `Variable(x)`
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in MOVE_METHODS:
        if expr.func.attr.value == "to" and (not expr.args or literal_string(expr.args[0].value) == "cpu"):
            return None  # (`x.to("cpu")` moves nothing to a device)
        inner = _given(m, fn, expr.func.value, site, depth + 1)
        return (inner[0], True) if inner is not None else None
    if isinstance(expr, (cst.ListComp, cst.GeneratorExp)):  # `[x.cuda() for x in xs]`
        target, iterated = expr.for_in.target, expr.for_in.iter
        element = _unless_none(expr.elt)  # (`[None if x is None else x.cuda() for x in args]`)
        if expr.for_in.inner_for_in is not None or expr.for_in.ifs or not isinstance(target, cst.Name) or not isinstance(iterated, cst.Name):
            return None
        moved = isinstance(element, cst.Call) and isinstance(element.func, cst.Attribute) and element.func.attr.value in MOVE_METHODS
        if not moved or dotted(element.func.value) != target.value:  # type: ignore[union-attr]
            return None
        return (iterated.value, True) if iterated.value in fn.params else None
    if isinstance(expr, cst.Name) and expr.value in fn.params:
        bound = m.reaching(fn, expr.value, site)
        moved = False
        for a in bound:  # `x = x.cuda()` under `if torch.cuda.is_available():`
            given = _given(m, fn, a.value, a.site, depth + 1) if a.op is None and not a.unpacked else None
            if given is None or given[0] != expr.value:
                return None
            moved = moved or given[1]
        return expr.value, moved
    return None


def _unless_none(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`x.cuda()` of `None if x is None else x.cuda()` (or of `x.cuda() if x is not None else None`)."""
    if isinstance(expr, cst.IfExp):
        if isinstance(expr.body, cst.Name) and expr.body.value == "None":
            return expr.orelse
        if isinstance(expr.orelse, cst.Name) and expr.orelse.value == "None":
            return expr.body
    return expr


def moved_arguments(m: "TrainingModel", call: "Call", callee: "Function | None", summary: "FunctionSummary | None") -> list[cst.BaseExpression]:
    """What a call of a moving helper (`callee` of this module, else the project function `summary`
    describes) moves: the argument for the parameter it moves, each element of a list or tuple
    written there (`utils.cuda([imgs, z])`), or each positional argument from there on for a `*args`
    parameter (`to_cuda(x, lengths, y)`); empty for any other call."""
    key = moved_parameter(m, callee) if callee is not None else next(iter(keys(summary, MOVES)), None)
    index, _, name = (key or "").partition(" ")
    if name.startswith("*") and index.isdigit():
        positional = [a for a in call.node.args if a.keyword is None]
        cut = next((i for i, a in enumerate(positional) if a.star), len(positional))
        return [a.value for a in positional[int(index):cut]]
    given = argument_for(call.node, key) if key is not None else None
    if given is None:
        return []
    return [e.value for e in given.elements] if isinstance(given, (cst.List, cst.Tuple)) else [given]


def moved_host_tensors(m: "TrainingModel", call: "Call") -> list[cst.BaseExpression]:
    """The tensors built on the host from factories (`torch.randn(n, d)`, a name bound to one) that a
    call run every step hands to a moving helper, which copies them to the device."""
    if not call.node.args:
        return []
    local = m.called_function(call)
    summary = m.project_call_summary(call) if local is None else None
    if (local is None and not keys(summary, MOVES)) or (local is not None and not local.return_facts) or not m.every_step(call.site):
        return []
    out = []
    for given in moved_arguments(m, call, local, summary):
        value = m.value(given, call.site)
        if built_on_host(value) and not (value.origin or "").endswith("_like") and not filled_with_data(m, given, call.site):
            out.append(given)
    return out


def copied_from_device(model: "TrainingModel", expr: cst.BaseExpression, site: "Site") -> bool:
    """A value assigned into a host tensor that lives on the accelerator: known to be there, or a tensor
    of unknown place that the object's own modules compute (`x, _ = self.lstm(x)` in a `forward`).
    Drawn from a helper's arguments alone (`outputs[i] = imgs[i]` in an augmentation helper), its
    place is the callers', which often hand it host batches before they move them."""
    given = model.value(expr, site)
    if given.device == ACCEL and given.kind in (Kind.TENSOR, Kind.UNKNOWN):
        return True
    on_device = given.is_tensor and given.device != HOST
    return on_device and site.function is not None and any(r.split(".", 1)[0] == "self" for r in model.roots_of(expr, site.function))


def filled_with_data(model: "TrainingModel", expr: cst.BaseExpression, site: "Site", depth: int = 0) -> bool:
    """A tensor a factory built on the host (`seq_tensor = torch.zeros((n, max_len)).long()`) that the
    function fills with the batch's own values before the move (`seq_tensor[i, :len] = torch.LongTensor(seq)`),
    or that a function of this module fills so and returns (a histogram of the batch's labels): a
    padded batch, data, not a constant; filled with numbers, host constants or device values
    (`x_pad[:, :n] = x`), it could have been built on the device."""
    name = expr
    while isinstance(name, cst.Subscript):  # (`seq_tensor[perm_idx]`: rows of it)
        name = name.value
    call = model.call_at(name) if isinstance(name, cst.Call) else None
    if call is not None and depth < 2:  # `self._label_vector(target, n)`: a helper here fills what it returns
        helpers = model.callees(call)
        return bool(helpers) and all(
            fn.return_facts and all(filled_with_data(model, r.value, r.site, depth + 1) for r in fn.return_facts) for fn in helpers
        )
    if not isinstance(name, cst.Name) or site.function is None:
        return False
    fills = [a for a in model.assigns if a.targets == (f"{name.value}[]",) and a.site.function is site.function and a.site.order < site.order]
    return any(_data_tensor(model, a.value, a.site) and not copied_from_device(model, a.value, a.site) for a in fills)


_CONSTRUCTORS = LEGACY_CONSTRUCTORS | {"tensor", "as_tensor", "from_numpy"}


def _data_tensor(model: "TrainingModel", expr: cst.BaseExpression, site: "Site") -> bool:
    """A tensor made of values the analysis does not know as numbers (`torch.LongTensor(seq)` of a
    row of the batch), or computed from such tensors without a graph."""
    if isinstance(expr, cst.Call) and expr.args and (model.imports.resolve(expr.func) or "").removeprefix("torch.") in _CONSTRUCTORS:
        given = model.value(expr.args[0].value, site)
        return given.kind is Kind.UNKNOWN or (given.kind is Kind.COLLECTION and (given.element is None or given.element.kind is Kind.UNKNOWN))
    value = model.value(expr, site)  # (an activation, carrying a graph, is no data)
    return value.kind is Kind.TENSOR and not built_on_host(value) and value.graph is False


def placed_before_move(m: "TrainingModel", value: "Value", name: str, at: "Site | None", assigns: list) -> "Value":  # type: ignore[type-arg]
    """`value`, which `name` holds at `at` with its binding `assigns` (none: a parameter's), placed on
    the host where the program moves what it holds to the device later, whenever `at` runs (under no
    `if` or `except` that `at` is not under): `to_cuda(x, lengths, y)` or `x = x.cuda()` after
    `assert len(y) == (lengths - 1).sum().item()` tells that the batch was not there yet (the move
    would be pointless otherwise). Also through what is computed from it on the way (`x, y, mask =
    self.mask_out(x, lengths)`, `x = concat(x1, x2)`, then `to_cuda(x, y, mask)`), and through a
    `return` whose every caller in the module moves what it gets. Only a value of unknown place and no
    graph: a forward's output moved to another device (a pipeline's stages) was on one."""
    fn = at.function if at is not None else None
    if fn is None or value.kind not in (Kind.TENSOR, Kind.UNKNOWN) or value.device != UNKNOWN_DEVICE or value.graph:
        return value
    flows = _flows(m)
    if not flows.moves or (id(fn) not in flows.moving and not fn.return_facts):
        return value  # (nothing moved here, and nothing handed back to a caller that may move it)
    key = (id(fn), name, *sorted(id(a) for a in assigns), at.order)  # type: ignore[union-attr]
    if key not in flows.answers:
        flows.answers[key] = False  # (asked again on the way: not known to be moved)
        flows.answers[key] = _moved_later(m, flows, fn, name, {id(a) for a in assigns}, at)  # type: ignore[arg-type]
    # (its factory, if one is named, is no proof that nothing in it came from data: the place was unknown)
    return replace(value, device=HOST, origin=None) if flows.answers[key] else value


class _Flows:
    """Per module: the sites where each function moves a name to the device, the assignments that read
    a name, and the answers given."""

    def __init__(self) -> None:
        self.moves: dict[tuple[int, str], list[Site]] = {}
        self.moving: set[int] = set()  # the functions that move something
        self.reads: dict[tuple[int, str], list[Assign]] = {}
        self.returned: dict[int, list[tuple[Site, set[str]]]] = {}  # per function: each `return`, and the names it hands back
        self.answers: dict[tuple[object, ...], bool] = {}
        self.copies: set[tuple[int, str]] = set()  # (site, collection): a collection copied element by element there

    def returns(self, fn: "Function") -> list[tuple["Site", set[str]]]:
        """Each `return` of `fn` with the names it hands back (not through a copy to the host)."""
        found = self.returned.get(id(fn))
        if found is None:
            found = self.returned[id(fn)] = []
            for r in fn.return_facts:
                nodes = list(iter_nodes(r.value)) if r.value is not None else []
                found.append((r.site, set() if _copies_to_host(nodes) else _names(nodes)))
        return found


def _moved_later(m: "TrainingModel", flows: _Flows, fn: "Function", name: str, bound: set[int], since: "Site", depth: int = 0) -> bool:
    """Whether what `name` holds from `bound` at `since` reaches a move, in `fn` or, through its
    `return`, in every caller of the module (a few steps of the flow at most)."""
    todo, seen, origin = [(name, bound, since)], 0, since
    while todo and seen < 24:
        name, bound, since = todo.pop(0)
        seen += 1

        def reaches(site: "Site", earlier: bool = False) -> bool:  # (on one path at least: a move on a branch still tells)
            if not earlier and not _later(site, since):
                return False
            found = {id(a) for a in m.reaching(fn, name, site)}
            return bound <= found if bound else not found or m.parameter_reaches(fn, name, site)

        # (each step runs whenever the read did: `if torch.cuda.is_available(): w = torch.ones_like(x).cuda()`
        # is a move made in case, which tells nothing of where `x` was; a collection copied element by
        # element before the read tells as much: `obs = {k: v.to(device) for k, v in batch.items()}`, then
        # `batch["reward"].item()`; a tensor's own `x.cuda()` before it may be a move made in case)
        if any(_unconditional(site, origin) and reaches(site, earlier=(id(site), name) in flows.copies) for site in flows.moves.get((id(fn), name), ())):
            return True
        for a in flows.reads.get((id(fn), name), ()):
            if _unconditional(a.site, origin) and reaches(a.site):
                todo.extend((target, {id(a)}, a.site) for target in _plain(a.targets))
        if depth >= 2 or not any(name in names and _unconditional(site, origin) and reaches(site) for site, names in flows.returns(fn)):
            continue
        callers = m.calls_of(fn)
        into = [next((a for a in m.assigns_in(c.site.statement) if a.value is c.node), None) for c in callers]
        if callers and all(
            a is not None and a.site.function is not None
            and any(_moved_later(m, flows, a.site.function, t, {id(a)}, a.site, depth + 1) for t in _plain(a.targets))
            for a in into
        ):
            return True
    return False


def _plain(targets: "tuple[str, ...]") -> list[str]:
    """The plain names among an assignment's targets (not `self.x` or `x[i]`)."""
    return [t for t in targets if t.isidentifier()]


def _names(nodes: "list[cst.CSTNode]") -> set[str]:
    """The names read among `nodes` (not the attribute names of `a.b`, nor keywords)."""
    skipped = {id(n.attr) for n in nodes if isinstance(n, cst.Attribute)} | {id(n.keyword) for n in nodes if isinstance(n, cst.Arg) and n.keyword is not None}
    # (`x.size(1)`, `x.shape`, `len(x)`: what is read of `x` is a number, wherever `x` is)
    skipped |= {id(n.value) for n in nodes if isinstance(n, cst.Attribute) and n.attr.value in METADATA}
    skipped |= {id(n.args[0].value) for n in nodes if isinstance(n, cst.Call) and dotted(n.func) == "len" and n.args}
    return {n.value for n in nodes if isinstance(n, cst.Name) and id(n) not in skipped}


METADATA = frozenset({"shape", "size", "dim", "ndim", "dtype", "device", "numel", "is_cuda"})


def _copies_to_host(nodes: "list[cst.CSTNode]") -> bool:
    return any(
        isinstance(n, cst.Call) and ((isinstance(n.func, cst.Attribute) and n.func.attr.value in HOST_COPIES) or dotted(n.func) in ("float", "int", "list"))
        for n in nodes
    )


HOST_COPIES = frozenset({"cpu", "numpy", "tolist", "item"})


def _unconditional(site: "Site", since: "Site") -> bool:
    """`site` is under no `if` (or `else`, or `except` handler) that `since` is not under: it runs
    whenever `since` did (a move under `if mode == "cpu":`, or in the handler of an out-of-memory error,
    brings back what that path copied to the host, on that path only)."""
    gates, held = site.gate_nodes, since.gate_nodes
    return (since.in_except or not site.in_except) and len(gates) <= len(held) and all(a is b for a, b in zip(gates, held)) and {id(n) for n in site.else_of} <= {id(n) for n in since.else_of}


def _later(site: "Site", since: "Site") -> bool:
    """`site` runs after `since` in one pass of the function (or in its statement: `x = f(x)`)."""
    return site.order > since.order or (site.statement is not None and site.statement is since.statement)


def _flows(m: "TrainingModel") -> _Flows:
    """The module's `_Flows`, made once (kept on the model)."""
    found = m.__dict__.get("_flows")
    if found is not None:
        return found
    flows = m.__dict__["_flows"] = _Flows()
    wholes = _moved_element_by_element(m)
    for call in m.calls:
        fn = call.site.function
        if fn is None:
            continue
        if call.method in MOVE_METHODS and isinstance(call.receiver, cst.Name):
            if call.method == "cuda" or (
                not _to_where_another_is(call.node) and not (call.node.args and is_dtype(m, call.node.args[0].value, call.site)) and m.values._moved(Value(Kind.TENSOR), call.node, fn, call.site).device == ACCEL
            ):
                flows.moves.setdefault((id(fn), call.receiver.value), []).append(call.site)
                for whole in wholes.get(id(call.receiver), ()) if not _copies_dropped(call) else ():
                    flows.moves.setdefault((id(fn), whole), []).append(call.site)
                    flows.copies.add((id(call.site), whole))
                flows.moving.add(id(fn))
            continue
        if not any(isinstance(a.value, cst.Name) for a in call.node.args) or not isinstance(call.node.func, (cst.Name, cst.Attribute)):
            continue
        if call.method in MOVE_METHODS or (call.qualname or "").startswith("torch."):
            continue
        # (what the call runs, read from the names alone: asking values here would ask this again)
        local = m.callee(call)
        symbol = m.project_symbol(call.qualname) if local is None and call.qualname is not None else None
        summary = symbol if symbol is not None and hasattr(symbol, "parameter_facts") else None
        for given in moved_arguments(m, call, local, summary) if local is not None or summary is not None else ():
            if isinstance(given, cst.Name):
                flows.moves.setdefault((id(fn), given.value), []).append(call.site)
                flows.moving.add(id(fn))
    for a in m.assigns if flows.moves else ():
        fn = a.site.function
        if a.op is None and fn is not None and (id(fn) in flows.moving or fn.return_facts) and _plain(a.targets):
            nodes = list(iter_nodes(a.value))
            for n in set() if _copies_to_host(nodes) else _names(nodes):
                flows.reads.setdefault((id(fn), n), []).append(a)
    return flows


def _moved_element_by_element(m: "TrainingModel") -> dict[int, tuple[str, ...]]:
    """The uses of a variable that stands for each element of a named collection, to that collection's
    name: `v` of `{k: v.to(device) for k, v in batch.items()}` (or `for t in batch`, `batch.values()`)
    and `x` of `map_structure(batch, lambda x: x.to(device))`, a function given both. Moving such an
    element moves the collection's values (the loader's batch), not a name bound anew."""
    out: dict[int, tuple[str, ...]] = {}
    for comp in m.comprehensions:
        clause: cst.CompFor | None = comp.for_in
        scopes: list[cst.CSTNode] = [comp.key, comp.value] if isinstance(comp, cst.DictComp) else [comp.elt]
        while clause is not None:
            source = clause.iter
            if isinstance(source, cst.Call) and isinstance(source.func, cst.Attribute) and source.func.attr.value in ("items", "values") and not source.args:
                source = source.func.value
            target = clause.target
            names = [target] if isinstance(target, cst.Name) else [e.value for e in target.elements] if isinstance(target, cst.Tuple) else []
            element = names[-1] if names and isinstance(names[-1], cst.Name) else None  # (`k, v`: the value)
            if isinstance(source, cst.Name) and element is not None:
                _note_uses(out, scopes, element.value, (source.value,))
            clause = clause.inner_for_in
    for call in m.calls:
        given = tuple(a.value.value for a in call.node.args if isinstance(a.value, cst.Name) and not a.star)
        for arg in call.node.args if given else ():
            function = arg.value
            if isinstance(function, cst.Lambda) and len(function.params.params) == 1:
                _note_uses(out, [function.body], function.params.params[0].name.value, given)
    return out


def _copies_dropped(call: "Call") -> bool:
    """The element-wise copies a statement of its own makes and drops: `[m.cuda() for m in nets]`, which
    moves modules in place, or `list(map(lambda m: m.cuda(), nets))`."""
    statement = call.site.statement
    expressions = [s.value for s in statement.body if isinstance(s, cst.Expr)] if statement is not None else []
    return any(_dropping(e) and any(n is call.node for n in iter_nodes(e)) for e in expressions)


def _dropping(expression: cst.BaseExpression) -> bool:
    """A comprehension, or a call of `list`/`map`/... or one given a lambda: what it builds is dropped
    when it is a statement (a call taking the copy, `model(**{k: v.cuda() for ...})`, uses it)."""
    if isinstance(expression, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
        return True
    return isinstance(expression, cst.Call) and (dotted(expression.func) in ("list", "tuple", "set", "map") or any(isinstance(a.value, cst.Lambda) for a in expression.args))


def _note_uses(out: dict[int, tuple[str, ...]], scopes: "list[cst.CSTNode]", name: str, wholes: tuple[str, ...]) -> None:
    for node in (n for scope in scopes for n in iter_nodes(scope)):
        if isinstance(node, cst.Name) and node.value == name:
            out[id(node)] = wholes


def _to_where_another_is(call: cst.Call) -> bool:
    """`x_pad.to(x.device)`: sent where another tensor is, which may be where it already was (not
    `self.device` or `args.device`, a setting)."""
    first = call.args[0].value if call.args else None
    base = first.value if isinstance(first, cst.Attribute) and first.attr.value == "device" else None
    return isinstance(base, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)) and (dotted(base) or "").split(".")[0] not in CONFIG_NAMES | {"self"}
