"""Device and dtype arguments as the code spells them: `.to("cpu")`, `.to(torch.device("cpu"))`, a
function of the module that returns one (d2l's `cpu()`), `.to(torch.float16)`. A mixin of the value
model's calls."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.lattice import ACCEL, HOST, UNKNOWN_DEVICE, Kind, Value
from trainlint.model.names import ImportMap, root_name
from trainlint.model.torchnames import TORCH_DTYPES, dtype_name, literal_string

if TYPE_CHECKING:
    from trainlint.model.facts import Function, Loop, Site
    from trainlint.model.training import TrainingModel


# torch's functions that return a dtype: `.to(torch.get_default_dtype())` converts
DTYPE_CALLS = frozenset({"torch.get_default_dtype", "torch.promote_types", "torch.result_type"})


def device_of_argument(expr: cst.BaseExpression | None) -> str:
    """`"cpu"` -> host; `"cuda"`, `device`, `torch.device("cuda")` -> accelerator-or-unknown."""
    text = literal_string(expr)
    if text is not None:
        return HOST if text.split(":")[0] == "cpu" else ACCEL
    if isinstance(expr, cst.Call) and expr.args:
        return device_of_argument(expr.args[0].value)
    return UNKNOWN_DEVICE


class DeviceArguments:
    """Where `.to()` sends a value, read from its arguments."""

    model: "TrainingModel"

    def built_on(self, device: cst.BaseExpression | None, fn: "Function | None", at: "Site | None") -> str:
        """Where a factory given `device=` builds: also beside a tensor whose place is known (`torch.tensor(1.,
        device=t.device)` of a host `t` is on the host); without one, the default device."""
        if type(device) is cst.Attribute and device.attr.value == "device" and (beside := self.of(device.value, fn, at)).kind is Kind.TENSOR:  # type: ignore[attr-defined]
            return beside.device
        if device is None or (type(device) is cst.Name and device.value == "None"):
            return self.default_device  # type: ignore[attr-defined]
        if isinstance(device, (cst.Name, cst.Attribute)) and self.device_literal(device, fn, at) is None:
            return ACCEL  # (a device named, not spelled: where the run puts its tensors, as `.to(device)` moves them)
        return device_of_argument(device) if not isinstance(device, cst.Call) else HOST if self.spells_cpu(device, fn, at) else ACCEL

    def _moved(self, base: Value, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value:
        for a in call.args:
            if a.keyword is None or a.keyword.value == "device":
                if isinstance(a.value, (cst.SimpleString, cst.Call, cst.Name, cst.Attribute)):
                    if self.device_literal(a.value, fn, at) is not None:
                        return replace(base, device=HOST if self.spells_cpu(a.value, fn, at) else ACCEL)
                    if self._is_dtype(a.value, fn, at):
                        continue  # `.to(torch.float16)`, `.to(dtype)` of a `dtype=torch.float32` parameter
                    return replace(base, device=ACCEL)
        return base

    def device_literal(self, expr: cst.BaseExpression, fn: "Function | None", at: "Site | None", depth: int = 0) -> str | None:
        """The device a `.to()` argument spells: `"cpu"`, `torch.device("cpu")`, or a call of this
        module's function that returns one (d2l's `cpu()`). A name is not read: `device = "cpu"` is
        the setting a script changes to run where it trains."""
        text = literal_string(expr)
        if text is not None or depth > 2 or not isinstance(expr, cst.Call):
            return text
        m = self.model
        if m.imports.resolve(expr.func) == "torch.device":
            return literal_string(expr.args[0].value) if len(expr.args) == 1 else None
        own = m.imports.own_name(expr.func)
        local = m.visible_function(own, fn) if own is not None and not expr.args else None
        if local is None or not local.return_facts:
            return None
        found = {self.device_literal(r.value, local, r.site, depth + 1) for r in local.return_facts}
        return found.pop() if len(found) == 1 else None

    def spells_cpu(self, expr: cst.BaseExpression, fn: "Function | None", at: "Site | None") -> bool:
        """Whether a device argument spells the host (`"cpu"`, `"cpu:0"`, `torch.device("cpu")`, `cpu()`)."""
        return (self.device_literal(expr, fn, at) or "").split(":")[0] == "cpu"

    def _is_dtype(self, expr: cst.BaseExpression, fn: "Function | None", at: "Site | None") -> bool:
        """A torch dtype: `torch.float16`, or a name every definition of which is one (a parameter
        whose default is, and that no assignment rebinds)."""
        m = self.model
        if isinstance(expr, cst.Call):  # `torch.get_default_dtype()`, `x.dtype` read through a call of torch's
            return m.imports.resolve(expr.func) in DTYPE_CALLS
        if not isinstance(expr, cst.Name):
            return _spelled_dtype(expr, m.imports)
        assigns = m.reaching(fn, expr.value, at)
        if assigns:
            return all(a.op is None and _spelled_dtype(a.value, m.imports) for a in assigns)
        default = fn.defaults.get(expr.value) if fn is not None else None
        return default is not None and dtype_name(default, m.imports) in TORCH_DTYPES


def _spelled_dtype(expr: cst.BaseExpression, imports: ImportMap) -> bool:
    """`torch.float16`, or another tensor's `x.dtype` (`dtype = anchors.dtype`, then `.to(dtype)`)."""
    return dtype_name(expr, imports) in TORCH_DTYPES or (type(expr) is cst.Attribute and expr.attr.value == "dtype")  # type: ignore[attr-defined]


def moved_to_device(value: Value) -> bool:
    """Something the analysis cannot name, moved to the accelerator (`batch["labels"].to(device)`):
    arithmetic, a comparison or a reduction on it computes a tensor there (a module or a batch
    object moved the same way has none of those)."""
    return value.kind is Kind.UNKNOWN and value.device == ACCEL


def on_device_operands(sides: list[Value]) -> list[Value]:
    """The operands of arithmetic or a comparison, where something unnamed moved to the accelerator
    meets numbers, tensors or values of no known kind or place (`(y >= 0)` for `y = y.to(device)`,
    `lengths // (2 ** n_down)` for `n_down` read from a configuration): a tensor there, since a module
    or a batch object has no arithmetic."""
    if any(moved_to_device(s) for s in sides) and all(moved_to_device(s) or s.kind in (Kind.NUMBER, Kind.TENSOR) or (s.kind is Kind.UNKNOWN and s.device == UNKNOWN_DEVICE) for s in sides):
        return [Value(Kind.TENSOR, ACCEL) if moved_to_device(s) else s for s in sides]
    return sides


# what returns a device ordinal: `.to(n)` and `.cuda(n)` with an int `n` send a module to accelerator n
ORDINAL_CALLS = frozenset({
    "int", "torch.distributed.get_rank", "torch.distributed.get_local_rank", "torch.distributed.get_node_local_rank",
    "torch.cuda.current_device", "torch.accelerator.current_device_index",
})
# launchers that call a function with the process index (an int) as its first argument
SPAWNERS = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"})


def device_ordinal(model: "TrainingModel", expr: cst.BaseExpression, site: "Site | None", depth: int = 0) -> bool:
    """Whether a device argument is an int, which torch reads as an accelerator's index (never the
    host): an integer, `int(...)`, a rank or device index torch returns, a name bound only to such, or
    the first parameter of a function `mp.spawn` runs (the process index it passes)."""
    if isinstance(expr, cst.Integer):
        return True
    if isinstance(expr, cst.Call):
        return (model.imports.resolve(expr.func) or (expr.func.value if isinstance(expr.func, cst.Name) else "")) in ORDINAL_CALLS
    if not isinstance(expr, cst.Name) or depth > 2 or site is None:
        return False
    fn = site.function
    bindings = model.reaching(fn, expr.value, site)
    if bindings:
        return all(b.op is None and not b.unpacked and len(b.targets) == 1 and device_ordinal(model, b.value, b.site, depth + 1) for b in bindings)
    if fn is None or fn.parent is not None or fn.class_name is not None or fn.params[:1] != (expr.value,):
        return False
    return any(
        c.qualname in SPAWNERS and c.node.args and isinstance(c.node.args[0].value, cst.Name) and c.node.args[0].value.value == fn.name
        for c in model.calls
    )


def moved_later_in_loop(model: "TrainingModel", name: str, loop: "Loop", at: "Site") -> bool:
    """Whether the body of `loop`, whose header binds `name`, moves it to the device after `at`
    (`for x, lengths in loader: n = max(lengths.tolist()); ...; lengths = lengths.cuda()`): before
    the move, the loader's value is on the host (the move would be pointless otherwise)."""
    for a in model.reaching(at.function, name, None):
        value = a.value
        if not (a.site.order > at.order and loop in a.site.loops and isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)):
            continue
        if root_name(value.func.value) != name or value.func.attr.value not in ("to", "cuda"):
            continue
        first = value.args[0].value if value.args else None
        if value.func.attr.value == "cuda" or (first is not None and dtype_name(first, model.imports) not in TORCH_DTYPES and not model.values.spells_cpu(first, a.site.function, a.site)):
            return True
    return False
