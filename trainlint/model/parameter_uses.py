"""Computes what a function does with its parameters (`parameter_facts`), for its summary: whether it
switches the mode of a module it is given or runs it forward to evaluate it, whether it runs the
epochs of a training over a loader it is given or sets its sampler's epoch, whether it returns a
loader whose DistributedSampler shuffles. And the shapes of loaders and samplers these facts and
TL508 share: which loops train, which loader a sampler feeds.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.facts import Call, Function, Loop
from trainlint.model.lattice import Kind
from trainlint.model.modes import ModeAnalysis, discarded, loop_ancestors, mode_switch
from trainlint.model.names import dotted
from trainlint.model.moving_helpers import moved_parameter
from trainlint.model.backpropagated import backpropagated_parameters
from trainlint.model.parameter_facts import (
    EPOCHS, EVALUATES, KEEPS_MODE, MOVES, SETS_EPOCH, SHUFFLED_LOADER, TRAINS_MODE, arguments, fact, keys,
)
from trainlint.model.torchnames import decorated_no_grad, is_true
from trainlint.model.walk import iter_nodes

if TYPE_CHECKING:
    from trainlint.model.facts import Assign
    from trainlint.model.summary import FunctionSummary
    from trainlint.model.training import TrainingModel

DISTRIBUTED_SAMPLERS = frozenset({"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"})
# calls that hand a loader to a framework, which then iterates it and sets the epoch itself
FRAMEWORK_METHODS = frozenset({"prepare", "prepare_data_loader", "setup_dataloaders", "fit", "train"})


def names_in(node: cst.CSTNode) -> set[str]:
    """The dotted names an expression reads (`loader`, `self.loader`, `tqdm`)."""
    return {text for n in iter_nodes(node) if isinstance(n, (cst.Name, cst.Attribute)) for text in (dotted(n),) if text}


def single_target(model: "TrainingModel", call: Call) -> "Assign | None":
    """The assignment `name = call(...)` that binds a call's value to one name."""
    for a in model.assigns_in(call.site.statement):
        if a.value is call.node and len(a.targets) == 1 and a.op is None and not a.unpacked:
            return a
    return None


def element_target(model: "TrainingModel", call: Call, element: int) -> "Assign | None":
    """The assignment `a, b = call(...)` that binds element `element` of the tuple a call returns to a
    name of its own (each target a plain name, none starred), as an assignment of that one name."""
    for a in model.assigns_in(call.site.statement):
        if a.value is not call.node or not a.unpacked or a.op is not None or not isinstance(a.node, cst.Assign) or len(a.node.targets) != 1:
            continue
        target = a.node.targets[0].target
        items = target.elements if isinstance(target, (cst.Tuple, cst.List)) else ()
        if element < len(items) and all(isinstance(i, cst.Element) and isinstance(i.value, cst.Name) for i in items):
            return replace(a, targets=(items[element].value.value,), unpacked=False)  # type: ignore[attr-defined]
    return None


def chosen_target(model: "TrainingModel", call: Call) -> "Assign | None":
    """`single_target`, or the assignment that binds a call's value to one name on one branch of a
    conditional expression (`sampler = RandomSampler(d) if rank == -1 else DistributedSampler(d)`)."""
    for a in model.assigns_in(call.site.statement):
        if len(a.targets) == 1 and a.op is None and not a.unpacked and chooses(a.value, call.node):
            return a
    return None


def chooses(value: cst.BaseExpression | None, node: cst.CSTNode) -> bool:
    """Whether `value` is `node`, or a conditional expression one of whose branches chooses it."""
    while isinstance(value, cst.IfExp) and value is not node:
        if chooses(value.body, node):
            return True
        value = value.orelse
    return value is node


def loop_trains(model: "TrainingModel", loop: Loop) -> bool:
    """A loop that trains: a step loop, one around a step loop, or one calling a function of this module
    that runs a step loop (a function that is merely called every step, a forward helper, is not enough)."""
    stepping = [l for l in model.loops if l.is_step]
    if loop.is_step or any(loop in loop_ancestors(l) for l in stepping):
        return True
    callees = {model.callee(c) for c in loop.direct_calls} - {None}
    return any(l.function in callees for l in stepping)


def received_as(call: Call, callee: Function, name: str) -> str | None:
    """The parameter of `callee` that receives the value `name` in `callee(..., name, ...)`."""
    params = [p for p in callee.params if p not in ("self", "cls")] if callee.class_name else list(callee.params)
    received: str | None = None
    positional = [a for a in call.node.args if a.keyword is None and not a.star]
    for i, a in enumerate(positional):
        if dotted(a.value) == name and i < len(params):
            received = params[i]
    for a in call.node.args:
        if a.keyword is not None and dotted(a.value) == name:
            received = a.keyword.value
    return received


def runs_step_over(model: "TrainingModel", callee: Function, call: Call, name: str) -> bool:
    """Whether `callee(..., loader, ...)` runs a step loop over the parameter that receives the loader."""
    received = received_as(call, callee, name)
    return received is not None and any(
        loop.function is callee and loop_trains(model, loop) and isinstance(loop.node, cst.For)
        and received in model.roots_of(loop.node.iter, callee)
        for loop in model.loops
    )


def sampler_shuffle(model: "TrainingModel", call: Call) -> cst.BaseExpression | bool | None:
    """For a `DistributedSampler` (or a local class with `set_epoch`): True when it shuffles (no
    `shuffle=`, or `True`), else the expression it is given; None for any other call."""
    if call.qualname in DISTRIBUTED_SAMPLERS:
        shuffle = call.arg(3, "shuffle")
    else:
        cls = model.local_class(call.name) if call.name else None
        if cls is None or "set_epoch" not in cls.methods:
            return None
        shuffle = call.kwarg("shuffle")
    return True if shuffle is None or is_true(shuffle) else shuffle


def fed_by(model: "TrainingModel", loader: Call, sampler: Call, names: set[str]) -> bool:
    """A `DataLoader(..., sampler=...)` (or `batch_sampler=BatchSampler(sampler, ...)`) fed by `sampler`."""
    if loader.site.function is not sampler.site.function or model.value(loader.node, loader.site).kind is not Kind.DATALOADER:
        return False
    given = loader.kwarg("sampler") or loader.kwarg("batch_sampler")
    if given is None:
        return False
    if given is sampler.node or any(n is sampler.node for n in iter_nodes(given)):
        return True
    # one of the bindings that reach the loader is the sampler (`RandomSampler` on one branch, the
    # distributed one on the other: the finding is about the distributed run)
    return any(
        chooses(a.value, sampler.node) for name in names & names_in(given) for a in model.reaching(loader.site.function, name, loader.site)
    )


def sets_epoch_anywhere(model: "TrainingModel") -> bool:
    """Whether the module calls `set_epoch`, itself or through a project helper that does."""
    return any(c.method == "set_epoch" or keys(model.project_call_summary(c), SETS_EPOCH) for c in model.calls)


class ParameterUses:
    """The parameter facts of one module's functions."""

    def __init__(self, model: "TrainingModel") -> None:
        self.model = model
        self._modes: ModeAnalysis | None = None
        self._for_iterables: dict[int, frozenset[str]] = {}  # per function: the names its `for` loops iterate

    def facts(self, fn: Function, sub: "dict[int, FunctionSummary]") -> tuple[str, ...]:
        """The facts of `fn`'s parameters; `sub` holds the summaries of the calls of `fn` (by call id)
        that run a function of this module or of the project."""
        m = self.model
        explicit = fn.explicit_params
        out: list[str] = []
        module_set_epoch: bool | None = None
        for index, name in enumerate(explicit):
            key = f"{index} {name}"
            if self._module_like(fn, name, sub):
                self._modes = self._modes or ModeAnalysis(m)
                effect = self._modes.effect(fn, name)
                if effect is None:
                    out.append(fact(KEEPS_MODE, key))
                    if self._evaluates(fn, name, sub):
                        out.append(fact(EVALUATES, key))
                elif effect is True:
                    out.append(fact(TRAINS_MODE, key))
            if any(c.method == "set_epoch" and c.receiver_text and c.receiver_text.split(".")[0] == name for c in fn.calls) or any(
                dotted(a) == name for c in fn.calls if id(c) in sub for a in arguments(sub[id(c)], SETS_EPOCH, c.node)
            ):
                out.append(fact(SETS_EPOCH, key))
            elif self._read_as_loader(fn, name, sub) and self._runs_epochs_over(fn, name, sub):
                if module_set_epoch is None:
                    module_set_epoch = sets_epoch_anywhere(m)
                if not module_set_epoch:
                    out.append(fact(EPOCHS, key))
        out.extend(self._shuffled_loader(fn, explicit))
        moved = moved_parameter(m, fn)
        if moved is not None:
            out.append(fact(MOVES, moved))
        return (*out, *backpropagated_parameters(m, fn))

    def _read_as_loader(self, fn: Function, name: str, sub: "dict[int, FunctionSummary]") -> bool:
        """A parameter some loop of `fn` iterates, or that `fn` passes to a function of this module or the
        project: worth asking whether it runs the epochs over it (a cheap test before that question)."""
        loops = self._for_iterables.get(id(fn))
        if loops is None:
            loops = self._for_iterables[id(fn)] = frozenset(
                n for loop in self.model.loops if loop.function is fn and isinstance(loop.node, cst.For) for n in names_in(loop.node.iter)
            )
        return name in loops or any(id(c) in sub and any(dotted(a.value) == name for a in c.node.args) for c in fn.calls)

    def _module_like(self, fn: Function, name: str, sub: "dict[int, FunctionSummary]") -> bool:
        """A parameter the function runs (`name(x)`) or switches, or passes on to a function that does:
        worth a mode fact (a function that does neither to it says nothing of its mode: unknown)."""
        for c in fn.calls:
            if dotted(c.node.func) == name or (c.receiver_text == name and mode_switch(c) is not None):
                return True
            if id(c) in sub and any(
                dotted(a) == name for kind in (KEEPS_MODE, TRAINS_MODE) for a in arguments(sub[id(c)], kind, c.node)
            ):
                return True  # (passed on to a function that has a mode fact about it)
        return False

    def _evaluates(self, fn: Function, name: str, sub: "dict[int, FunctionSummary]") -> bool:
        """`name(x)` under `no_grad`, its result kept, in a loop of `fn` that evaluates, in a function that
        does not train."""
        m = self.model
        if _trains(m, fn, sub):
            return False
        no_grad = decorated_no_grad(fn.decorators)
        for c in fn.calls:
            if c.site.function is not fn or dotted(c.node.func) != name or not c.site.loops:
                continue
            if not (no_grad or m.under(c.site, "no_grad")) or discarded(c):
                continue
            if all(self._evaluation_loop(fn, loop, sub) for loop in c.site.loops):
                return True
        return False

    def _evaluation_loop(self, fn: Function, loop: Loop, sub: "dict[int, FunctionSummary]") -> bool:
        m = self.model
        if loop.is_step:
            return False
        inside = [c for c in fn.calls if loop in c.site.loops]
        return not any(
            m.is_step_event(c) or c.method == "step" or (id(c) in sub and (sub[id(c)].trains or sub[id(c)].steps or sub[id(c)].backprops))
            for c in inside
        )

    def _runs_epochs_over(self, fn: Function, name: str, sub: "dict[int, FunctionSummary]") -> bool:
        """A training loop over the loader `name` inside a loop around it, or a call in a loop of a function
        that runs a step loop (or the epochs) over it; and the loader goes to no framework."""
        m = self.model
        if any(c.method in FRAMEWORK_METHODS and any(name in names_in(a.value) for a in c.node.args) for c in fn.calls):
            return False
        for loop in m.loops:
            if loop.function is fn and loop.parent is not None and isinstance(loop.node, cst.For) and loop_trains(m, loop):
                if name in m.roots_of(loop.node.iter, fn) and any(p.function is fn for p in loop_ancestors(loop)):
                    return True
        for c in fn.calls:
            if c.site.function is not fn:
                continue
            callee = m.callee(c)
            if c.site.loops and callee is not None and runs_step_over(m, callee, c, name):
                return True
            if id(c) in sub and any(dotted(a) == name for a in arguments(sub[id(c)], EPOCHS, c.node)):
                return True
        return False

    def _shuffled_loader(self, fn: Function, explicit: list[str]) -> list[str]:
        """"shuffled_loader ..." when the one `return` of `fn` gives back a DataLoader it builds, fed by a
        DistributedSampler it builds that shuffles (or shuffles as a parameter says); "shuffled_loader
        [k] ..." when it is the k-th element of a tuple returned (`return train_loader, test_loader`)."""
        if len(fn.return_facts) != 1:
            return []
        returned = fn.return_facts[0].value
        if isinstance(returned, cst.Tuple):
            for k, element in enumerate(returned.elements):
                found = [] if isinstance(element, cst.StarredElement) else self._shuffled_value(fn, explicit, element.value)
                if found:
                    return [fact(SHUFFLED_LOADER, f"[{k}] {found[0].partition(' ')[2]}")]
            return []
        return self._shuffled_value(fn, explicit, returned)

    def _shuffled_value(self, fn: Function, explicit: list[str], returned: cst.BaseExpression | None) -> list[str]:
        m = self.model
        loader: Call | None = m.call_at(returned) if isinstance(returned, cst.Call) else None
        if isinstance(returned, cst.Name):
            assigns = m.reaching(fn, returned.value, fn.return_facts[0].site)
            if len(assigns) == 1 and isinstance(assigns[0].value, cst.Call) and assigns[0].op is None and not assigns[0].unpacked:
                loader = m.call_at(assigns[0].value)
        if loader is None or loader.site.function is not fn or loader.kwarg("sampler") is None:
            return []  # (`loader.sampler` is the sampler it is given: the caller's fix reads it there)
        for sampler in fn.calls:
            shuffle = sampler_shuffle(m, sampler) if sampler.site.function is fn else None
            if shuffle is None or shuffle is False:
                continue
            holder = chosen_target(m, sampler)
            if not fed_by(m, loader, sampler, {holder.targets[0]} if holder is not None else set()):
                continue
            if shuffle is True:
                return [fact(SHUFFLED_LOADER, "-")]
            if isinstance(shuffle, cst.Name) and shuffle.value in explicit and not m.reaching(fn, shuffle.value, sampler.site):
                default = fn.defaults.get(shuffle.value)
                word = "-" if default is None else (default.value if isinstance(default, cst.Name) and default.value in ("True", "False") else "?")
                return [fact(SHUFFLED_LOADER, f"{explicit.index(shuffle.value)} {shuffle.value} {word}")]
        return []


def _trains(m: "TrainingModel", fn: Function, sub: "dict[int, FunctionSummary]") -> bool:
    """Whether `fn` trains (backpropagates, steps, runs a step loop, or calls what does)."""
    if any(l.is_step for l in m.loops if l.function is fn) or any(m.is_backward(c) or m.is_optimizer_step(c) for c in fn.calls):
        return True
    return any(s.trains or s.steps or s.backprops for s in sub.values())
