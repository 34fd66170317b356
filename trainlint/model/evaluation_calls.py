"""Evaluation with a module's mode in mind (TL511): which loops evaluate, and the calls that give a
module in training mode to a function of another project module that evaluates it (its summary's
`evaluates` fact: it runs the module forward under `no_grad` and never switches its mode).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from trainlint.model.facts import Call, Loop
from trainlint.model.hooks import LIBRARY_NO_GRAD_HOOKS, library_step_hook
from trainlint.model.modes import Training, call_trains, discarded, loop_ancestors
from trainlint.model.names import dotted
from trainlint.model.parameter_facts import EVALUATES, arguments
from trainlint.model.torchnames import decorated_no_grad

if TYPE_CHECKING:
    from trainlint.model.mode_layers import ModeLayers
    from trainlint.model.modes import ModeAnalysis
    from trainlint.model.summary import FunctionSummary
    from trainlint.model.training import TrainingModel


def evaluation_loop(model: "TrainingModel", loop: Loop, step_loops: list[Loop]) -> bool:
    """A loop that evaluates: not a training step nor around one, in no step function or library
    evaluation hook, and neither backpropagating, stepping an optimizer nor an environment."""
    if loop.is_step or any(a.is_step for a in loop_ancestors(loop)) or any(loop in loop_ancestors(s) for s in step_loops):
        return False
    fn = loop.function
    if fn is not None:
        if fn in model.step_functions or (fn.class_name and library_step_hook(fn.name, model.class_bases(fn), LIBRARY_NO_GRAD_HOOKS)):
            return False
    inside = [c for c in (fn.calls if fn is not None else model.calls) if loop in c.site.loops]
    return not any(model.is_step_event(c) or c.method == "step" or call_trains(model, c) for c in inside)


def evaluated_in_loops(model: "TrainingModel", modes: "ModeAnalysis", layers: "ModeLayers") -> Iterator[tuple[Call, str, Training, str]]:
    """The forward passes (`model(x)`, its result kept) under `no_grad` in this module's evaluation loops of
    a module proven in training mode there and holding a mode-dependent layer (the first of each loop):
    each with the module as the code names it, the proof and the layer."""
    step_loops = [loop for loop in model.loops if loop.is_step]
    reported: set[int] = set()
    for loop in model.loops:
        if not evaluation_loop(model, loop, step_loops):
            continue
        fn = loop.function
        no_grad_function = fn is not None and model.under_no_grad_everywhere(fn)
        for call in fn.calls if fn is not None else model.calls:
            if loop not in call.site.loops or id(call.node) in reported or call.site.function is not fn:
                continue
            target = dotted(call.node.func)
            if target is None or call.qualname is not None or target in ("self", "super"):
                continue
            if not (no_grad_function or model.under(call.site, "no_grad")) or discarded(call):
                continue
            training = modes.training_at(target, call.site)
            layer = layers.of_module(call.node.func, fn, call.site) if training is not None else None
            if training is None or layer is None:
                continue
            reported.add(id(call.node))
            yield call, target, training, layer
            break


def evaluated_elsewhere(
    model: "TrainingModel", modes: "ModeAnalysis", layers: "ModeLayers"
) -> Iterator[tuple[Call, str, Training, str, "FunctionSummary"]]:
    """The calls (outside a training step) that give a module proven in training mode, and holding a
    mode-dependent layer, to a function of another project module that evaluates it: each with the
    module as the caller names it, the proof, the layer and the callee's summary. (A function of
    this module is followed into its own loops by the mode analysis.)"""
    step_functions = model.step_functions
    for call in model.calls:
        if model.callee(call) is not None or call.site.function in step_functions:
            continue
        if any(loop.is_step or any(a.is_step for a in loop_ancestors(loop)) for loop in call.site.loops):
            continue  # (evaluation inside the step: not this shape)
        summary = model.project_call_summary(call)
        for arg in arguments(summary, EVALUATES, call.node):
            target = dotted(arg)
            if target is None or target in ("self", "super") or summary is None:
                continue
            training = modes.training_at(target, call.site)
            layer = layers.of_module(arg, call.site.function, call.site) if training is not None else None
            if training is not None and layer is not None:
                yield call, target, training, layer, summary
                break


def _called_name(call: "Call") -> str | None:
    """The name a call runs in another module: a method of an object other than `self`, or a function
    it imports (`evaluate_episode_rtg(...)`, by the imported name)."""
    if call.method is not None:
        return call.method if call.receiver_text not in (None, "self", "cls", "super()") else None
    return call.qualname.rpartition(".")[2] if call.qualname is not None and call.receiver is None else None


def methods_called_without_grad(model: "TrainingModel") -> tuple[str, ...]:
    """The methods (and imported functions) this module calls on objects other than `self` under
    no_grad (a `with` block, or a function decorated with it): a prediction helper of another module
    that only such calls run (`with torch.no_grad(): acc = network.predict(x)`) records no graph."""
    quiet: dict[int, bool] = {}  # (per function: whether it runs without grad everywhere, as `methods_called_with_grad` asks)
    names: set[str] = set()
    for call in model.calls:
        name, fn = _called_name(call), call.site.function
        if name is None or name in names:
            continue
        if fn is not None and id(fn) not in quiet:
            quiet[id(fn)] = decorated_no_grad(fn.decorators) or model.under_no_grad_everywhere(fn)
        if model.under(call.site, "no_grad") or (fn is not None and quiet[id(fn)]):
            names.add(name)  # (also in a function every call of which is under no_grad: `evaluate` in `with torch.no_grad():`)
    return tuple(sorted(names))


def methods_called_with_grad(model: "TrainingModel") -> tuple[str, ...]:
    """The methods this module calls on objects other than `self` with autograd on (outside `no_grad`,
    in no function that runs without grad everywhere): what a module it imports cannot see when it
    asks whether its own method runs only under no_grad (`gan.visualize_results(epoch)` in a script)."""
    names: set[str] = set()
    graded: dict[int, bool] = {}  # (per function: whether it may run with grad)
    for call in model.calls:
        method = _called_name(call)
        if method is None or method in names or model.under(call.site, "no_grad"):
            continue
        fn = call.site.function
        if fn is not None and id(fn) not in graded:
            graded[id(fn)] = not model.under_no_grad_everywhere(fn)
        if fn is None or graded[id(fn)]:
            names.add(method)
    return tuple(sorted(names))
