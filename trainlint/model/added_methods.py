"""Methods set on a class from outside it. d2l's chapters grow their classes one method at a time:

    def add_to_class(Class):
        def wrapper(obj):
            setattr(Class, obj.__name__, obj)
        return wrapper

    @d2l.add_to_class(d2l.Trainer)
    def clip_gradients(self, grad_clip_val, model): ...

The decorated function is then a method of `Trainer`, run wherever `Trainer` calls `self.clip_gradients`.
A decorator factory is known to do this by what its body does, not by its name."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.names import dotted

if TYPE_CHECKING:
    from trainlint.model.facts import Function
    from trainlint.model.training import TrainingModel


def adds_methods(model: "TrainingModel", fn: "Function") -> bool:
    """A decorator factory that sets the function it decorates on the class it is given: a function
    nested in `fn` calls `setattr(<fn's first parameter>, obj.__name__, obj)` for its parameter `obj`."""
    if not fn.params or fn.class_name is not None:
        return False
    for inner in model.functions:
        if inner.parent is not fn or not inner.params:
            continue
        obj = inner.params[0]
        for call in inner.calls:
            args = call.node.args
            if call.name == "setattr" and call.qualname is None and len(args) == 3:
                texts = [dotted(a.value) for a in args]
                if texts == [fn.params[0], f"{obj}.__name__", obj]:
                    return True
    return False


def attach_added_methods(model: "TrainingModel") -> None:
    """Make each top-level function decorated by a method-adding factory (of this module or a project
    module) a method of the class it names: a class of this module gets it among its methods (a later
    one replaces what it had); for a project class of another module the function is a method of that
    class as this module spells it (`d2l.Trainer`), which other modules' summaries may call."""
    for fn in model.functions:
        if fn.parent is not None or fn.class_name is not None:
            continue
        for decorator in fn.node.decorators:
            call = decorator.decorator
            if not isinstance(call, cst.Call) or len(call.args) != 1 or call.args[0].keyword is not None:
                continue
            own = model.imports.own_name(call.func)
            local = model.visible_function(own, None) if own is not None else None
            if local is not None:
                if not adds_methods(model, local):
                    continue
            else:
                qualname = model.imports.resolve(call.func)
                summary = model.project_symbol(qualname) if qualname else None  # (a FunctionSummary)
                if getattr(summary, "adds_methods", False) is not True:
                    continue
            target = call.args[0].value
            own_class = model.imports.own_name(target)
            info = model.local_class(own_class) if own_class is not None else None
            if info is not None:
                fn.class_name, fn.class_bases = info.name, info.bases
                info.methods[fn.name] = fn
                continue
            qualname = model.imports.resolve(target)
            if qualname and model.class_methods(qualname) is not None:  # (a project class)
                fn.class_name, fn.class_bases = dotted(target), (qualname,)
