"""Functions a library's engine runs every step because the code hands them to it.

torchnet's `Engine.train(network, iterator, maxepoch, optimizer)` runs, for every sample: the hook
`on_sample`, `network(sample)` (which returns the loss and the output), the hook `on_forward`, then
backward and the optimizer's step, then `on_update`. The network function and those hooks are
training steps; `on_start_epoch` and `on_end_epoch` run once per epoch, `on_start`/`on_end` once."""

from __future__ import annotations

from typing import Protocol

import libcst as cst

from trainlint.model.facts import Assign, Call, Function
from trainlint.model.names import ImportMap, dotted
from trainlint.model.torchnames import literal_string

TORCHNET_ENGINES = frozenset({"torchnet.engine.Engine", "torchnet.engine.engine.Engine"})
TORCHNET_STEP_HOOKS = frozenset({"on_sample", "on_forward", "on_update"})


class ModuleFacts(Protocol):
    """What is read of a module: its facts (a `TrainingModel` has them)."""

    imports: ImportMap
    functions: list[Function]
    assigns: list[Assign]
    calls: list[Call]


def engine_step_functions(model: ModuleFacts) -> frozenset[int]:
    """The ids of this module's functions that a torchnet `Engine` runs every step: the network
    function given to `engine.train(h, ...)` and those set as its per-sample hooks
    (`engine.hooks['on_forward'] = on_forward`)."""
    known = model.__dict__.get("_engine_step_functions")
    if known is not None:
        return known
    engines = {
        (a.site.function, a.targets[0]) for a in model.assigns
        if len(a.targets) == 1 and isinstance(a.value, cst.Call) and model.imports.resolve(a.value.func) in TORCHNET_ENGINES
    }
    found: list[Function] = []
    if engines:
        for assign in model.assigns:
            node = assign.node
            if not (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Subscript)):
                continue
            target = node.targets[0].target
            owner = dotted(target.value)  # type: ignore[attr-defined]
            key = literal_string(target.slice[0].slice.value) if len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index) else None  # type: ignore[attr-defined]
            if owner is not None and owner.endswith(".hooks") and (assign.site.function, owner[: -len(".hooks")]) in engines and key in TORCHNET_STEP_HOOKS:
                found.extend(_named(model, assign.value, assign.site.function))
        for call in model.calls:
            if call.method == "train" and (call.site.function, call.receiver_text) in engines and call.node.args:
                found.extend(_named(model, call.node.args[0].value, call.site.function))
    known = model.__dict__["_engine_step_functions"] = frozenset(id(fn) for fn in found)
    return known


def _named(model: ModuleFacts, expr: cst.BaseExpression, scope: Function | None) -> list[Function]:
    """The function a name given to the engine denotes: one defined in the scope that hands it over
    (a closure of `main`) or at the module's top level."""
    if not isinstance(expr, cst.Name):
        return []
    return [fn for fn in model.functions if fn.name == expr.value and fn.class_name is None and fn.parent in (scope, None)]
