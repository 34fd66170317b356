"""Helpers that move what they are given to the device: `to_var(x)` (`x = x.cuda()` when a GPU is
there, then `return Variable(x)`), `utils.cuda([imgs, z])` returning `[x.cuda() for x in xs]`,
`self.get_torch_variable(arg)` returning `Variable(arg).cuda(self.cuda_index)`. A call of one is a
move of its argument (of each element of a list or tuple written there), as `arg.cuda()` is. And what a
host tensor is filled with before its move: the batch's own values (a padded batch, data), or a device
tensor (a copy back to the host)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.arguments import argument_for
from trainlint.model.names import dotted
from trainlint.model.arithmetic import built_on_host
from trainlint.model.parameter_facts import MOVES, keys
from trainlint.model.lattice import ACCEL, HOST, Kind
from trainlint.model.torchnames import LEGACY_CONSTRUCTORS, literal_string

if TYPE_CHECKING:
    from trainlint.model.facts import Call, Function, Site
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
        element = expr.elt
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


def moved_arguments(m: "TrainingModel", call: "Call", callee: "Function | None", summary: "FunctionSummary | None") -> list[cst.BaseExpression]:
    """What a call of a moving helper (`callee` of this module, else the project function `summary`
    describes) moves: the argument for the parameter it moves, or each element of a list or tuple
    written there (`utils.cuda([imgs, z])`); empty for any other call."""
    key = moved_parameter(m, callee) if callee is not None else next(iter(keys(summary, MOVES)), None)
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


def filled_with_data(model: "TrainingModel", expr: cst.BaseExpression, site: "Site") -> bool:
    """A tensor a factory built on the host (`seq_tensor = torch.zeros((n, max_len)).long()`) that the
    function fills with the batch's own values before the move (`seq_tensor[i, :len] = torch.LongTensor(seq)`):
    a padded batch, data, not a constant; filled with numbers, host constants or device values
    (`x_pad[:, :n] = x`), it could have been built on the device."""
    name = expr
    while isinstance(name, cst.Subscript):  # (`seq_tensor[perm_idx]`: rows of it)
        name = name.value
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
