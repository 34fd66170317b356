"""TL504 freeze-flag-misspelled."""

from __future__ import annotations

import re
from typing import Callable, Iterator

import libcst as cst

from trainlint.diagnostics import Applicability, Severity
from trainlint.model import Assign, Site, TrainingModel
from trainlint.model.class_attributes import class_mentions
from trainlint.model.summary import ClassSummary
from trainlint.model.lattice import UNKNOWN_DEVICE, Kind, Value
from trainlint.model.names import dotted
from trainlint.model.value_calls import CONFIG_NAMES
from trainlint.rules.rule import Finding, NodeEdit, NodeFix, Rule, shorten

# attribute names a freeze is misspelled as: PyTorch reads none of them
MISSPELLED = frozenset({"require_grad", "requires_grads", "require_grads"})
# `requires_grad_` is a method: assigning to it replaces the method and freezes nothing
FREEZE_NAMES = MISSPELLED | {"requires_grad", "requires_grad_"}
PARAMETER_ITERATORS = frozenset({"parameters", "named_parameters"})
MODULE_ITERATORS = frozenset({"modules", "children", "named_modules", "named_children"})
# capitalised names under `torch.nn` that build tensors, not modules
NOT_MODULES = frozenset({"Parameter", "UninitializedParameter", "Buffer", "UninitializedBuffer"})
TEXT = re.compile(r"\.\s*(?:requires?_grads?_?)\s*=[^=]")


class FreezeFlagMisspelled(Rule):
    code = "TL504"
    name = "freeze-flag-misspelled"
    severity = Severity.ERROR
    preview = True
    summary = "A freeze PyTorch never reads: `p.require_grad = False`, `p.requires_grads = False`, `module.requires_grad = False` on an `nn.Module`, or `x.requires_grad_ = False` (the method rebound, not called)."
    hint = "Write `p.requires_grad = False` on tensors and parameters, and `module.requires_grad_(False)` on modules."
    requires = ("_grad",)

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        return TEXT.search(source) is not None

    why = (
        "A tensor and a module accept any attribute, so the assignment runs without an error and freezes "
        "nothing: autograd reads only `Tensor.requires_grad`, and an `nn.Module` has no such flag at all "
        "(only `module.requires_grad_(False)` or its parameters' flags freeze it). The layer the author meant "
        "to freeze keeps receiving gradients and the optimizer keeps updating it. pytorch/benchmark#1771 "
        "(\"the code doesn't cause any errors but doesn't do what it's supposed to do\") fixed `require_grad` "
        "typos found by TorchFix, whose TOR002 flags the misspelling; the PyTorch forum thread "
        "https://discuss.pytorch.org/t/requires-grad-doesnt-propagate-to-the-parameters-of-the-module/9979 "
        "explains why `module.requires_grad = False` leaves the parameters trainable. `layer.requires_grad_ = False` "
        "replaces the in-place method with `False` on that one object: nothing is frozen, and a later "
        "`layer.requires_grad_(False)` raises. The receiver is known by its value, across functions and "
        "modules: `self.model.outc` is the `outc` a project class (of any module, by its summary) assigns in its "
        "constructor, an `nn.Conv2d` or a project module; `self.weight` in a subclass of `nn.Linear` (or another "
        "`torch.nn` layer) is the Parameter the layer creates."
    )
    story = "pytorch/benchmark#1771: `pe.require_grad = False` in a BERT positional embedding, fixed to `requires_grad`."
    example = """\
import torch

model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
for name, p in model[0].named_parameters():
    p.require_grad = False
"""
    fixed_example = """\
import torch

model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
for name, p in model[0].named_parameters():
    p.requires_grad = False
"""
    not_flagged = (
        "`requires_grad` set on tensors and parameters (correct); a misspelled `= False` on a tensor with no autograd "
        "history that was not made with `requires_grad=True` (`pe = torch.zeros(...)`, a batch): it needs no gradient, "
        "so the typo changes nothing (a misspelled `= True` on one is flagged: the gradient it asks for never comes); `require_grad`/`requires_grads` on receivers the "
        "analysis cannot tell are tensors, parameters or modules; `module.requires_grad = ...` on a module whose "
        "class is not known (a name like `model` alone is not enough), on a project class (of this module or "
        "another) that assigns, reads or defines that attribute itself or has a base outside its module and "
        "`torch.nn` that might; modules whose code reads the misspelled attribute somewhere (a flag of its own). "
        "`x.requires_grad_ = ...` on a receiver of unknown class is flagged (the method of every tensor and "
        "module), except on a value known to be neither (a number, a list, an instance of a class that is no "
        "module), on a setting (`args`, `cfg`, `config`, `opt`, `opts`, `hparams`, `hp`, `flags`, `conf` "
        "anywhere in the receiver: these names silence), and in a module that defines or reads "
        "`requires_grad_` as an attribute (`self.requires_grad_ = True` in a class, `if obj.requires_grad_:`)."
    )
    verification = "`trainlint verify` sets the misspelled flag on a backbone's parameters and steps once: the backbone still trains (the same measurement of what trains as `verify run`'s)."
    valid = (
        # a positional table made by a factory: it never requires grad, the typo is a no-op
        """
import torch
class PositionalEmbedding(torch.nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        pe = torch.zeros(max_len, d_model).float()
        pe.require_grad = False
        self.register_buffer("pe", pe)
""",
        """
import torch
model = torch.nn.Linear(4, 2)
for p in model.parameters():
    p.requires_grad = False
""",
        """
import torch
model = torch.nn.Linear(4, 2)
model.requires_grad_(False)
""",
        # a class with a flag of its own called `requires_grad`
        """
import torch
class Embedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.requires_grad = True
    def forward(self, x):
        return x if self.requires_grad else x.detach()

emb = Embedding()
emb.requires_grad = False
""",
        # unknown receiver: not flagged by its name
        """
model = build_model()
model.requires_grad = False
""",
        # a subclass that sets `self.weight` itself: its own object, not the Linear's Parameter
        """
import torch.nn as nn
class Scaled(nn.Linear):
    def __init__(self, n, m):
        super().__init__(n, m)
        self.weight = WeightNorm(n, m)
    def freeze(self):
        self.weight.require_grad = False
""",
        # a setting rebound, not a tensor's method
        """
def configure(args):
    args.requires_grad_ = False
""",
        # a custom flag read elsewhere in the module
        """
class Config:
    require_grad = True
cfg = Config()
cfg.require_grad = False
if cfg.require_grad:
    pass
""",
    )
    invalid = (
        """
import torch
w = torch.zeros(3, requires_grad=True)
w.require_grad = False
""",
        """
import torch
model = torch.nn.Linear(4, 2)
for p in model.parameters():
    p.requires_grads = False
""",
        """
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)
        self.backbone.requires_grad = False
""",
        """
from transformers import AutoModel
encoder = AutoModel.from_pretrained("bert-base-uncased")
encoder.requires_grad = False
""",
        """
import torch
model = torch.nn.Sequential(torch.nn.Linear(4, 4))
for m in model.modules():
    m.requires_grad = False
""",
        """
import torch
model = torch.nn.Linear(4, 2)
model.requires_grad_ = False
""",
        # the method rebound on a layer of unknown class
        """
def freeze(layer):
    layer.requires_grad_ = False
""",
        # the Parameter a torch.nn base layer creates
        """
import torch.nn as nn
class FrozenLinear(nn.Linear):
    def freeze(self):
        self.weight.require_grad = False
""",
        # a submodule reached through attributes of a project class
        """
import torch.nn as nn
class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inc = nn.Conv2d(3, 64, 3)
        self.outc = nn.Conv2d(64, 2, 1)
class Trainer:
    def __init__(self):
        self.model = UNet()
    def freeze_head(self):
        self.model.outc.requires_grad = False
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for assign in model.assigns:
            node = assign.node
            if assign.op is not None or not isinstance(node, cst.Assign) or len(node.targets) != 1:
                continue
            target = node.targets[0].target
            if not isinstance(target, cst.Attribute) or target.attr.value not in FREEZE_NAMES:
                continue
            attr = target.attr.value
            what = _receiver_kind(model, target.value, assign.site)
            if what is None and attr == "requires_grad_" and _rebinds_the_method(model, target.value, assign.site):
                what = "tensor or module"
            # a parameter holds no attribute of the project's; anything else may be a flag of its own
            if what == "untracked tensor":  # needs no gradient: only a misspelled request for one matters
                what = "tensor" if isinstance(assign.value, cst.Name) and assign.value.value == "True" else None
            if what is None or (what != "parameter" and attr in MISSPELLED and _read_elsewhere(model, attr)):
                continue
            if what == "module":
                if not _flag_unread_by_class(model, target.value, assign.site, attr):
                    continue
            elif what in ("tensor", "parameter") and attr == "requires_grad":
                continue  # the real flag
            yield self._finding(model, assign, target, what)

    @staticmethod
    def _finding(model: TrainingModel, assign: Assign, target: cst.Attribute, what: str) -> Finding:
        attr = target.attr.value
        receiver = shorten(model.module.code_for_node(target.value), 60)
        value = model.module.code_for_node(assign.value)
        if what == "module":
            message = f"`{receiver}` is a module: `.{attr} = ...` sets an attribute nothing reads and its parameters keep training; call `{receiver}.requires_grad_({shorten(value, 30)})`"
        elif attr == "requires_grad_":
            message = f"`{receiver}.requires_grad_ = ...` replaces the method instead of calling it: the {what} keeps its gradient flag"
        else:
            message = f"`{receiver}.{attr}` is not a PyTorch attribute (the flag is `requires_grad`): the {what} keeps receiving gradients"
        if what == "module" or attr == "requires_grad_":
            call = f"{model.module.code_for_node(target.value)}.requires_grad_({value})"
            fix = NodeFix(f"call `{shorten(call, 60)}`", (NodeEdit(assign.node, call),), Applicability.UNSAFE)
        else:
            fix = NodeFix("spell the flag `requires_grad`", (NodeEdit(target.attr, "requires_grad"),), Applicability.UNSAFE)
        return Finding(target, message, fix=fix)


def _rebinds_the_method(model: TrainingModel, receiver: cst.BaseExpression, site: Site) -> bool:
    """`layer.requires_grad_ = False` on a receiver of unknown class: `requires_grad_` is the in-place
    method of every tensor and module, so rebinding it is a bug on either, unless the receiver is
    known to be something else (a number, a collection, an instance of a class that is no module), is
    a setting (`args.requires_grad_`), or this module defines or reads `requires_grad_` as an attribute
    of its own (`self.requires_grad_ = True` in a class, `if obj.requires_grad_:`, `def requires_grad_`,
    `getattr(x, "requires_grad_")`)."""
    value = model.value(receiver, site)
    if value.kind not in (Kind.UNKNOWN, Kind.TENSOR, Kind.MODULE):
        return False
    if value.origin:
        return False  # an instance of a class `_receiver_kind` could not judge (one of several, say)
    if set((dotted(receiver) or "").split(".")) & CONFIG_NAMES:
        return False
    code = model.module.code
    read = re.search(r"\.\s*requires_grad_\b(?!\s*(?:=[^=]|\())", code)
    defined = re.search(r"\bdef\s+requires_grad_\b|^\s*requires_grad_\s*[:=]|\bself\.requires_grad_\s*=|[\"']requires_grad_[\"']", code, re.MULTILINE)
    return read is None and defined is None


def _read_elsewhere(model: TrainingModel, attr: str) -> bool:
    """The module reads the attribute somewhere (`if cfg.require_grad:`): a flag of its own, not a typo."""
    code = model.module.code
    reads = len(re.findall(rf"\.\s*{attr}\b(?!\s*=[^=])", code))
    defined = re.search(rf"\bdef\s+{attr}\b|^\s*{attr}\s*[:=]", code, re.MULTILINE)
    return reads > 0 or defined is not None


def _receiver_kind(model: TrainingModel, receiver: cst.BaseExpression, site: Site) -> str | None:
    """"parameter", "tensor" or "module" when the analysis knows what the receiver is; None otherwise."""
    iterated = _loop_element(model, receiver, site)
    if iterated is not None:
        return iterated
    value = model.value(receiver, site)
    # a tensor the analysis traced (made by torch, or carrying a graph), not one guessed from a name like `loss`
    if value.kind is Kind.TENSOR and (value.origin or value.graph is not None or value.device != UNKNOWN_DEVICE):
        # a tensor with no autograd history (made by a factory, data) needs no gradient: a misspelled
        # freeze of it is a harmless no-op, not a layer that keeps training
        return "untracked tensor" if value.graph is False and not _made_requiring_grad(model, receiver, site) else "tensor"
    if value.kind is Kind.MODULE and (value.origin or "").rsplit(".", 1)[-1] in NOT_MODULES:
        return "parameter"
    if isinstance(receiver, cst.Attribute) and receiver.attr.value in ("weight", "bias"):
        if _known_module(model, receiver.value, site) is not None:
            return "parameter"
    if _known_module(model, receiver, site) is not None:
        return "module"
    return None


def _made_requiring_grad(model: TrainingModel, receiver: cst.BaseExpression, site: Site) -> bool:
    """A name bound to a call that asks for gradients (`torch.zeros(3, requires_grad=True)`)."""
    if not isinstance(receiver, cst.Name):
        return False
    for binding in model.reaching(site.function, receiver.value, site):
        call = binding.value
        while isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and not any(a.keyword for a in call.args):
            call = call.func.value  # `.float()`, `.cuda()` after the factory
        if isinstance(call, cst.Call) and any(
            a.keyword is not None and a.keyword.value == "requires_grad" and not (isinstance(a.value, cst.Name) and a.value.value == "False")
            for a in call.args
        ):
            return True
    return False


def _known_module(model: TrainingModel, expr: cst.BaseExpression, site: Site) -> Value | None:
    """The value of `expr` when it is a module whose class is known (a torch.nn constructor, a
    `from_pretrained`, a class of this module), following `net.encoder` into the class's `self.encoder`."""
    value = model.value(expr, site)
    if value.kind is not Kind.MODULE and isinstance(expr, cst.Attribute):
        owner = model.value(expr.value, site)
        info = model.local_class(owner.origin) if owner.kind is Kind.MODULE and owner.origin else None
        method = next(iter(info.methods.values()), None) if info is not None else None
        if method is not None:
            value = model.values.self_attribute(method, f"self.{expr.attr.value}")
    if value.kind is not Kind.MODULE or not value.origin or "|" in value.origin or value.origin.rsplit(".", 1)[-1] in NOT_MODULES:
        return None
    return value


def _flag_unread_by_class(model: TrainingModel, receiver: cst.BaseExpression, site: Site, attr: str) -> bool:
    """Whether a module's class certainly has no attribute `attr` of its own: a torch.nn class, a
    pretrained model, a class of this module (with local or torch bases) that never mentions `self.attr`,
    or a class of another project module whose summary says the same."""
    value = _known_module(model, receiver, site)
    if value is None:  # an element of `model.modules()`: a torch submodule
        return _loop_element(model, receiver, site) == "module"
    origin = value.origin or ""
    if origin.startswith("torch.nn.") or origin.rsplit(".", 1)[-1] in ("from_pretrained", "from_config"):
        return True
    info = model.local_class(origin)
    if info is not None:
        return not class_mentions(model, info, attr, set())
    symbol = model.project_symbol(origin)
    return isinstance(symbol, ClassSummary) and attr in symbol.lacks


def _loop_element(model: TrainingModel, receiver: cst.BaseExpression, site: Site) -> str | None:
    """"parameter" for `p` in `for p in m.parameters()` / `for n, p in m.named_parameters()`, "module"
    for an element of `m.modules()` / `m.children()` (and the named variants)."""
    if not isinstance(receiver, cst.Name):
        return None
    for loop in reversed(site.loops):
        node = loop.node
        if not isinstance(node, cst.For):
            continue
        bound = _bound_element(node.target, receiver.value)
        if bound is None:
            continue
        source = _iterated_call(node.iter)
        if source is None or not isinstance(source.func, cst.Attribute):
            return None
        method = source.func.attr.value
        named = method.startswith("named_")
        if bound != (1 if named else 0):
            return None
        owner = model.value(source.func.value, site)
        if owner.kind not in (Kind.MODULE, Kind.UNKNOWN):
            return None
        if method in PARAMETER_ITERATORS:
            return "parameter"
        if method in MODULE_ITERATORS and owner.kind is Kind.MODULE and owner.origin:
            return "module"
        return None
    return None


def _bound_element(target: cst.BaseExpression, name: str) -> int | None:
    """0 when `name` is the whole loop target, 1 when it is the second of a pair `(key, name)`."""
    if isinstance(target, cst.Name):
        return 0 if target.value == name else None
    if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
        second = target.elements[1].value
        if isinstance(second, cst.Name) and second.value == name:
            return 1
    return None


def _iterated_call(expr: cst.BaseExpression) -> cst.Call | None:
    """`m.parameters()`, through `list(...)`, `tqdm(...)` and `filter(f, ...)`."""
    for _ in range(3):
        if not isinstance(expr, cst.Call):
            return None
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in PARAMETER_ITERATORS | MODULE_ITERATORS:
            return expr
        if dotted(expr.func) in ("list", "tuple", "tqdm", "filter") and expr.args:
            expr = expr.args[-1].value
            continue
        return None
    return None

