"""TL510 ddp-model-moved-after-wrap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import Call, Function, TrainingModel
from trainlint.model.device_arguments import device_ordinal
from trainlint.model.lattice import HOST, Kind
from trainlint.model.names import dotted
from trainlint.model.torchnames import dtype_name, literal_string
from trainlint.rules.rule import Finding, Rule, shorten

DDP = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"})
CASTS = {"half": "float16", "bfloat16": "bfloat16", "double": "float64", "float": "float32"}
DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
MOVES = frozenset({"cpu", "cuda", "to", *CASTS})
ACCELERATOR = "accelerator"


@dataclass(frozen=True)
class Placement:
    """Where a module's parameters are and what dtype they have, as far as the code says.

    `device` is HOST, ACCELERATOR or None (unknown); `device_text` names the accelerator device as
    written (`cuda(rank)`, `to(device)`), so two moves to the same written device are known to agree.
    """

    device: str | None = None
    device_text: str | None = None
    dtype: str | None = None

    def moved(self, other: "Placement") -> "Placement":
        """This placement after a move whose effect is `other` (its unknown parts change nothing)."""
        if other.device is None and other.device_text is None:
            return Placement(self.device, self.device_text, other.dtype or self.dtype)
        return Placement(other.device, other.device_text, other.dtype or self.dtype)


def move_effect(model: TrainingModel, call: Call) -> Placement | None:
    """What `.cpu()`, `.cuda(...)`, `.to(...)`, `.half()`, ... do to a module; None for other calls."""
    method = call.method
    if method not in MOVES:
        return None
    if method == "cpu":
        return Placement(HOST)
    if method == "cuda":
        return Placement(ACCELERATOR, _written(model, call))
    if method in CASTS:
        return Placement(dtype=CASTS[method])
    device: str | None = None
    text: str | None = None
    dtype: str | None = None
    for arg in call.node.args:
        if arg.star or (arg.keyword is not None and arg.keyword.value not in ("device", "dtype")):
            continue
        string = literal_string(arg.value)
        if string is not None:
            if string in DTYPES:
                dtype = string
            else:
                device, text = (HOST, None) if string.split(":")[0] == "cpu" else (ACCELERATOR, string)
            continue
        named = dtype_name(arg.value, model.imports)
        if named in DTYPES:
            dtype = named
            continue
        if model._cpu_device(arg.value, call.site):
            device, text = HOST, None
        else:
            # a device expression: the same text is the same device
            device = ACCELERATOR if _accelerator_device(model, arg.value, call, 0) else None
            text = f"to({model.module.code_for_node(arg.value)})"
    return Placement(device, text, dtype)


def _accelerator_device(model: TrainingModel, expr: cst.BaseExpression, call: Call, depth: int) -> bool:
    """`"cuda:0"`, `torch.device("cuda", rank)`, or a name bound only to such: a device that is not the host."""
    string = literal_string(expr)
    if string is not None:
        return string.split(":")[0] in ("cuda", "xpu", "mps", "npu", "hpu")
    if isinstance(expr, cst.Call) and model.imports.resolve(expr.func) == "torch.device" and expr.args:
        return _accelerator_device(model, expr.args[0].value, call, depth + 1)
    if device_ordinal(model, expr, call.site):
        return True  # `.to(rank)` with `rank` an int (`int(os.environ["LOCAL_RANK"])`, `mp.spawn`'s process index)
    if isinstance(expr, cst.Name) and depth < 3:
        bindings = model.reaching(call.site.function, expr.value, call.site) or model.reaching(None, expr.value, None)
        return bool(bindings) and all(_accelerator_device(model, b.value, call, depth + 1) for b in bindings)
    return False


def _written(model: TrainingModel, call: Call) -> str:
    return "cuda(" + ", ".join(model.module.code_for_node(a.value) for a in call.node.args) + ")"


def _chain(expr: cst.BaseExpression) -> tuple[cst.BaseExpression, list[cst.Call]]:
    """`Net().to(device).half()` -> (`Net()`, [`.to(device)`, `.half()`]), innermost move first."""
    moves: list[cst.Call] = []
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in MOVES:
        moves.append(expr)
        expr = expr.func.value
    return expr, list(reversed(moves))


class DdpModelMovedAfterWrap(Rule):
    code = "TL510"
    name = "ddp-model-moved-after-wrap"
    severity = Severity.ERROR
    preview = True
    summary = "A `DistributedDataParallel` model (or its `.module`) moved to another device or dtype after wrapping, then trained."
    hint = "Move and cast the model before wrapping it in `DistributedDataParallel` (re-wrap it after a move you cannot avoid)."
    requires = ("DistributedDataParallel",)
    why = (
        "DDP registers its gradient-averaging hooks on each parameter's gradient accumulator when it is "
        "constructed. Moving or casting a parameter to another device or dtype (`.cpu()`, `.cuda()`, `.to(...)`, "
        "`.half()`, `.double()`) replaces its data, and autograd then drops the old accumulator "
        "(`set_data` resets it when the device or type changes) and makes a new one without the hooks: "
        "`backward()` no longer all-reduces, and every rank trains its own copy with no error or warning. "
        "pytorch/pytorch#104336: \"After moving the model between CUDA -> CPU -> CUDA, running subsequent "
        "`torch.backward()` won't trigger gradient reduction ... This causes the model to be effectively "
        "trained on a single device (without throwing any warning/error).\" A cast is a move here: `.to(torch.bfloat16)` "
        "and `.half()` replace each parameter's data with another type, which drops its accumulator just as a new "
        "device does, while `.to(torch.float32)` of a float32 model returns the same tensors and keeps them. The wrapper "
        "is followed where the code keeps it: moved on the line that makes it (`DDP(model).to(device)`), through "
        "a name bound to its `.module`, and through an attribute a trainer keeps (`self.model = "
        "self.ddp_model.module` in `__init__`) moved in another method the epoch or step loop runs (a test step). "
        "An int device (`.to(rank)` with `rank = int(os.environ[\"LOCAL_RANK\"])`, `dist.get_rank()`, the process "
        "index `mp.spawn` passes) is an accelerator's index."
    )
    story = "pytorch/pytorch#104336 and Lightning-AI/pytorch-lightning#17937: a model moved to the CPU to free the GPU for a faiss index, then back, trained apart on each rank."
    example = """\
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).cuda(rank)
model = DDP(model, device_ids=[rank])
model.double()
for x, y in loader:
    optimizer.zero_grad()
    loss_fn(model(x.double()), y).backward()
    optimizer.step()
"""
    fixed_example = """\
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).cuda(rank).double()
model = DDP(model, device_ids=[rank])
for x, y in loader:
    optimizer.zero_grad()
    loss_fn(model(x.double()), y).backward()
    optimizer.step()
"""
    not_flagged = (
        "Moves before wrapping; a move after wrapping to where the model already is (the same written device "
        "as the move before wrapping, `.cpu()` of a model on the CPU, `.float()` of a float32 model), which "
        "keeps the gradient accumulators; moves whose effect the analysis cannot tell apart from that (a "
        "device of unknown place, a model of unknown dtype); moves after the last training step (saving a "
        "CPU copy at the end), and a model wrapped again after the move; `DataParallel` (which replicates the "
        "module at every forward); `.to(dtype)` with a dtype of unknown value; moves of a copy (`copy.deepcopy("
        "ddp.module).cpu()` for evaluation) and of tensors and batches; the move back of a round trip (the move "
        "away is the finding); moves in another function than the wrapping one, except in methods of the class "
        "whose `__init__` keeps the wrapper on `self` (and binds that attribute nowhere else) when the epoch or "
        "step loop runs them, and not when only code after training does."
    )
    verification = "`trainlint verify` runs 2 gloo ranks on the CPU, wraps a model in DDP, moves its `.module` to float64 and backpropagates rank-specific batches: the ranks' gradients differ (not averaged), while without the move they agree."
    valid = (
        # a copy moved for evaluation, batches moved to the device
        """
import copy
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(Net().to(rank), device_ids=[rank])
for x in loader:
    model(x.to(rank)).sum().backward()
    optimizer.step()
    cpu_copy = copy.deepcopy(model.module).cpu()
""",
        # moved before wrapping, then a move to where it already is
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = Net().to(device)
ddp_model = DDP(model, device_ids=[rank])
ddp_model.to(device)
for x in loader:
    ddp_model(x).sum().backward()
    optimizer.step()
""",
        # a CPU copy for the checkpoint after training ends
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(Net().cuda(rank), device_ids=[rank])
for x in loader:
    model(x).sum().backward()
    optimizer.step()
torch.save(model.module.cpu().state_dict(), "final.pt")
""",
        # DataParallel replicates the module at every forward: moving it is fine
        """
import torch
model = torch.nn.DataParallel(Net())
model.cuda()
for x in loader:
    model(x).sum().backward()
    optimizer.step()
""",
        # .float() of a float32 model changes nothing
        """
import torch
from torch.nn.parallel import DistributedDataParallel
model = DistributedDataParallel(Net())
model.float()
for x in loader:
    model(x).sum().backward()
    optimizer.step()
""",
    )
    invalid = (
        # the wrapper moved on the line that makes it: a CPU model moved to the GPU after wrapping
        """
import os
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
model = DDP(torch.nn.Linear(16, 4)).to(device)
for x in loader:
    model(x).sum().backward()
    optimizer.step()
""",
        # the module a trainer keeps, moved in a test step the epoch loop runs
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
class Trainer:
    def __init__(self, model, rank):
        self.ddp_model = DDP(model.to(rank), device_ids=[rank])
        self.model = self.ddp_model.module
    def test_step(self, batch):
        self.model.cpu()
        return evaluate(self.model, batch)
    def fit(self, loader, epochs):
        for epoch in range(epochs):
            for x in loader:
                self.ddp_model(x).sum().backward()
                self.optimizer.step()
            self.test_step(x)
""",
        # the CPU-offload round trip of the report
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
def train(rank, model, loader, optimizer):
    model = DDP(model.to(rank), device_ids=[rank])
    for epoch in range(3):
        for x in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
        model.module.cpu()
        build_index(model.module)
        model.module.to(rank)
""",
        # a CPU DDP model moved to the GPU after wrapping
        """
import torch
import torch.nn as nn
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
model = nn.parallel.DistributedDataParallel(model)
model.cuda()
for x in loader:
    model(x).sum().backward()
    optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for wrap in model.calls:
            if wrap.qualname not in DDP or not wrap.node.args or wrap.node.args[0].keyword is not None:
                continue
            before = self._placement(model, wrap)
            # `DDP(model).to(device)`: the wrapper moved on the line that makes it
            for call in self._wrap_line_moves(model, wrap):
                effect = move_effect(model, call)
                if effect is None:
                    continue
                if self._changes(before, effect) and self._trains_after(model, wrap, call):
                    yield self._finding(model, call)
                before = before.moved(effect)
            names = self._handles(model, wrap)
            for call in model.calls:
                if call.site.function is not wrap.site.function or call.site.order <= wrap.site.order:
                    continue
                if call.receiver_text not in names or self._rebound(model, wrap, call, names):
                    continue
                effect = move_effect(model, call)
                if effect is None or not self._changes(before, effect):
                    continue
                if not self._trains_after(model, wrap, call):
                    continue
                yield self._finding(model, call)
            yield from self._moves_in_methods(model, wrap, before)

    @staticmethod
    def _finding(model: TrainingModel, call: Call) -> Finding:
        receiver = call.receiver_text or shorten(model.module.code_for_node(call.receiver), 40) if call.receiver is not None else ""
        return Finding(
            call.node,
            f"`{receiver}.{call.method}()` moves the model after `DistributedDataParallel` wrapped it: "
            "its gradient hooks stay on the old accumulators, so gradients are no longer averaged and the "
            "ranks train apart, silently",
        )

    @staticmethod
    def _wrap_line_moves(model: TrainingModel, wrap: Call) -> list[Call]:
        """The moves chained on the wrapper where it is made (`DDP(model).to(device).half()`), innermost first."""
        moves: list[Call] = []
        node: cst.BaseExpression = wrap.node
        while True:
            found = [c for c in model.calls if c.receiver is node and c.method in MOVES]
            if len(found) != 1:
                return moves
            moves.append(found[0])
            node = found[0].node

    @staticmethod
    def _handles(model: TrainingModel, wrap: Call) -> set[str]:
        """The names the wrapped parameters are reached by: the wrapper (also when moves are chained on
        it: `model = DDP(net).to(device)`), its `.module`, the wrapped module, and the names of the same
        function later bound to one of these (`net = ddp_model.module`)."""
        names: set[str] = set()
        for a in model.assigns_in(wrap.site.statement):
            if _chain(a.value)[0] is wrap.node and len(a.targets) == 1 and not a.unpacked:
                names |= {a.targets[0], a.targets[0] + ".module"}
        inner, _ = _chain(wrap.node.args[0].value)
        text = dotted(inner)
        if text:
            names.add(text)
        for a in model.assigns:  # (in source order)
            if a.site.function is wrap.site.function and a.site.order > wrap.site.order and len(a.targets) == 1 and not a.unpacked:
                if a.op is None and dotted(a.value) in names and a.targets[0] not in names and not a.site.loops:
                    names.add(a.targets[0])
        return names

    @staticmethod
    def _rebound(model: TrainingModel, wrap: Call, call: Call, names: set[str]) -> bool:
        """The receiver's name bound to something else between the wrap and the move (not to itself
        moved, not to the wrapper or another name of the wrapped module)."""
        root = (call.receiver_text or "").removesuffix(".module")
        for a in model.assigns:
            if a.site.function is not wrap.site.function or not wrap.site.order < a.site.order < call.site.order:
                continue
            if root in a.targets and a.value is not wrap.node:
                inner, moves = _chain(a.value)
                if inner is wrap.node or (not moves and dotted(inner) in names):
                    continue
                if not (moves and dotted(inner) in (root, root + ".module")):
                    return True
        return False

    def _moves_in_methods(self, model: TrainingModel, wrap: Call, before: Placement) -> Iterator[Finding]:
        """A wrapper made in `__init__` and kept on `self` (`self.ddp_model = DDP(...)`, `self.model =
        self.ddp_model.module`), moved in another method of the class that runs between training steps:
        one the epoch or step loop calls (`self.test_step()`), or a step function."""
        fn = wrap.site.function
        names = self._attribute_handles(model, wrap)
        if fn is None or not names:
            return
        between = model.called_from(model.step_containing_loops) | model.step_functions
        for call in model.calls:
            method = call.site.function
            if method is None or method is fn or method.class_name != fn.class_name or call.receiver_text not in names:
                continue
            effect = move_effect(model, call)
            if effect is None or not self._changes(before, effect) or method not in between:
                continue
            if any(c.qualname in DDP and c.site.function is method and c.site.order > call.site.order for c in model.calls):
                continue  # wrapped again after the move
            yield self._finding(model, call)

    @staticmethod
    def _attribute_handles(model: TrainingModel, wrap: Call) -> set[str]:
        """The attributes of `self` that hold the wrapper or its `.module` in every method of the class:
        the wrapper made in `__init__` and bound to `self.<name>` there and nowhere else, and the
        attributes every assignment of which (in any method) is one of those or its `.module`."""
        fn = wrap.site.function
        if fn is None or fn.class_name is None or fn.name != "__init__" or fn.parent is not None:
            return set()
        own = [a for a in model.assigns if a.site.function is not None and a.site.function.class_name == fn.class_name]
        kept = {a.targets[0] for a in model.assigns_in(wrap.site.statement)
                if _chain(a.value)[0] is wrap.node and len(a.targets) == 1 and not a.unpacked and a.targets[0].count(".") == 1
                and a.targets[0].startswith("self.")}
        if len(kept) != 1 or len([a for a in own if next(iter(kept)) in a.targets]) != 1:
            return set()  # (bound again elsewhere: a method that re-wraps)
        names = {*kept, *(k + ".module" for k in kept)}
        inner = dotted(_chain(wrap.node.args[0].value)[0]) or ""
        if inner.startswith("self.") and inner.count(".") == 1 and all(
            a.site.function is fn and a.site.order < wrap.site.order for a in own if inner in a.targets
        ):
            names.add(inner)  # `self.ddp = DDP(self.model, ...)`: `self.model` is the wrapped module
        changed = True
        while changed:
            changed = False
            by_target: dict[str, list[bool]] = {}
            for a in own:
                for target in a.targets:
                    if target.startswith("self.") and target.count(".") == 1 and target not in names:
                        by_target.setdefault(target, []).append(a.op is None and not a.unpacked and dotted(a.value) in names)
            for target, aliases in by_target.items():
                if all(aliases):
                    names.add(target)
                    changed = True
        return names

    def _placement(self, model: TrainingModel, wrap: Call) -> Placement:
        """Where the wrapped module is when it is wrapped."""
        inner, moves = _chain(wrap.node.args[0].value)
        place = self._origin(model, inner, wrap, 0)
        for move in moves:
            found = model.call_at(move)
            effect = move_effect(model, found) if found is not None else None
            if effect is not None:
                place = place.moved(effect)
        ids = wrap.kwarg("device_ids")
        if place.device is None and ids is not None and not (isinstance(ids, cst.Name) and ids.value == "None"):
            place = Placement(ACCELERATOR, place.device_text, place.dtype)  # DDP takes device ids only for a module on a GPU
        return place

    def _origin(self, model: TrainingModel, expr: cst.BaseExpression, wrap: Call, depth: int) -> Placement:
        """The placement of a module expression: a constructor's (host, float32), then the moves applied to
        the name it is bound to before the wrap."""
        fn = wrap.site.function
        if isinstance(expr, cst.Name) and depth < 3:
            bindings = model.reaching(fn, expr.value, wrap.site)
            if len(bindings) != 1:
                return Placement()
            binding = bindings[0]
            inner, moves = _chain(binding.value)
            place = self._origin(model, inner, wrap, depth + 1) if inner is not expr else Placement()
            for move in moves:
                found = model.call_at(move)
                effect = move_effect(model, found) if found is not None else None
                if effect is not None:
                    place = place.moved(effect)
            for call in model.calls:  # in-place moves of the name before the wrap: `model.cuda(rank)`
                if (call.site.function is fn and call.receiver_text == expr.value
                        and binding.site.order < call.site.order < wrap.site.order and call.node not in moves):
                    effect = move_effect(model, call)
                    if effect is not None:
                        place = place.moved(effect)
            return place
        if isinstance(expr, cst.Call):
            value = model.value(expr, wrap.site)
            constructor = value.kind is Kind.MODULE and bool(value.origin) and not any(
                a.keyword is not None and a.keyword.value in ("device", "device_map") for a in expr.args
            )
            if constructor and model.values.default_device == HOST and not any(
                c.qualname == "torch.set_default_dtype" for c in model.calls
            ):
                return Placement(HOST, None, value.dtype or "float32")
        return Placement()

    @staticmethod
    def _changes(before: Placement, effect: Placement) -> bool:
        """Whether a move changes the device or the dtype of a module placed at `before`."""
        if effect.dtype is not None and before.dtype is not None and effect.dtype != before.dtype:
            return True
        if effect.device is None or before.device is None:
            return False
        if effect.device != before.device:
            return True
        return False  # host to host, or the same accelerator written differently: not known to differ

    @staticmethod
    def _trains_after(model: TrainingModel, wrap: Call, move: Call) -> bool:
        """A training step runs after the move with the same wrapper: later in the function, or on the next
        round of a training loop around the move that does not wrap again."""
        fn: Function | None = wrap.site.function
        for call in model.calls:
            if call.site.function is not fn or call.site.order <= move.site.order:
                continue
            if model.is_step_event(call) or model.callee(call) in model.step_functions or model.project_steps(call):
                return not any(
                    other.qualname in DDP and other is not wrap and move.site.order < other.site.order < call.site.order for other in model.calls
                )
        return any(loop in model.step_containing_loops and loop not in wrap.site.loops for loop in move.site.loops)
