"""TL507 layer-replaced-after-optimizer."""

from __future__ import annotations

from typing import Callable, Iterator, NamedTuple

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import Assign, Call, Function, Site, TrainingModel
from trainlint.model.layer_swaps import builds_parameters, is_optimizer_construction, parameter_sources, replacement_target
from trainlint.model.module_classes import mentions
from trainlint.model.lattice import Kind
from trainlint.rules.rule import Finding, Rule


class Replacement(NamedTuple):
    """A layer replaced: by an assignment here, or by a call whose summary says it replaces one."""

    node: cst.CSTNode
    target: str  # the layer, as dotted text: "model.fc", "model.classifier" (for `model.classifier[6]`)
    site: Site
    shown: str  # for the message: "`model.fc`", "`model.head` (by `Net.reset_classifier` in models.py)"

def _covers(source: str, target: str) -> bool:
    """Whether the parameters of `source` include those of the layer at `target` (before replacement)."""
    return target == source or target.startswith(source + ".") or target.startswith(source + "[")


class LayerReplacedAfterOptimizer(Rule):
    code = "TL507"
    name = "layer-replaced-after-optimizer"
    severity = Severity.ERROR
    preview = True
    summary = "A layer of the model is replaced after the optimizer was built from the model's parameters."
    hint = "Replace the layer before building the optimizer (or rebuild it, or `optimizer.add_param_group({'params': new_layer.parameters()})`)."
    requires = ()

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        # the optimizer built here from the parameters, or by a function of a project module
        return "parameters(" in source or imports_project()

    why = (
        "An optimizer keeps references to the parameter tensors it was given when it was built. "
        "`model.fc = nn.Linear(...)` afterwards puts new tensors into the model that the optimizer has never "
        "seen: the new layer computes gradients but `optimizer.step()` never updates it, so it stays at its "
        "random initialisation for the whole run (a transfer-learning head that never learns), while the old "
        "layer's orphaned weights are still updated with no gradient. PyTorch does not warn "
        "(pytorch/pytorch#14467 asks for it); as ezyang answered in pytorch/pytorch#54765, \"You need to "
        "reinitialize the optimizer; otherwise it doesn't know anything about the new nets parameters.\" "
        "The two halves are often in different functions or modules: the optimizer comes from a factory "
        "(`optimizer = build_optimizer(model)`, whose every `return` gives a `torch.optim` optimizer built from "
        "its parameter's parameters), and the layer is swapped by a method of the model's class "
        "(`model.reset_classifier(10)` assigning `self.head = nn.Linear(...)`) or a helper "
        "(`setup_head(model)` assigning `model.fc = nn.Linear(...)`). Each function's summary says which "
        "layers of its receiver or parameters it replaces on every call, and which of their parameters the "
        "optimizer it returns holds; the call site puts its own arguments in their place."
    )
    story = (
        "microsoft/nni#4521: after pruning replaced the model's layers, \"the parameters registered in the "
        "optimizer are outdated\" and fine-tuning updated nothing, until the optimizer was rebuilt."
    )
    example = """\
import torch
from torch import nn
import torchvision

model = torchvision.models.resnet18(weights="DEFAULT")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
model.fc = nn.Linear(model.fc.in_features, 10)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
"""
    fixed_example = """\
import torch
from torch import nn
import torchvision

model = torchvision.models.resnet18(weights="DEFAULT")
model.fc = nn.Linear(model.fc.in_features, 10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
"""
    not_flagged = (
        "A layer replaced before the optimizer is built; an optimizer built again (or its name bound again) "
        "after the replacement in the same function, or in a loop that encloses the replacement; any "
        "`add_param_group` call in the module; a replacement by a module without parameters (`nn.Identity`, "
        "activations, dropout, pooling, `Flatten`, `Upsample`, `PixelShuffle`); a layer outside the modules "
        "whose parameters the optimizer received (`SGD(model.backbone.parameters())` then `model.fc = ...`); "
        "a value whose class the analysis does not know to be a module; an optimizer never used after the "
        "replacement; replacements in another function than the optimizer's that no call after it makes "
        "(`__init__` building the layers, a later method of a trainer). A method or helper replaces a layer only "
        "where it does so on every call, with a module of known class that has parameters: not under an `if` "
        "(`if num_classes > 0: self.head = ...`, timm's `reset_classifier` choosing `nn.Identity`), nor by an "
        "activation (`model.act = nn.ReLU()` changes no parameter, so the optimizer misses nothing), nor on a "
        "parameter the function binds again; a helper called on another model than the optimizer's "
        "(`setup_head(teacher)`); an optimizer from a factory whose `return`s are not all optimizers of "
        "`torch.optim` built from its parameters (a library's factory, a tuple `model, optimizer`)."
    )
    verification = "`trainlint verify` replaces a head after building the optimizer and steps 3 times: the new head is in no optimizer and its weights do not move (`verify run` reports such parameters on the user's run)."
    valid = (
        # a helper swaps an activation (no parameters) and a method swaps the head before the optimizer
        """
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()
        self.head = nn.Linear(512, 1000)
    def reset_classifier(self, num_classes):
        self.head = nn.Linear(512, num_classes)
def use_gelu(model):
    model.act = nn.GELU()
def build_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3)
model = Net()
model.reset_classifier(10)
optimizer = build_optimizer(model)
use_gelu(model)
train(model, optimizer)
""",
        # the head replaced before the optimizer is built
        """
import torch
from torch import nn
model = Net()
model.fc = nn.Linear(512, 10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    optimizer.step()
""",
        # the optimizer rebuilt after the replacement
        """
import torch
from torch import nn
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
pretrain(model, optimizer)
model.fc = nn.Linear(512, 10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
finetune(model, optimizer)
""",
        # the new layer added to the optimizer
        """
import torch
from torch import nn
model = Net()
optimizer = torch.optim.Adam(model.parameters())
model.fc = nn.Linear(512, 10)
optimizer.add_param_group({"params": model.fc.parameters()})
finetune(model, optimizer)
""",
        # a stage loop that builds its optimizer at the top of each stage
        """
import torch
from torch import nn
model = Net()
for classes in (10, 100):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, optimizer)
    model.fc = nn.Linear(512, classes)
""",
        # the optimizer trains only the backbone; the head is not its business
        """
import torch
from torch import nn
model = Net()
optimizer = torch.optim.SGD(model.backbone.parameters(), lr=0.1)
model.fc = nn.Linear(512, 10)
train(model, optimizer)
""",
        # a parameterless module in place of the head
        """
import torch
from torch import nn
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model.fc = nn.Identity()
train(model, optimizer)
""",
    )
    invalid = (
        # the head swapped by a method, after a factory built the optimizer from every parameter
        """
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(32, 512)
        self.head = nn.Linear(512, 1000)
    def reset_classifier(self, num_classes):
        self.head = nn.Linear(512, num_classes)
def build_optimizer(model, lr):
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
model = Net()
optimizer = build_optimizer(model, 0.01)
model.reset_classifier(10)
train(model, optimizer)
""",
        """
import torch
from torch import nn
def build(num_classes):
    model = torchvision.models.vgg16(weights="DEFAULT")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=0.001, momentum=0.9)
    model.classifier[6] = nn.Linear(4096, num_classes)
    return model, optimizer
""",
        """
import torch
import torch.nn as nn
class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(768, 2)
model = load_backbone()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
model.head = Head()
for batch in loader:
    optimizer.zero_grad()
    model(batch).loss.backward()
    optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        if any(c.method == "add_param_group" for c in model.calls):
            return
        for call in model.calls:
            built = self._optimizer_assignment(model, call)
            if built is None:
                continue
            assign, sources = built
            for replaced in self._replacements(model, call.site.function, call.site.order):
                if not any(_covers(s, replaced.target) for s in sources):
                    continue
                if self._rebuilt(model, replaced, assign) or not self._used_after(model, replaced, assign.targets[0]):
                    continue
                yield Finding(
                    replaced.node,
                    f"{replaced.shown} is replaced after `{assign.targets[0]}` was built "
                    "from the model's parameters: the optimizer still holds the old layer's tensors, so the new "
                    "layer is never updated",
                )

    @staticmethod
    def _optimizer_assignment(model: TrainingModel, call: Call) -> tuple[Assign, set[str]] | None:
        """`opt = torch.optim.SGD(model.parameters())`, or `opt = build_optimizer(model)` with a project
        function whose summary says the optimizer it returns holds its parameter's parameters: the plain
        assignment that binds it, and the modules whose parameters it holds (dotted texts)."""
        if call.site.statement is None:
            return None
        bound = [a for a in model.assigns_in(call.site.statement) if a.value is call.node and len(a.targets) == 1 and a.op is None and not a.unpacked]
        if not bound:
            return None
        if is_optimizer_construction(model, call):
            sources = parameter_sources(model, call)
        elif call.qualname is None or not call.qualname.startswith("torch."):
            summary = model.call_summary(call)
            sources = {t for entry in summary.optimizes if (t := replacement_target(call, entry))} if summary is not None else set()
        else:
            return None
        return (bound[0], sources) if sources else None

    @staticmethod
    def _replacements(model: TrainingModel, fn: Function | None, after: int) -> Iterator[Replacement]:
        """Assignments of a new module with parameters to an attribute or item after `after`, and calls
        of functions and methods that replace a layer of what they are given (their summaries say so)."""
        for a in model.assigns:
            if a.site.function is not fn or a.site.order <= after or a.op is not None or len(a.targets) != 1:
                continue
            target = a.targets[0]
            if "." not in target and not target.endswith("[]"):
                continue  # a plain name bound again is a new model, not a replaced layer
            if builds_parameters(model, a.value, a.site):  # only classes the analysis knows: never a guess from a name
                yield Replacement(a.node, target.removesuffix("[]"), a.site, f"`{shorten_target(model, a)}`")
        for call in model.calls:
            if call.site.function is not fn or call.site.order <= after:
                continue
            summary = model.call_summary(call)
            for entry in summary.replaces_layers if summary is not None else ():
                target = replacement_target(call, entry)
                if target is not None:
                    yield Replacement(call.node, target, call.site, f"`{target}` (by {summary.where})")  # type: ignore[union-attr]

    @staticmethod
    def _rebuilt(model: TrainingModel, replaced: Replacement, optimizer: Assign) -> bool:
        """An optimizer built (or the name bound) after the replacement, or at the top of a loop around it."""
        fn = replaced.site.function
        name = optimizer.targets[0]
        for a in model.assigns:
            if a.site.function is not fn or a is optimizer and not a.site.loops:
                continue
            builds = name in a.targets or model.value(a.value, a.site).kind is Kind.OPTIMIZER
            if not builds:
                continue
            if a.site.order > replaced.site.order or any(loop in a.site.loops for loop in replaced.site.loops):
                return True
        return False

    @staticmethod
    def _used_after(model: TrainingModel, replaced: Replacement, name: str) -> bool:
        """Whether the optimizer is used after the replacement: stepped, passed on, returned or kept."""
        if "." in name:
            return True  # an attribute outlives the function
        fn = replaced.site.function
        for call in model.calls:
            if call.site.function is fn and call.site.order > replaced.site.order and (
                call.receiver_text == name or any(mentions(a.value, name) for a in call.node.args)
            ):
                return True
        if fn is not None:
            return any(mentions(r.value, name) for r in fn.return_facts if r.site.order > replaced.site.order)
        return False


def shorten_target(model: TrainingModel, replaced: Assign) -> str:
    """The replaced layer as written: `model.fc`, `model.classifier[6]`."""
    node = replaced.node
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        return model.module.code_for_node(node.targets[0].target)
    return replaced.targets[0]

