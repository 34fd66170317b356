"""Where a step's data comes from and goes to on the host by nature (reinforcement learning, prioritised
replay): an environment's observations, the actions it is given, and the priorities handed back to the
buffer a batch was drawn from. Their transfers are the algorithm's, with nothing to remove.

An environment is known by what the code does with it, not by its name: it is the receiver of a
`.step(...)` that updates no weights (`env.step(action)`, not `optimizer.step()`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import libcst as cst

from trainlint.model.arguments import argument_for
from trainlint.model.containers import is_empty_list
from trainlint.model.data_sources import NUMPY_COMBINING, bound_to_read_data, drawn, read_data, stored_rows
from trainlint.model.lattice import ACCEL, HOST, Kind
from trainlint.model.gates import child_nodes
from trainlint.model.names import dotted, target_names
from trainlint.model.walk import iter_nodes
from trainlint.model.torchnames import LEGACY_CONSTRUCTORS

if TYPE_CHECKING:
    from trainlint.model.facts import Assign, Call, Function, Site
    from trainlint.model.lattice import Value
    from trainlint.model.training import TrainingModel

MAX_DEPTH = 3
RETURNED = "->"  # the key of `project_arguments`' fact on what a call's caller does with its result
ENV = "env"  # that fact: the result is handed to an environment's step
OBSERVATION = "obs"  # an argument's fact: an observation an environment returned
AFTER = "+"  # the key of the fact on what the caller runs after the call, in the same step
BACKWARD = "backward"  # that fact: a backward (which consumes a graph the callee retained)
_RESHAPES = frozenset({"reshape", "view", "flatten", "squeeze", "unsqueeze", "copy"})


def environment_steps(model: "TrainingModel") -> dict[object, list["Call"]]:
    """`.step(...)` calls that update no weights (an environment's), by function; computed once."""
    cached = getattr(model, "_environment_steps", None)
    if cached is None:
        cached = {}
        for call in model.calls:
            if call.method == "step" and call.node.args and not model.is_optimizer_step(call):
                cached.setdefault(call.site.function, []).append(call)
        model._environment_steps = cached  # type: ignore[attr-defined]
    return cached


def environments(model: "TrainingModel") -> frozenset[str]:
    """The texts of the objects this module steps as environments (`self.env`, `envs`)."""
    return frozenset(c.receiver_text for calls in environment_steps(model).values() for c in calls if c.receiver_text)


def feeds_environment(model: "TrainingModel", call: "Call", depth: int = 0) -> bool:
    """Whether what `call` reads reaches an environment's step: `actions = q.argmax(1).cpu().numpy();
    envs.step(actions)` in one function, or `action = int(q.argmax().item()); return action` in a
    helper whose every caller in this module hands the result to an environment."""
    node = call.node
    fn = call.site.function
    targets = _bound_to(model, call)
    for step in environment_steps(model).get(fn, ()):
        args = [a.value for a in step.node.args]
        if any(contains(v, node) for v in args) or any(dotted(v) in targets for v in args):
            return True
    if fn is None or depth >= MAX_DEPTH or not fn.return_facts:
        return False
    # (also what the function computes from the copy: `dist = self(x).data.cpu()`, then `action =
    # dist.sum(2).max(1)[1].numpy()[0]` returned)
    # (`return action[0]` of `action = action.detach().cpu().numpy()`: an element of the copy)
    returned = any(contains(r.value, node) or (isinstance(r.value, (cst.Name, cst.Subscript)) and bool(targets & model.roots_of(r.value, fn))) for r in fn.return_facts)
    if not returned:
        return False
    callers = [*model.calls_of(fn), *model.method_calls_of(fn)]
    # (and every call other modules make of it every step hands the result to an environment: `action =
    # policy.select_action(state)` before `env.step(action)` in the script, `project_arguments`' facts)
    external = model.passed_facts(fn, RETURNED) if model.project is not None else None
    return bool(callers or external) and all(feeds_environment(model, c, depth + 1) for c in callers) and all(f == ENV for f in external or ())


def _bound_to(model: "TrainingModel", call: "Call") -> set[str]:
    """The names the statement of `call` binds to what holds its result (`actions` of `actions = q.cpu()`)."""
    return {
        t for a in model.assigns_in(call.site.statement)
        if a.site.function is call.site.function and contains(a.value, call.node) for t in a.targets
    }


OBSERVATION_COPIES = frozenset({"numpy.array", "numpy.asarray", "numpy.copy", "copy.copy", "copy.deepcopy"})
_WRAPPING = frozenset({"torch.tensor", "torch.as_tensor", "torch.from_numpy"})
_MOVES = frozenset({"to", "cuda", "float", "long", "double", "int"})


def _unreshaped(expr: cst.BaseExpression) -> cst.BaseExpression:
    """What a chain of reshapes starts from (`state.reshape(1, -1)`: the same data)."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _RESHAPES:
        expr = expr.func.value
    return expr


def wraps_observation(model: "TrainingModel", expr: cst.BaseExpression, fn: "Function | None", at: "Site | None") -> bool:
    """`torch.FloatTensor(state).reshape(shape)` of an observation (`observed`): the legacy constructor
    that wraps it, reshaped, holds data as the observation does."""
    expr = _unreshaped(expr)
    if not isinstance(expr, cst.Call) or not expr.args:
        return False
    factory = model.imports.resolve(expr.func) or ""
    return factory.startswith("torch.") and factory[6:] in LEGACY_CONSTRUCTORS | {"Tensor"} and observed(model, expr.args[0].value, fn, at)


def observed(model: "TrainingModel", expr: cst.BaseExpression, fn: "Function | None", at: "Site | None", depth: int = 0) -> bool:
    """Whether `expr` is what an environment returned: `torch.tensor([self.state])` where
    `self.state = self.env.reset()` and later the `new_state` of `self.env.step(action)`. Such data
    reaches the step from the host every time, as a loader's batch does."""
    if isinstance(expr, (cst.List, cst.Tuple)):
        elements = [e.value for e in expr.elements if isinstance(e, cst.Element)]
        return bool(elements) and all(observed(model, e, fn, at, depth) for e in elements)
    if depth >= MAX_DEPTH:
        return False
    assigns: list["Assign"] = []
    if isinstance(expr, cst.Call) and model.imports.resolve(expr.func) in OBSERVATION_COPIES and expr.args:
        expr = expr.args[0].value  # (`np.array(state)`, `copy.copy(next_state)`)
    expr = _unreshaped(expr)
    if isinstance(expr, cst.Call) and model.imports.resolve(expr.func) in OBSERVATION_COPIES and expr.args:
        expr = expr.args[0].value
    if isinstance(expr, cst.Name) and at is not None:
        assigns = model.reaching(fn, expr.value, at)
        if not assigns and fn is not None and expr.value in fn.params:
            # a parameter every call of this module (`policy.get_action(state)`), and every step call of
            # another module, passes an observation for
            passed = model.passed_facts(fn, expr.value) if model.project is not None else None  # type: ignore[attr-defined]
            calls = [c for c in (*model.calls_of(fn), *model.method_calls_of(fn)) if not c.site.in_except]
            given = [argument_for(c.node, f"{fn.explicit_params.index(expr.value)} {expr.value}") for c in calls] if expr.value in fn.explicit_params else [None]
            if (passed is None and not calls) or any(g is None for g in given) or any(f != OBSERVATION for f in passed or ()):
                return False
            return all(observed(model, g, c.site.function, c.site, depth + 1) for g, c in zip(given, calls))  # type: ignore[arg-type]
    elif isinstance(expr, cst.Attribute) and fn is not None and fn.class_name is not None:
        text = dotted(expr)
        if text is not None and text.startswith("self.") and text.count(".") == 1:
            assigns = model.attribute_assigns(fn.class_name, text)
    name = expr.value if isinstance(expr, cst.Name) else None
    assigns = [a for a in assigns if name is None or not _converts_itself(model, a.value, name)]
    return bool(assigns) and all(_from_environment(model, a, depth, name) for a in assigns)


def wraps_data(model: "TrainingModel", value_of: "Callable[..., Value]", given: cst.BaseExpression, fn: "Function | None", at: "Site | None") -> bool:
    """What `torch.FloatTensor(given)` wraps is data: what a replay buffer's `sample` returned, rows of
    an array it holds, an environment's observation (here or passed in), also through NumPy's
    conversions and arithmetic with a number (`torch.FloatTensor(1 - np.float32(done))`)."""
    for _ in range(3):
        if isinstance(given, cst.BinaryOperation) and isinstance(given.left, (cst.Integer, cst.Float)):
            given = given.right
        elif isinstance(given, cst.Call) and len(given.args) == 1 and (model.imports.resolve(given.func) or "").startswith("numpy."):
            given = given.args[0].value
    return (isinstance(given, cst.Name) and bound_to_read_data(model, value_of, given, fn, at)) or stored_rows(model, given, fn) or observed(model, given, fn, at)


def holds_data(
    model: "TrainingModel", value_of: "Callable[..., Value]", iterated: "Callable[..., bool]",
    given: cst.BaseExpression, fn: "Function | None", at: "Site | None", read: bool = True, depth: int = 0,
) -> bool:
    """What a constructor wraps is data, not numbers the code chose: the batch a loop draws (`iterated`),
    an observation, rows of a buffer, what a function read (unless not `read`); also a name bound only
    to a conversion of such (`points = points.data.numpy()` of the loader's batch, then augmented)."""
    if iterated(given, fn, at) or wraps_data(model, value_of, given, fn, at) or drawn(model, given, fn, at) or (read and read_data(model, value_of, given, fn, at)):
        return True
    if isinstance(given, cst.Name) and at is not None and at.statement is not None and _comprehension_drawn(at.statement, given.value):
        return True
    if isinstance(given, (cst.ListComp, cst.GeneratorExp)) and _drawn_for(given.for_in) and _held_data(given, value_of(given.for_in.iter, fn, at)):
        # `[pad_seq(s, n) for s in input_seqs]`: rows made from a collection the code holds (not from values
        # read back from the device, `[mapping[a] for a in target.tolist()]`: those crossed once already)
        return not _read_back(given.for_in.iter, value_of, fn, at)
    if isinstance(given, cst.List) and given.elements and all(isinstance(e, cst.StarredElement) for e in given.elements):
        # `[*map(len, comp_ids)]`, `[*chain(*comp_ids)]` of the batch's own lists: what they hold, unpacked
        return all(_unpacks_data(model, value_of, iterated, e.value, fn, at, read, depth) for e in given.elements)
    if isinstance(given, cst.Subscript) and isinstance(given.value, cst.Name) and _constant_key(given):
        # `transitions["actions"]` of `transitions = self.buffer.sample(n)`: a field of the data
        return holds_data(model, value_of, iterated, given.value, fn, at, read, depth)
    if isinstance(given, cst.Call) and given.args and isinstance(given.args[0].value, (cst.List, cst.Tuple)) and given.args[0].value.elements:
        # `np.concatenate([obs, goal], axis=1)` of the sampled batch's fields: the batch's own arrays joined
        joined = (model.imports.resolve(given.func) or "").split(".")
        return joined[0] == "numpy" and joined[-1] in NUMPY_COMBINING and all(
            holds_data(model, value_of, iterated, e.value, fn, at, read, depth) for e in given.args[0].value.elements
        )
    if not isinstance(given, cst.Name) or at is None or depth >= 2:
        return False
    bound = model.reaching(fn, given.value, at)
    if not bound and fn is not None and given.value in fn.explicit_params:
        return _passed_data(model, value_of, iterated, fn, given.value, read, depth)
    if bound and all(is_empty_list(a, given.value) for a in bound):
        return _appended_data(model, value_of, iterated, given.value, fn)
    return bool(bound) and all(
        a.op is None and not a.unpacked and a.value is not None and holds_data(model, value_of, iterated, _unconverted(a.value), fn, a.site, read, depth + 1)
        for a in bound
    )


def _appended_data(
    model: "TrainingModel", value_of: "Callable[..., Value]", iterated: "Callable[..., bool]",
    name: str, fn: "Function | None",
) -> bool:
    """`labels = []` filled in the function only by appends of what a loop draws (`labels.append(v)`, or
    `labels.append(classes[int(v)])` in `for v in batch_labels:`), from loops over no device tensor: rows its
    own values make (not numbers a function returned, `rewards.append(get_score(net))`: host constants)."""
    appends = [c for c in model.calls if c.receiver_text == name and c.site.function is fn and c.method == "append"]
    return bool(appends) and all(
        len(c.node.args) == 1 and c.node.args[0].keyword is None and not c.node.args[0].star
        and all(value_of(loop.node.iter, fn, c.site).device != ACCEL for loop in c.site.loops if isinstance(loop.node, cst.For))
        and (iterated(c.node.args[0].value, fn, c.site) or drawn(model, c.node.args[0].value, fn, c.site))
        for c in appends
    ) and not any(c.receiver_text == name and c.site.function is fn and c.method in ("extend", "insert") for c in model.calls)


def _unpacks_data(
    model: "TrainingModel", value_of: "Callable[..., Value]", iterated: "Callable[..., bool]",
    given: cst.BaseExpression, fn: "Function | None", at: "Site | None", read: bool, depth: int,
) -> bool:
    """An iterable made from data: a name holding data, `map(f, data)`, or `itertools.chain(*data)` (not
    what any other call returns: `[*bytes(t, "UTF-8")]` of a string written in the code is numbers)."""
    if isinstance(given, cst.Call) and len(given.args) > 1 and dotted(given.func) == "map" and model.local_function("map") is None:
        return all(holds_data(model, value_of, iterated, a.value, fn, at, read, depth) for a in given.args[1:])
    if isinstance(given, cst.Call) and given.args and model.imports.resolve(given.func) == "itertools.chain":
        return all(holds_data(model, value_of, iterated, a.value, fn, at, read, depth) for a in given.args)
    return isinstance(given, cst.Name) and holds_data(model, value_of, iterated, given, fn, at, read, depth)


def _passed_data(
    model: "TrainingModel", value_of: "Callable[..., Value]", iterated: "Callable[..., bool]",
    fn: "Function", name: str, read: bool, depth: int,
) -> bool:
    """Every call of `fn` in this module passes data for parameter `name` (a step's helper given the
    batch the loop draws: `self.add_losses(trg_comp_ids)`)."""
    from trainlint.model.branches import passed_argument

    calls = [*model.calls_of(fn), *model.method_calls_of(fn)]
    given = [passed_argument(fn, c, name) if not any(a.star for a in c.node.args) else None for c in calls]
    return bool(calls) and all(
        g is not None and holds_data(model, value_of, iterated, g, c.site.function, c.site, read, depth + 1) for c, g in zip(calls, given)
    )


def wrapped_data(
    model: "TrainingModel", value_of: "Callable[..., Value]", iterated: "Callable[..., bool]",
    given: cst.BaseExpression, fn: "Function | None", at: "Site | None",
) -> bool:
    """What the one argument of a legacy constructor holds is data (`holds_data`, but not what any call
    gives: `torch.FloatTensor(x.size())` is sized by it), or nothing (`torch.FloatTensor([])`: nothing crosses)."""
    return holds_data(model, value_of, iterated, given, fn, at, read=False) or (isinstance(given, (cst.List, cst.Tuple)) and not given.elements)


def _comprehension_drawn(statement: cst.CSTNode, name: str) -> bool:
    """`[torch.Tensor(s) for s in states]`: an element a comprehension of the statement draws from a
    collection the code holds (not one written in the code, nor a `range`)."""
    return any(isinstance(n, cst.CompFor) and name in target_names(n.target) and _drawn_for(n) for n in iter_nodes(statement))


def _held_data(comprehension: cst.ListComp | cst.GeneratorExp, drawn_from: "Value") -> bool:
    """What a comprehension draws from may be data: not a string or a number the code knows (`[ord(c) for
    c in "hello"]`), nor a tensor, whose elements it reads back to the host (`[classes[i.item()] for i in y]`)."""
    if drawn_from.kind in (Kind.STRING, Kind.NUMBER, Kind.BOOL) or (drawn_from.kind is Kind.TENSOR and drawn_from.device != HOST):
        return False
    drawn = target_names(comprehension.for_in.target)
    return not any(
        isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "item" and dotted(n.func.value) in drawn
        for n in iter_nodes(comprehension.elt)
    )


def _read_back(expr: cst.BaseExpression, value_of: "Callable[..., Value]", fn: "Function | None", at: "Site | None") -> bool:
    """`target.tolist()` or `x.cpu().numpy()` of a tensor on the accelerator: values copied back to the host."""
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("tolist", "numpy")):
        return False
    inner = expr.func.value
    while isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and inner.func.attr.value in ("cpu", "detach"):
        inner = inner.func.value
    return value_of(inner, fn, at).device == ACCEL


def _drawn_for(clause: cst.CompFor) -> bool:
    """A comprehension's `for` over a collection the code holds, not one written in the code nor a `range`."""
    return not isinstance(clause.iter, (cst.List, cst.Tuple, cst.Set)) and not (
        isinstance(clause.iter, cst.Call) and dotted(clause.iter.func) == "range"
    )


def _constant_key(expr: cst.Subscript) -> bool:
    """`batch["obs"]`, `pair[0]`: one element chosen by a key written in the code."""
    return len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index) and isinstance(expr.slice[0].slice.value, (cst.SimpleString, cst.Integer))


def _unconverted(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`x` of `x.data.cpu().numpy()`: what a conversion to a host array holds."""
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _CONVERSIONS and not expr.args:
            expr = expr.func.value
        elif isinstance(expr, cst.Attribute) and expr.attr.value == "data":
            expr = expr.value
        else:
            return expr


_CONVERSIONS = frozenset({"numpy", "cpu", "detach", "copy", "float", "double", "long"})


def _converts_itself(model: "TrainingModel", value: cst.BaseExpression, name: str) -> bool:
    """`state = torch.FloatTensor(state).to(device)`: the name rebound to a copy of what it held (an
    observation stays one), which a loop's back edge may show reaching its own use."""
    value = _unreshaped(value)
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _MOVES:
        value = _unreshaped(value.func.value)
    if not isinstance(value, cst.Call) or len(value.args) != 1 or dotted(value.args[0].value) != name:
        return False
    factory = model.imports.resolve(value.func) or ""
    return factory in OBSERVATION_COPIES or factory in _WRAPPING or (factory.startswith("torch.") and factory[6:] in LEGACY_CONSTRUCTORS | {"Tensor"})


def _from_environment(model: "TrainingModel", assign: "Assign", depth: int, name: "str | None" = None) -> bool:
    value = assign.value
    if assign.unpacked and isinstance(value, cst.Tuple) and name in assign.targets and len(value.elements) == len(assign.targets):
        value = value.elements[assign.targets.index(name)].value  # (`state, done = env.reset(), False`)
        return observed(model, value, assign.site.function, assign.site, depth + 1) or _steps_or_resets(model, value)
    if assign.op is None and _steps_or_resets(model, value):
        return True
    return assign.op is None and observed(model, value, assign.site.function, assign.site, depth + 1)


def _steps_or_resets(model: "TrainingModel", value: cst.BaseExpression) -> bool:
    """`env.step(action)` or `env.reset()` of an environment of this module."""
    return (
        isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in ("step", "reset") and dotted(value.func.value) in environments(model)
    )


def feeds_batch_source(model: "TrainingModel", call: "Call") -> bool:
    """`new_priorities = loss.detach().cpu().numpy(); rb.update_priorities(data.indices, new_priorities)`
    after `data = rb.sample(...)`: values computed from the rows a buffer gave this step, handed back
    to that buffer with those rows' indices, on the host (prioritised replay). The copy is the
    algorithm's."""
    node = call.node
    fn = call.site.function
    computed_from = model.roots_of(call.receiver if call.receiver is not None else node, fn)
    targets = _bound_to(model, call)
    for other in _method_calls_by_function(model).get(fn, ()):
        if other is call:
            continue
        args = [a.value for a in other.node.args]
        if not (any(contains(v, node) for v in args) or any(dotted(v) in targets for v in args)):
            continue
        # (the rows' own values computed on, and their indices handed back: `indices` unpacked
        # beside the batch, `state, ..., indices, weights = buffer.sample(n, beta)`)
        drawn = _drawn_from(model, other.receiver_text, fn, other.site)
        handed_back = {v.value for v in args if isinstance(v, cst.Name)} - computed_from - targets
        if drawn & computed_from and (any(_root(v) in drawn for v in args) or _unpacked_beside(model, fn, other.receiver_text, handed_back, computed_from)):
            return True
    return False


def _unpacked_beside(model: "TrainingModel", fn: object, source: str | None, names: set[str], computed_from: frozenset[str]) -> bool:
    """Whether one of `names` is unpacked from a call on `source` beside rows the copy was computed
    from: `state, ..., indices, weights = buffer.sample(n, beta)` (`indices` handed back)."""
    return source is not None and any(
        a.unpacked and a.site.function is fn and names.intersection(a.targets) and computed_from.intersection(a.targets)
        and isinstance(a.value, cst.Call) and (dotted(a.value.func) or "").startswith(source + ".")
        for a in model.assigns
    )


def _method_calls_by_function(model: "TrainingModel") -> dict[object, list["Call"]]:
    """Calls on a receiver (`rb.update_priorities(...)`), by function; computed once."""
    cached = getattr(model, "_method_calls_by_function", None)
    if cached is None:
        cached = {}
        for call in model.calls:
            if call.receiver_text is not None:
                cached.setdefault(call.site.function, []).append(call)
        model._method_calls_by_function = cached  # type: ignore[attr-defined]
    return cached


def _drawn_from(model: "TrainingModel", source: str, fn: "Function | None", at: "Site") -> set[str]:
    """Names this function binds, before `at`, to what a call on `source` returned (`data = rb.sample(n)`)."""
    names: set[str] = set()
    for a in model.assigns:
        if a.site.function is fn and a.site.order < at.order and isinstance(a.value, cst.Call):
            func = a.value.func
            if isinstance(func, cst.Attribute) and dotted(func.value) == source:
                names.update(a.targets)
    return names


def _root(expr: cst.BaseExpression) -> str | None:
    """`data` for `data.indices` or `data["indices"]`: the name a part is read from (not the name itself)."""
    if isinstance(expr, cst.Attribute):
        return dotted(expr.value)
    if isinstance(expr, cst.Subscript):
        return dotted(expr.value)
    return None


def contains(expr: cst.CSTNode, target: cst.CSTNode) -> bool:
    """Whether `target` is `expr` or inside it through calls, attributes, subscripts and literals."""
    if expr is target:
        return True
    if type(expr) not in _DESCENDED:  # (exact classes: isinstance on libcst's ABCs is slow)
        return False
    return any(contains(child, target) for child in child_nodes(expr))


_DESCENDED = frozenset({
    cst.Call, cst.Attribute, cst.Subscript, cst.Tuple, cst.List, cst.Arg, cst.SubscriptElement, cst.Index, cst.Element,
    cst.BinaryOperation, cst.UnaryOperation,  # (`action = (policy.act(s) + noise).clip(lo, hi)`)
})
