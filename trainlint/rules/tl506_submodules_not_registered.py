"""TL506 submodules-not-registered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import libcst as cst

from trainlint.diagnostics import Applicability, Severity
from trainlint.model import Assign, Call, Function, TrainingModel
from trainlint.model.facts import ClassInfo
from trainlint.model.module_classes import (
    REGISTERING_METHODS,
    Built,
    built_by,
    is_module_class,
    mentions,
    torch_nn_prefix,
)
from trainlint.rules.rule import Finding, NodeEdit, NodeFix, Rule

# overrides through which a class hands its own containers' parameters to the optimizer and checkpoints
# (an override of `cuda` or `to` that only moves them still leaves them out of `parameters()`)
HAND_MANAGED = frozenset({
    "parameters", "named_parameters", "children", "named_children", "modules", "named_modules", "state_dict",
    "load_state_dict",
})
FILLING_METHODS = frozenset({"append", "extend", "insert"})
PLAIN_CONTAINERS = (cst.List, cst.Tuple, cst.Dict, cst.ListComp, cst.DictComp)


@dataclass
class Holder:
    """A plain container stored on `self` that holds layers or parameters built for it."""

    assign: Assign  # where the attribute is bound (for a filled seed: the empty container)
    built: set[Built]
    kind: str  # "list" or "dict"
    fixable: bool  # a dict whose keys are all strings, or any list


class SubmodulesNotRegistered(Rule):
    code = "TL506"
    name = "submodules-not-registered"
    severity = Severity.ERROR
    preview = True
    summary = "An `nn.Module` keeps layers or parameters it builds in a plain `list`, `tuple` or `dict` attribute."
    hint = "Store them in `nn.ModuleList` / `nn.ModuleDict` (`nn.ParameterList` / `nn.ParameterDict` for parameters)."
    requires = ("self.",)
    why = (
        "`nn.Module.__setattr__` registers a value only when it is itself a `Module` or a `Parameter`; a list "
        "of them is an ordinary attribute. The layers in it are missing from `model.parameters()`, so the "
        "optimizer never updates them (they stay at their random initialisation, or the optimizer raises "
        "\"optimizer got an empty parameter list\"); `state_dict()` never saves them; `model.eval()` never "
        "reaches their dropout and batch norm; `model.to(device)` leaves them on the CPU. The `nn.ModuleList` "
        "docs: \"modules it contains are properly registered, and will be visible by all Module methods\" "
        "(https://docs.pytorch.org/docs/stable/generated/torch.nn.ModuleList.html). pytorch/pytorch#666 and "
        "#715 (\"parameters are not included if the module is initialized in a list\")."
    )
    story = (
        "ikostrikov/pytorch-meta-optimizer#11: the meta-optimizer's LSTM cells, appended to `self.lstms = []`, "
        "were never trained (\"the current version will not train the LSTM weights at all\"). Over the 41 public "
        "training projects of the real-code set it finds nothing (none keeps layers in a plain container), so it "
        "stays in preview until it has 10 reviewed findings."
    )
    example = """\
import torch.nn as nn

class MLP(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = [nn.Linear(width, width) for _ in range(depth)]

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).relu()
        return x
"""
    fixed_example = """\
import torch.nn as nn

class MLP(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).relu()
        return x
"""
    not_flagged = (
        "Containers whose elements are not built there as layers or parameters (a list of numbers, strings, "
        "tensors, existing attributes `[self.a, self.b]` or objects of unknown class); one-element literals "
        "(`self.teacher = [teacher]`, the idiom that keeps a frozen teacher or EMA copy out of the module tree); "
        "lists of only stateless layers (activations, pooling, padding, `Identity`, `Flatten`, losses), or of "
        "this module's own `nn.Module` classes that hold only such layers, literals and arguments read as plain "
        "values (a moving-average block around an `AvgPool1d`); "
        "attributes bound again to anything else in the class (`self.blocks = nn.ModuleList(self.blocks)`), "
        "passed to a `torch.nn` container or a module class (`nn.Sequential(*self.blocks)`), registered with "
        "`add_module`/`register_module`/`register_parameter`/`setattr`/`self.__setattr__` (or in a loop over the container, or "
        "by a method of the class that does: `self._add_to_parameters(layer.parameters(), name)`), or "
        "read by an override of `parameters`, `named_parameters`, `children`, `modules` (or their `named_` forms), `state_dict` or `load_state_dict`; values stored with "
        "`object.__setattr__`; classes that are not `nn.Module` subclasses (a Dataset, a plain object)."
    )
    verification = "`trainlint verify` builds layers in a plain list and counts the parameters `model.parameters()` reports against those built, and what trains after a step (`verify run`'s measurement)."
    valid = (
        """
import torch.nn as nn

class Net(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.blocks = [nn.Linear(8, 8) for _ in range(n)]
        self.sizes = [8, 16, 32]
        self.blocks = nn.ModuleList(self.blocks)
""",
        """
import torch.nn as nn

class Net(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.convs = [nn.Conv2d(3, 3, 3) for _ in range(n)]
        for i, conv in enumerate(self.convs):
            self.add_module(f"conv{i}", conv)
        self.heads = []
        for i in range(n):
            head = nn.Linear(8, 2)
            setattr(self, f"head{i}", head)
            self.heads.append(head)
""",
        """
import torch.nn as nn

class Student(nn.Module):
    def __init__(self, teacher):
        super().__init__()
        self.teacher = [teacher]          # kept out of parameters() and state_dict() on purpose
        object.__setattr__(self, "ema", [nn.Linear(4, 4), nn.Linear(4, 4)])
        self.acts = [nn.ReLU(), nn.GELU()]
        self.sizes = (4, 8)
""",
        """
import torch
from torch.utils.data import Dataset

class Pairs(Dataset):
    def __init__(self):
        self.encoders = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)]
""",
        """
import torch.nn as nn

class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(4, 4), nn.Linear(4, 4)]
        self.net = nn.Sequential(*self.layers)
""",
        """
import torch
import torch.nn as nn

class MovingAverage(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.kernel_size = kernel_size
        self.avg = nn.AvgPool1d(kernel_size, stride=1)

    def forward(self, x):
        pad = x[:, :1].repeat(1, (self.kernel_size - 1) // 2, 1)
        return self.avg(torch.cat([pad, x], dim=1))

class Decomposition(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.moving_avg = MovingAverage(kernel_size)

class MultiDecomposition(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.blocks = [Decomposition(k) for k in sizes]
""",
        """
import torch.nn as nn

class Highway(nn.Module):
    def __init__(self, size, n):
        super().__init__()
        self.gates = [nn.Linear(size, size) for _ in range(n)]
        for i, gate in enumerate(self.gates):
            self._add_to_parameters(gate.parameters(), f"gate{i}")

    def _add_to_parameters(self, parameters, name):
        for i, parameter in enumerate(parameters):
            self.register_parameter(f"{name}-{i}", parameter)
""",
    )
    invalid = (
        """
import torch.nn as nn

class TextCNN(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.convs = []
        for k in sizes:
            conv = nn.Conv1d(64, 32, kernel_size=k)
            self.convs.append(conv)
""",
        """
import torch.nn as nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

class Encoder(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.blocks = []
        for _ in range(n):
            self.blocks.append(Block())
""",
        """
import torch

class Mixture(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.weights = [torch.nn.Parameter(torch.randn(4)) for _ in range(k)]
        self.heads = {"cls": torch.nn.Linear(4, 2), "box": torch.nn.Linear(4, 4)}
""",
        """
import torch.nn as nn

class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.drops = (nn.Dropout(0.1), nn.Dropout(0.2))
""",
        """
import torch.nn as nn

class Pooled(nn.Module):
    def __init__(self, kernel_size, act):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size)
        self.act = act

    def forward(self, x):
        return self.act(self.pool(x))

class Dropped(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)

class Multi(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.pools = [Pooled(k, nn.PReLU()) for k in sizes]
        self.drops = [Dropped() for _ in sizes]
""",
    )

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        return "self." in source and ("[" in source or "{" in source or "(" in source)

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        prefix = torch_nn_prefix(model)
        for info in model.classes:
            if not is_module_class(model, info):
                continue
            methods = [fn for fn in model.functions if fn.class_name == info.name and fn.parent is None and fn.params]
            holders = _holders(model, methods)
            for attribute, holder in sorted(holders.items(), key=lambda item: item[1].assign.site.order):
                if _registered_elsewhere(model, info, methods, attribute, holder):
                    continue
                yield _finding(model, attribute, holder, prefix)


def _holders(model: TrainingModel, methods: list[Function]) -> dict[str, Holder]:
    """Attributes bound to a plain container of layers or parameters built for it, by attribute text."""
    owned = set(methods)
    out: dict[str, Holder] = {}
    seeds: dict[str, Assign] = {}
    for assign in model.assigns:
        fn = assign.site.function
        if fn not in owned or len(assign.targets) != 1 or assign.unpacked:
            continue
        target = assign.targets[0]
        this = fn.params[0]
        if target.startswith(f"{this}.") and target.endswith("[]") and target.count(".") == 1:
            # `self.heads[name] = nn.Linear(...)` into a dict seeded empty
            built = built_by(model, assign.value)
            seed = seeds.get(target[:-2])
            if built is not None and seed is not None and isinstance(seed.value, cst.Dict):
                _add(out, target[:-2], seed, {built}, "dict", True)
            continue
        if not target.startswith(f"{this}.") or target.count(".") != 1:
            continue
        value = assign.value
        if assign.op is None and isinstance(value, (cst.List, cst.Dict)) and not _elements(value):
            seeds[target] = assign
            continue
        found = _contents(model, value, single=assign.op is not None)
        if found is not None:
            seed = seeds.get(target) if assign.op is not None else None
            _add(out, target, seed or assign, found[0], found[1], found[2])
    for fn in methods:
        for call in fn.calls:
            if call.method in FILLING_METHODS and call.receiver_text in seeds and call.site.function is fn:
                built = _filled_with(model, call)
                seed = seeds[call.receiver_text]
                if built and isinstance(seed.value, cst.List):
                    _add(out, call.receiver_text, seed, built, "list", True)
    return out


def _add(out: dict[str, Holder], attribute: str, assign: Assign, built: set[Built], kind: str, fixable: bool) -> None:
    holder = out.get(attribute)
    if holder is None:
        out[attribute] = Holder(assign, set(built), kind, fixable)
    else:
        holder.built |= built


def _elements(value: cst.List | cst.Tuple | cst.Dict) -> list[cst.BaseExpression]:
    return [e.value for e in value.elements]


def _contents(model: TrainingModel, value: cst.BaseExpression, single: bool = False) -> tuple[set[Built], str, bool] | None:
    """What a container expression holds, when it builds layers or parameters: (built, kind, fixable).
    `single`: a one-element list counts (`self.blocks += [Block()]` adds to a container)."""
    if isinstance(value, (cst.List, cst.Tuple)):
        if len(value.elements) < (1 if single else 2) or any(isinstance(e, cst.StarredElement) for e in value.elements):
            return None  # one element: the idiom that hides a teacher or EMA copy
        built = {b for e in value.elements if (b := built_by(model, e.value)) is not None}
        return (built, "list", True) if built else None
    if isinstance(value, cst.ListComp) or (
        isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in ("list", "tuple")
        and len(value.args) == 1 and isinstance(value.args[0].value, (cst.GeneratorExp, cst.ListComp))
    ):
        comp = value if isinstance(value, cst.ListComp) else value.args[0].value
        built = built_by(model, comp.elt)  # type: ignore[union-attr]
        return ({built}, "list", True) if built is not None else None
    if isinstance(value, cst.Dict):
        if len(value.elements) < 2 or any(isinstance(e, cst.StarredDictElement) for e in value.elements):
            return None
        built = {b for e in value.elements if (b := built_by(model, e.value)) is not None}
        keys = all(isinstance(e, cst.DictElement) and isinstance(e.key, (cst.SimpleString, cst.FormattedString)) for e in value.elements)
        return (built, "dict", keys) if built else None
    if isinstance(value, cst.DictComp):
        built = built_by(model, value.value)
        keys = isinstance(value.key, (cst.SimpleString, cst.FormattedString))
        return ({built}, "dict", keys) if built is not None else None
    return None


def _filled_with(model: TrainingModel, call: Call) -> set[Built]:
    """What `self.x.append(Layer())`, `.insert(i, Layer())` or `.extend([...])` puts in the list."""
    if call.method == "extend":
        arg = call.positional(0)
        found = _contents(model, arg, single=True) if arg is not None else None
        return found[0] if found else set()
    arg = call.positional(1 if call.method == "insert" else 0)
    if isinstance(arg, cst.Name):  # `conv = nn.Conv1d(...)`, then `self.convs.append(conv)`
        reaching = model.reaching(call.site.function, arg.value, call.site)
        built_each = {built_by(model, a.value) for a in reaching if not a.unpacked and a.op is None}
        return built_each if reaching and None not in built_each else set()
    built = built_by(model, arg) if arg is not None else None
    return {built} if built is not None else set()


def _registered_elsewhere(model: TrainingModel, info: ClassInfo, methods: list[Function], attribute: str, holder: Holder) -> bool:
    """The container's elements reach the module tree another way, or the class manages them by hand."""
    if holder.built <= {"stateless"}:
        return True  # activations, pooling, losses: nothing to train, save, move or switch
    for assign in model.assigns:
        fn = assign.site.function
        if fn not in methods or assign is holder.assign or attribute not in assign.targets:
            continue
        if assign.op is not None or isinstance(assign.value, PLAIN_CONTAINERS):
            continue
        return True  # bound again: `self.blocks = nn.ModuleList(self.blocks)`, `= None`, ...
    # methods of the class that register what they are given (`self._add_to_parameters(m.parameters(), name)`)
    registering = {fn.name for fn in methods if any(c.method in REGISTERING_METHODS or _sets_attribute(c) for c in fn.calls)}
    for fn in methods:
        if fn.name in HAND_MANAGED and mentions(fn.node, attribute):
            return True
        for call in fn.calls:
            registers = call.method in REGISTERING_METHODS or _sets_attribute(call) or (call.receiver_text == fn.params[0] and call.method in registering)
            if registers and (
                any(mentions(a.value, attribute) for a in call.node.args)
                or any(isinstance(loop.node, cst.For) and mentions(loop.node.iter, attribute) for loop in call.site.loops)
                or _registered_then_stored(model, call, attribute)
            ):
                return True
            if built_by(model, call.node) is not None and any(mentions(a.value, attribute) for a in call.node.args):
                return True  # `nn.Sequential(*self.layers)`: the wrapper registers the elements
    return False


def _sets_attribute(call: Call) -> bool:
    """`setattr(self, name, layer)`, or `self.__setattr__(name, layer)` (rlkit's `Mlp`): the module's own
    `__setattr__` registers a layer (not `object.__setattr__`, which bypasses it)."""
    return call.name == "setattr" or (call.method == "__setattr__" and call.receiver_text == "self")


def _registered_then_stored(model: TrainingModel, call: Call, attribute: str) -> bool:
    """`setattr(self, name, layer)` or `self.add_module(name, layer)` in the loop that appends `layer`."""
    loop = call.site.innermost_loop
    if loop is None:
        return False
    return any(
        c.method in FILLING_METHODS and c.receiver_text == attribute and loop in c.site.loops
        for c in (call.site.function.calls if call.site.function else ())
    )


def _finding(model: TrainingModel, attribute: str, holder: Holder, prefix: str | None) -> Finding:
    what = "parameters" if holder.built == {"parameter"} else "layers"
    container = "dict" if holder.kind == "dict" else "list"
    if holder.built == {"parameter"}:
        wrapper = "ParameterDict" if holder.kind == "dict" else "ParameterList"
    elif "parameter" in holder.built:
        wrapper = None  # layers and parameters mixed: no single container takes both
    else:
        wrapper = "ModuleDict" if holder.kind == "dict" else "ModuleList"
    message = (
        f"`{attribute}` keeps {what} in a plain {container}: `model.parameters()` does not list them (the optimizer "
        f"never updates them), `state_dict()` does not save them, and `.eval()` and `.to(device)` do not reach them"
    )
    fix = None
    if wrapper is not None and prefix is not None and holder.fixable:
        value = holder.assign.value
        if isinstance(value, (cst.List, cst.Dict)) and not _elements(value):
            content = f"{prefix}.{wrapper}()"
        else:
            text = model.module.code_for_node(value).strip()
            if isinstance(value, cst.Tuple) and not value.lpar:
                text = f"({text})"  # `self.blocks = a, b`: one tuple argument, not two
            content = f"{prefix}.{wrapper}({text})"
        fix = NodeFix(f"wrap in `{prefix}.{wrapper}`", (NodeEdit(value, content),), Applicability.UNSAFE)
    return Finding(holder.assign.value, message, fix=fix)
