"""Evaluation code known by what it does, not by its name: a loop of the script that runs a module and
keeps only predictions, and a helper running a module over batches whose result no caller
backpropagates (TL303)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator

import libcst as cst

from trainlint.model.facts import Call, Function
from trainlint.model.graph_uses import NOT_DIFFERENTIABLE, differentiates, graphs_used
from trainlint.model.arguments import argument_for
from trainlint.model.containers import is_empty_list
from trainlint.model.lattice import HOST, Kind, Value, origins
from trainlint.model.modes import call_trains, function_trains, mode_switch
from trainlint.model.names import dotted, target_names
from trainlint.model.value_calls import MODULE_API_METHODS

if TYPE_CHECKING:
    from trainlint.model.training import TrainingModel

def grad_disabled(fn: Function | None, call: Call, model: "TrainingModel | None" = None) -> bool:
    """Whether the last `torch.set_grad_enabled(...)` before `call` in its scope (`fn`, or the script's
    top level, whose calls `model` holds) turned autograd off."""
    last = None
    for other in fn.calls if fn is not None else (model.calls if model is not None else ()):
        if other.site.order >= call.site.order:
            break
        if other.site.function is fn and other.qualname == "torch.set_grad_enabled" and other.node.args:
            last = dotted(other.node.args[0].value)
    return last == "False"


def grad_off_everywhere(model: "TrainingModel") -> bool:
    """`torch.set_grad_enabled(False)` at the module's top level, under no test (an evaluation script's
    set-up), and autograd enabled again nowhere in it: the switch is global, so no forward of the
    module, in a function or not, records a graph."""
    off = on = False
    for call in model.calls:
        if call.qualname == "torch.enable_grad":
            on = True
        elif call.qualname == "torch.set_grad_enabled" and call.node.args:
            site = call.site
            if dotted(call.node.args[0].value) != "False":
                on = True
            elif site.function is None and not site.loops and not any(site.gate_nodes) and not site.else_of and not site.in_except:
                off = True
    return off and not on


def first_forward(model: "TrainingModel", fn: Function, looped: bool = False) -> Call | None:
    """The first call in `fn`'s own body (in one of its loops, when `looped`) that runs a module, known
    as one by its value, outside no_grad and recording a graph; calls of this module's functions are
    judged on their own."""
    for call in fn.calls:
        if call.site.function is not fn or (looped and not call.site.loops) or model.under(call.site, "no_grad"):
            continue
        if grad_disabled(fn, call):
            continue
        if model.callee(call) is not None:
            if _own_forward(model, fn, call) or _module_method(model, call):
                return call  # (`q = self.forward(state)` in a module's `act`: its layers run)
            continue
        # (`_model.forward(frames)`, called by name: the module's layers run as they do for `_model(frames)`)
        module = call.receiver if call.method == "forward" and call.receiver is not None else call.node.func
        if (model.value(module, call.site).kind is Kind.MODULE and model.value(call.node, call.site).graph is not False) or _module_method(model, call):
            return call
    return None


def _module_method(model: "TrainingModel", call: Call) -> bool:
    """`model.prediction(x)`: a method of an `nn.Module` class of the project, called on an instance,
    whose result carries a graph (it runs the module's layers: `return self.embedding_v(inputs)`)."""
    if call.method is None or call.receiver is None or call.receiver_text == "self":
        return False
    receiver = model.value(call.receiver, call.site)
    if receiver.kind is not Kind.MODULE or not origins(receiver):
        return False
    info = model.local_class(receiver.origin) if receiver.origin else None
    if info is None:  # classes of other project modules (`from model import GaussianPolicy, DeterministicPolicy`):
        # each one's method runs the module's layers when it calls them or its `forward`, outside no_grad
        summaries = [(model.class_methods(o) or {}).get(call.method) for o in origins(receiver)]
        return all(s is not None and not s.no_grad and (bool(s.self_calls) or "forward" in s.self_methods) for s in summaries)
    if not model.is_module_class(info) or not any(f.class_name == receiver.origin and f.name == call.method for f in model.functions):
        return False
    value = model.value(call.node, call.site)  # (or a tuple of what they give: a policy's `mean, log_std, action = self.policy.sample(s)`)
    return value.graph is True or (value.kind is Kind.COLLECTION and any(v.graph is True for v in value.items or ()))


def _own_forward(model: "TrainingModel", fn: Function, call: Call) -> bool:
    """`self.forward(x)` in a method of an `nn.Module` class of this module."""
    callee = model.callee(call)
    if callee is None or fn.class_name is None or callee.class_name != fn.class_name or callee.name != "forward":
        return False
    if call.receiver_text != "self":
        return False
    info = model.local_class(fn.class_name)
    return info is not None and model.is_module_class(info)


def trains_any(model: "TrainingModel", calls: "Iterable[Call]") -> bool:
    """Whether one of these calls backpropagates (also with `torch.autograd.grad`), steps an optimizer, or
    runs a function that trains."""
    return any(model.is_backward(c) or model.is_optimizer_step(c) or differentiates(model, c) or call_trains(model, c) for c in calls)


def discarded_by_callers(model: "TrainingModel", fn: Function, sites: "Iterable[Call]") -> Call | None:
    """An evaluation helper known by how it is used: it runs a module over the batches of a loop, trains
    nothing, and every call of it in this module (one at least) lets what it returns die without a
    backward (`valid_loss = evaluate_loss(valid_iter, net)`, then only logged). Its first forward pass
    in a loop, outside no_grad, or None."""
    sites = list(sites)
    if fn.class_name is not None:
        return None  # (a method runs wherever its objects go: its callers are not all in sight)
    if not sites or trains_any(model, fn.calls):
        return None
    if any(_result_backpropagated(model, site) for site in sites):
        return None
    forward = first_forward(model, fn, looped=True)
    return _graph_source(model, fn, forward) if forward is not None else None


def prediction_loop_forwards(model: "TrainingModel", frozen: set[str]) -> Iterator[Call]:
    """A loop that runs a module, trains nothing, and keeps only what no backward can reach (`preds.extend(y_hat.argmax(1)
    .cpu().numpy())`): one of the script itself (a notebook's test-set loop), or the outermost such loop of a function
    that trains (a periodic test inside the step loop, `if episode % 5000 == 0: for i in range(TEST_EPISODE): ...`)."""
    for loop in model.loops:
        if loop.is_step or (loop.function is None and loop.parent is not None):
            continue
        if loop.function is not None and (not function_trains(model, loop.function) or (
            loop.parent is not None and not trains_any(model, (c for c in model.calls if loop.parent in c.site.loops))
        )):
            continue  # (a function that trains nothing is judged whole; an inner loop with its outer one)
        inside = [c for c in model.calls if loop in c.site.loops]
        if trains_any(model, inside):
            continue
        forwards = [
            c for c in inside
            if not model.under(c.site, "no_grad") and (dotted(c.node.func) or "") not in frozen
            and model.value(c.node.func, c.site).kind is Kind.MODULE and model.value(c.node, c.site).graph is not False
            and not _scores_graphless(model, c)
        ]
        kept = [model.value(c.node.args[0].value, c.site) for c in inside if c.method in ("append", "extend", "insert", "add") and c.node.args]
        kept += [model.value(a.value, a.site) for a in model.assigns if a.op is not None and loop in a.site.loops]
        if forwards and kept and all(v.graph is False or v.kind in NOT_DIFFERENTIABLE for v in kept):
            if not grad_disabled(loop.function, forwards[0], model):
                yield forwards[0]


def _scores_graphless(model: "TrainingModel", call: Call) -> bool:
    """`loss_fct(logits, labels)` given the output of a forward made under no_grad: a loss (or metric) of
    outputs no graph reaches, which records none unless it has parameters of its own."""
    first = model.value(call.node.args[0].value, call.site) if call.node.args else None
    return first is not None and first.kind is Kind.TENSOR and first.graph is False and first.origin is None


def step_list_evaluations(model: "TrainingModel") -> Iterator[tuple[Call, Call, Function]]:
    """A driver that runs a list of step functions over batches (`reduce(batches, state, steps)`:
    `for step in steps: step(batch, state)`), called twice by one function: with steps of which one
    backpropagates (training) and with steps of which none does (evaluation). A step both lists share
    builds the graph the training call backpropagates, so the evaluation call, outside no_grad,
    records one it never uses. Each evaluation call, the training call and the shared step."""
    drivers = {fn: p for fn in model.functions if (p := _runs_each_of(model, fn)) is not None}
    if not drivers:
        return
    by_caller: dict[Function | None, list[tuple[Call, list[Function]]]] = {}
    for call in model.calls:
        driver = model.callee(call)
        if driver in drivers:
            steps = _steps_given(model, call, driver, drivers[driver])
            if steps:
                by_caller.setdefault(call.site.function, []).append((call, steps))
    for caller, calls in by_caller.items():
        training = [(c, s) for c, s in calls if any(_backpropagates(model, f) for f in s)]
        for call, steps in calls:
            if any(_backpropagates(model, f) for f in steps):
                continue
            if model.under(call.site, "no_grad") or grad_disabled(caller, call, model):
                continue
            for trained, trained_steps in training:
                shared = next((f for f in steps if f in trained_steps and _runs_a_callable(model, f)), None)
                if shared is not None:
                    yield call, trained, shared
                    break


def _runs_each_of(model: "TrainingModel", fn: Function) -> str | None:
    """The parameter of `fn` whose elements it calls in a loop (`for step in steps: step(batch)`)."""
    for loop in model.loops:
        node = loop.node
        if loop.function is not fn or not isinstance(node, cst.For) or not isinstance(node.target, cst.Name):
            continue
        if not isinstance(node.iter, cst.Name) or node.iter.value not in fn.params:
            continue
        target = node.target.value
        if any(loop in c.site.loops and isinstance(c.node.func, cst.Name) and c.node.func.value == target for c in fn.calls):
            return node.iter.value
    return None


def _steps_given(model: "TrainingModel", call: Call, driver: Function, param: str) -> list[Function]:
    """The functions of this module a call hands the driver's step parameter (its default when it
    passes none); [] unless every element is known to be one."""
    index = driver.params.index(param) - (1 if driver.class_name is not None else 0)
    expr = argument_for(call.node, f"{index} {param}")
    caller = call.site.function
    if isinstance(expr, cst.Name) and caller is not None and expr.value in caller.defaults and not model.reaching(caller, expr.value, call.site):
        # `valid_steps=default_valid_steps`, handed on: the steps the caller runs by default
        value = model.values.of(caller.defaults[expr.value], None, None)
    elif expr is not None:
        value = model.value(expr, call.site)
    elif not any(a.keyword is not None and a.keyword.value == param or a.star for a in call.node.args) and param in driver.defaults:
        value = model.values.of(driver.defaults[param], None, None)
    else:
        return []
    if value.kind is not Kind.COLLECTION:
        return []
    elements = list(value.items) if value.items is not None else [value.element] if value.element is not None else []
    found: list[Function] = []
    for element in elements:
        held = model.held_functions(element)
        if not held or len(held) != len(origins(element)):
            return []  # (one element is not known: it might backpropagate)
        found += [f for f in held if f not in found]
    return found


def _backpropagates(model: "TrainingModel", fn: Function) -> bool:
    return any(model.is_backward(c) or model.is_optimizer_step(c) for c in fn.calls)


def _runs_a_callable(model: "TrainingModel", fn: Function) -> bool:
    """Whether a step calls an object its arguments hold (`state[MODEL](batch)`, `model(batch)` with
    `model = state[MODEL]`), outside no_grad: what the training call's backward runs through."""
    for call in fn.calls:
        if call.site.function is not fn or model.under(call.site, "no_grad"):
            continue
        func = call.node.func
        if isinstance(func, cst.Subscript):
            return True
        if isinstance(func, cst.Name) and call.qualname is None and model.callee(call) is None:
            assigns = model.reaching(fn, func.value, call.site)
            if assigns and all(_held_by_subscript(a.value) for a in assigns):
                return True
            if model.value(func, call.site).kind is Kind.MODULE:
                return True
    return False


def _held_by_subscript(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.IfExp):
        return _held_by_subscript(expr.body) and _held_by_subscript(expr.orelse)
    return isinstance(expr, cst.Subscript)


def _graph_source(model: "TrainingModel", fn: Function, call: Call) -> Call:
    """The forward pass a graph starts from: `out = net(X)` for `l = loss(out, y)` in the same loop
    (the model's forward, not the loss module's), else the call itself."""
    for arg in call.node.args:
        if not isinstance(arg.value, cst.Name):
            continue
        for assign in model.reaching(fn, arg.value.value, call.site):
            earlier = model.call_at(assign.value) if isinstance(assign.value, cst.Call) else None
            if earlier is None or earlier.site.loops != call.site.loops or model.callee(earlier) is not None or earlier.method is not None:
                continue
            forward = model.value(earlier.node.func, earlier.site).kind is not Kind.FUNCTION  # (`str2tensor(c)`, a function, starts no graph)
            if forward and model.value(earlier.node, earlier.site).graph is not False and not model.under(earlier.site, "no_grad"):
                return earlier
    return call


def _result_backpropagated(model: "TrainingModel", call: Call) -> bool:
    """Whether what a call returns may reach a backward: its caller backpropagates an expression drawing
    on it, or hands it on where that cannot be seen (returns it, passes it to a function of its own)."""
    statement, caller = call.site.statement, call.site.function
    if isinstance(statement, cst.SimpleStatementLine) and any(isinstance(s, cst.Return) for s in statement.body):
        return True
    held = {t for a in model.assigns_in(statement) if a.value is call.node for t in a.targets}
    if not held and not call.discarded:
        outer = model.call_at(_enclosing_call(statement, call.node)) if statement is not None else None
        return outer is None or model.callee(outer) is not None or bool(model.project_targets(outer)) or model.is_backward(outer)
    for other in model.calls:
        if other.site.function is not caller or not (model.is_backward(other) or model.callee(other) is not None):
            continue
        reached = [a.value for a in other.node.args] + ([other.receiver] if other.receiver is not None else [])
        if any(held & model.roots_of(e, caller) for e in reached if e is not None):
            return True
    return False


def _enclosing_call(statement: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """The innermost call of `statement` that has `node` among (or inside) its arguments."""
    found: list[cst.CSTNode] = []

    class _Find(cst.CSTVisitor):
        def visit_Call(self, outer: cst.Call) -> None:
            if outer is not node and any(_contains(a.value, node) for a in outer.args):
                found.append(outer)

    statement.visit(_Find())
    return found[-1] if found else None


def _contains(tree: cst.CSTNode, node: cst.CSTNode) -> bool:
    if tree is node:
        return True
    return any(_contains(child, node) for child in tree.children)


def frozen_modules(model: "TrainingModel") -> set[str]:
    """Modules frozen by a `requires_grad_(False)` anywhere in a chain on them
    (`sampler.eval().requires_grad_(False).to(device)`): their forward passes record no graph."""
    out: set[str] = set()
    for call in model.calls:
        if call.method != "requires_grad_" or not isinstance(call.arg(0, "requires_grad"), cst.Name):
            continue
        if call.arg(0, "requires_grad").value != "False":  # type: ignore[union-attr]
            continue
        base = call.receiver
        while isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute):
            base = base.func.value
        text = dotted(base) if base is not None else None
        if text:
            out.add(text)
    for loop in model.loops:
        text = _freezes_every_parameter(loop.node)
        if text:
            out.add(text)
    return out


def _freezes_every_parameter(loop: cst.For | cst.While) -> str | None:
    """`for k, v in model.named_parameters(): v.requires_grad = False` (or `v.requires_grad_(False)`,
    or over `model.parameters()`), unconditionally in the loop's body: the module whose every
    parameter is frozen (its text), which then records no graph. A loop that freezes some (under an
    `if`) freezes none for this purpose."""
    if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Call) or not isinstance(loop.iter.func, cst.Attribute):
        return None
    if loop.iter.func.attr.value not in ("parameters", "named_parameters") or loop.iter.args:
        return None
    target = loop.target
    if isinstance(target, cst.Tuple) and target.elements:
        target = target.elements[-1].value
    if not isinstance(target, cst.Name) or not isinstance(loop.body, cst.IndentedBlock):
        return None
    for statement in loop.body.body:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if _freezes(small, target.value):
                return dotted(loop.iter.func.value)
    return None


def _freezes(statement: cst.BaseSmallStatement, name: str) -> bool:
    """`name.requires_grad = False` or `name.requires_grad_(False)`."""
    if isinstance(statement, cst.Assign) and isinstance(statement.value, cst.Name) and statement.value.value == "False":
        return any(dotted(t.target) == f"{name}.requires_grad" for t in statement.targets)
    if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call):
        call = statement.value
        return (
            dotted(call.func) == f"{name}.requires_grad_"
            and len(call.args) == 1
            and isinstance(call.args[0].value, cst.Name)
            and call.args[0].value.value == "False"
        )
    return False


def prediction_forward(model: "TrainingModel", fn: Function) -> Call | None:
    """A function that runs a module and gives back only what no backward can reach (`argmax`
    labels, strings, numbers): a prediction helper (`predict_sentiment`, a greedy decoder). Its
    first forward pass outside no_grad, or None. The module is one by its value; the function neither keeps
    what may carry a graph nor differentiates it (`graphs_used`), so its graphs die unused."""
    if not fn.return_facts or (fn.class_name is not None and fn.name == "forward"):
        return None  # (a module's own `forward`, a planner's: what its callers do with it decides, `with torch.no_grad(): act(...)`)
    if all(_shape_of(ret.value) for ret in fn.return_facts):
        return None  # (a probe for a layer's size, `self.features(torch.zeros(1, *shape)).view(1, -1).size(1)`: its graph dies at once)
    for ret in fn.return_facts:
        value = model.value(ret.value, ret.site) if ret.value is not None else None
        if value is not None and not (_no_graph(value) or _filled_with_predictions(model, fn, ret.value)):
            return None
    return None if graphs_used(model, fn) else first_forward(model, fn)


def _shape_of(returned: cst.BaseExpression | None) -> bool:
    """`out.size(1)`, `out.shape[-1]`, `out.numel()`, `len(out)`: a size read from an output, which
    keeps no graph alive."""
    while isinstance(returned, cst.Subscript):
        returned = returned.value
    if isinstance(returned, cst.Attribute):
        return returned.attr.value in ("shape", "ndim")
    if isinstance(returned, cst.Call):
        func = returned.func
        return (isinstance(func, cst.Attribute) and func.attr.value in ("size", "numel", "dim")) or (isinstance(func, cst.Name) and func.value == "len")
    return False


def _no_graph(value: Value) -> bool:
    """A value no backward can reach: one without a graph, or a tuple of such (`return predicted_class,
    predicted_probability` of two `.item()`s)."""
    if value.graph is False or value.kind in NOT_DIFFERENTIABLE:
        return True
    return value.kind is Kind.COLLECTION and bool(value.items) and all(_no_graph(v) for v in value.items or ())


def _filled_with_predictions(model: "TrainingModel", fn: Function, returned: cst.BaseExpression | None) -> bool:
    """`images = []`, then `images.append(sample.reshape(32, 32))` of host arrays, and `return images`:
    a list `fn` builds empty and fills only with host values (numbers, strings, arrays), which no
    backward can reach."""
    name = returned.value if isinstance(returned, cst.Name) else None
    bound = model.reaching(fn, name, None) if name is not None else []  # (its assignments in `fn`)
    if name is None or not bound or not all(is_empty_list(a, name) for a in bound):
        return False
    filled = [c for c in fn.calls if c.receiver_text == name]
    return bool(filled) and all(
        c.method in ("append", "extend", "insert") and c.node.args
        and model.value(c.node.args[-1].value, c.site).kind in NOT_DIFFERENTIABLE  # (a tensor may gain a graph in place)
        for c in filled
    )


def step_prediction(model: "TrainingModel", fn: Function) -> Call | None:
    """A helper the step runs every time that trains nothing and gives back only predictions (a
    policy's `select_action`, the action handed to the environment): its forward pass outside
    no_grad, whose graph no backward reaches, or None."""
    if function_trains(model, fn) or inside_forward(model, fn):
        return None
    # (whether every caller runs it under no_grad asks the callers' summaries: only for a forward found)
    forward = prediction_forward(model, fn)
    return None if forward is None or model.under_no_grad_everywhere(fn, importers=True) else forward


def inside_forward(model: "TrainingModel", fn: Function) -> bool:
    """A method that only its class's `forward` calls: part of that module's forward pass (BLIP's
    `rank_answer` for `model(..., train=False)`), run where the forward runs. Whether it records a
    graph is its callers' matter (an evaluation under `no_grad`, often in another module)."""
    if fn.class_name is None:
        return False
    callers = [c.site.function for c in model.calls if fn in model.callees(c)]
    return bool(callers) and all(f is not None and f.class_name == fn.class_name and f.name == "forward" for f in callers)


def last_mode(receiver: str, call: Call, switches: list[Call]) -> bool | None:
    """The mode the last switch of `receiver` (or of the module it is a submodule of) before `call`,
    in the call's function, set (None: none)."""
    last: bool | None = None
    for switch in switches:
        if switch.site.order >= call.site.order:
            break
        if switch.site.function is call.site.function and run_of(receiver, {switch.receiver_text or ""}):
            last = mode_switch(switch)
    return last


def run_of(callee: str, modules: set[str]) -> bool:
    """`net(x)` or `net.decoder(x)` for `net` in `modules`: the module or an attribute of it called
    (not a method of nn.Module's own API, `net.parameters()`, nor a deeper call, `net.decoder.init(x)`)."""
    if callee in modules:
        return True
    owner, _, attr = callee.rpartition(".")
    return owner in modules and attr not in MODULE_API_METHODS


def runs_module(model: "TrainingModel", call: Call, callee: str, modules: set[str]) -> bool:
    """A forward pass of a module in `modules` or of a submodule: `net(x)`, or `net.decoder(x)` given a tensor
    or a batch (also one the `for` around it draws), whose result is used (`net.init_hidden(bsz)`: a method)."""
    if callee in modules:
        return True
    if not run_of(callee, modules) or call.discarded:
        return False
    for arg in call.node.args:
        value = model.value(arg.value, call.site) if arg.keyword is None else None
        if value is not None and value.kind in (Kind.TENSOR, Kind.COLLECTION):  # (a batch: `tuple(t.to(d) for t in b)`)
            return True
        if value is not None and value.kind is Kind.UNKNOWN and value.device != HOST and isinstance(arg.value, cst.Name) and any(
            isinstance(loop.node, cst.For) and arg.value.value in target_names(loop.node.target) for loop in call.site.loops
        ):
            return True  # (`lm_model.log_prob(word_t)` in `for word_t, label_t in iterator:`: a batch the loop draws)
    return False


def evaluated_here(fn: Function | None, switches: list[Call]) -> set[str]:
    """The modules a function (None: the script's top level) switches to eval mode itself."""
    return {s.receiver_text or "" for s in switches if s.site.function is fn and mode_switch(s) is False}
