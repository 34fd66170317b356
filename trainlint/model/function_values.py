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
    from trainlint.model.facts import Function, Site
    from trainlint.model.training import TrainingModel

# torch's modules (a dotted name ending in one names a module, not a function)
TORCH_SUBMODULES = frozenset(
    """cuda nn functional distributed optim utils data npu xpu mps cpu backends amp autograd fft linalg special
    jit onnx hub profiler accelerator compiler export fx testing sparse random multiprocessing quantization ao
    overrides library serialization masked nested signal func package monitor futures init parallel rnn""".split()
)
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

    def _called_function(self, held: Value, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value:
        """What calling a function value returns: the join over the functions it may be."""
        values = []
        for function in self.model.held_functions(held):
            values.append(self.returns(function))
        for origin in origins(held):
            if local_function_index(origin) is None:
                values.append(self._library_call(origin, call, fn, at) or UNKNOWN)
        return join(values) if values else UNKNOWN
