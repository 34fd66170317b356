"""Functions as values: `sync = torch.cuda.synchronize`, `self.tokenizer = list_str_to_tensor`,
`step = make_step(model, opt)`. A name holding a function runs it when called; which functions it
may hold comes from its bindings, as any value does (DESIGN.md: "Values, not names")."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.lattice import LOCAL_FUNCTION, UNKNOWN, Kind, Value, join, origins
from trainlint.model.torchnames import TORCH_DTYPES

if TYPE_CHECKING:
    from trainlint.model.facts import Call, Function, Site
    from trainlint.model.training import TrainingModel

# torch's modules (a dotted name ending in one names a module, not a function)
TORCH_SUBMODULES = frozenset(
    """cuda nn functional distributed optim utils data npu xpu mps cpu backends amp autograd fft linalg special
    jit onnx hub profiler accelerator compiler export fx testing sparse random multiprocessing quantization ao
    overrides library serialization masked nested signal func package monitor futures init parallel rnn""".split()
)
# what no call can return a value from (calling it raises)
_NOT_CALLABLE = frozenset({Kind.STRING, Kind.NUMBER, Kind.BOOL, Kind.NONE})
# what wraps a function and runs it when called (`torch.compile(train_step)`, `partial(loss, alpha=a)`)
FUNCTION_WRAPPERS = frozenset({"torch.compile", "functools.partial", "functools.wraps", "torch.jit.script"})


def library_function(qualname: str) -> Value | None:
    """`torch.cuda.synchronize` named, not called: that function (a module, a dtype or a class is none)."""
    root, _, rest = qualname.partition(".")
    last = qualname.rsplit(".", 1)[-1]
    if root != "torch" or not rest or last in TORCH_DTYPES or last in ("half", "float", "double") or last in TORCH_SUBMODULES:
        return None
    if not last.isidentifier() or not last[:1].islower():
        return None
    return Value(Kind.FUNCTION, origin=qualname)


def portable(value: Value) -> Value:
    """A value as other modules may read it (in a summary): this module's functions, named by their
    index here, mean nothing there and are dropped (a function value of none of them is unknown)."""
    if value.kind is Kind.FUNCTION:
        kept = [o for o in origins(value) if local_function_index(o) is None]
        return replace(value, origin="|".join(kept)) if kept else UNKNOWN
    element = portable(value.element) if value.element is not None else None
    items = tuple(portable(i) for i in value.items) if value.items is not None else None
    return value if (element, items) == (value.element, value.items) else replace(value, element=element, items=items)


def local_function_origin(index: int) -> str:
    """The origin naming the function at `index` of the module's functions."""
    return f"{LOCAL_FUNCTION}{index}"


def local_function_index(origin: str) -> int | None:
    """The index of the module's function an origin names (None for another module's or a library's)."""
    if not origin.startswith(LOCAL_FUNCTION):
        return None
    rest = origin[len(LOCAL_FUNCTION):]
    return int(rest) if rest.isdigit() else None


class FunctionCalls:
    """Calls of function values (a mixin of the value model's calls)."""

    model: "TrainingModel"

    def returns(self, function: "Function") -> Value:
        raise NotImplementedError

    def _library_call(self, qual: str, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value | None:
        raise NotImplementedError

    def _assigned(self, assign, name: str) -> Value:  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def called_attribute(self, fn: "Function | None", text: str) -> Value:
        """What `self.tokenizer(...)` calls: the functions the class assigns to the attribute. A branch
        that assigns a string, number, bool or None (`self.tokenizer = tokenizer` under `if
        callable(tokenizer)` when the option is the string "char_utf8") is not the one called: calling
        such a value raises. Unknown unless every other assignment is a function."""
        cls = fn.class_name if fn is not None else None
        if cls is None:
            return UNKNOWN
        assigned = (self._assigned(a, text) for a in self.model.attribute_assigns(cls, text))
        held = [value for value in assigned if value.kind not in _NOT_CALLABLE]
        value = join(held)
        return value if held and value.kind is Kind.FUNCTION else UNKNOWN

    def _dispatched(self, method: "Function", receiver: cst.BaseExpression) -> Value:
        """What `self.loss(...)` returns: `self` may be an instance of a subclass of this module, so the
        join of the method and its overrides; a method that can only raise (`raise
        NotImplementedError`) returns nothing to join."""
        methods = [method]
        if isinstance(receiver, cst.Name) and receiver.value == "self" and method.class_name is not None:
            methods += [info.methods[method.name] for info in self.model.subclasses(method.class_name) if method.name in info.methods]
        values = [self.returns(f) for f in methods if f.return_facts or not _only_raises(f)]
        return join(values) if values else UNKNOWN

    def _called_function(self, held: Value, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value:
        """What calling a function value returns: the join over the functions it may be."""
        values = []
        for function in self.model.held_functions(held):
            values.append(self.returns(function))
        for origin in origins(held):
            if local_function_index(origin) is None:
                values.append(self._library_call(origin, call, fn, at) or UNKNOWN)
        return join(values) if values else UNKNOWN


def _only_raises(function: "Function") -> bool:
    """A body that ends in `raise` and returns nothing (an abstract method's)."""
    body = function.node.body
    last = body.body[-1] if isinstance(body, cst.IndentedBlock) and body.body else body
    if isinstance(last, cst.SimpleStatementLine):
        return any(isinstance(s, cst.Raise) for s in last.body)
    return isinstance(last, cst.SimpleStatementSuite) and any(isinstance(s, cst.Raise) for s in last.body)


def held_calls_of(model: "TrainingModel", fn: "Function") -> "list[Call]":
    """`step(batch)` where the name `step` holds `fn` without naming it (`step = make_step(cfg)`
    returning a nested `def`), its arguments given as they are (not through `partial`)."""
    if fn.class_name is not None:  # (a name holds a function of the module only where it names a top-level or nested `def`)
        return []
    return [
        c for c in model._instance_calls  # (calls of what is no function of the module by name)
        if type(c.node.func) is cst.Name and fn in model.held_functions(model.value(c.node.func, c.site)) and not bound_partially(model, c)
    ]


def bound_partially(model: "TrainingModel", call: "Call") -> bool:
    """`backwards(loss)` after `backwards = partial(loss_backwards, self.fp16)`: its arguments fill the
    parameters after those the `partial` binds."""
    bound = model.reaching(call.site.function, call.node.func.value, call.site) if isinstance(call.node.func, cst.Name) else []
    return any(isinstance(a.value, cst.Call) and model.imports.resolve(a.value.func) == "functools.partial" for a in bound)


def partial_function(model: "TrainingModel", call: "Call") -> cst.BaseExpression | None:
    """What a name bound to `functools.partial(f, ...)` runs when called: `f`, as written
    (`compute_losses()` after `compute_losses = functools.partial(self.diffusion.training_losses,
    self.model, x)` runs `self.diffusion.training_losses`); None for anything else."""
    func = call.node.func
    if not isinstance(func, cst.Name) or call.qualname is not None:
        return None
    bound = model.reaching(call.site.function, func.value, call.site)
    wrapped = [a.value.args[0].value for a in bound if a.op is None and not a.unpacked and isinstance(a.value, cst.Call)
               and model.imports.resolve(a.value.func) == "functools.partial" and a.value.args and a.value.args[0].keyword is None]
    if not bound or len(wrapped) != len(bound) or any(not w.deep_equals(wrapped[0]) for w in wrapped):
        return None
    return wrapped[0]
