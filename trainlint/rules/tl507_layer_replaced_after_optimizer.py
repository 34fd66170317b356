"""TL507 layer-replaced-after-optimizer."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import Assign, Call, Function, TrainingModel
from trainlint.model.gates import child_nodes
from trainlint.model.module_classes import mentions
from trainlint.model.lattice import Kind
from trainlint.model.names import dotted
from trainlint.rules.rule import Finding, Rule

# torch.nn modules without parameters: replacing a layer by one of them leaves nothing untrained
PARAMETERLESS_MODULES = frozenset(
    """Identity Dropout Dropout1d Dropout2d Dropout3d AlphaDropout ReLU ReLU6 LeakyReLU GELU SiLU Mish
    Sigmoid Tanh Softmax LogSoftmax Softplus ELU SELU CELU Hardswish Hardsigmoid Hardtanh Flatten Unflatten
    MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool1d AdaptiveAvgPool2d
    AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d Upsample PixelShuffle""".split()
)
PARAMETER_METHODS = ("parameters", "named_parameters")


def parameter_sources(model: TrainingModel, call: Call, depth: int = 0) -> set[str]:
    """The modules whose parameters an optimizer receives, as dotted texts: `SGD(model.parameters())`,
    `Adam([{"params": model.fc.parameters()}])`, `params = [p for p in model.parameters()]; SGD(params)`."""
    params = call.arg(0, "params")
    return _sources(model, params, call, depth) if params is not None else set()


def _sources(model: TrainingModel, expr: cst.BaseExpression, call: Call, depth: int) -> set[str]:
    out: set[str] = set()
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in PARAMETER_METHODS:
            owner = dotted(node.func.value)
            if owner:
                out.add(owner)
        elif isinstance(node, cst.Name) and depth < 3:
            # a list of parameters built beforehand, or filled by appends
            for bound in model.reaching(call.site.function, node.value, call.site):
                out |= _sources(model, bound.value, call, depth + 1)
            for filler in model.calls:
                if filler.receiver_text == node.value and filler.method in ("append", "extend") and filler.site.function is call.site.function:
                    out |= {s for a in filler.node.args for s in _sources(model, a.value, call, depth + 1)}
                    out |= _loop_sources(model, filler, depth)
        stack.extend(child_nodes(node))
    return out


def _loop_sources(model: TrainingModel, filler: Call, depth: int) -> set[str]:
    """`for name, p in model.named_parameters(): params.append(p)`: the loops an append sits in."""
    out: set[str] = set()
    for loop in filler.site.loops:
        if isinstance(loop.node, cst.For):
            out |= _sources(model, loop.node.iter, filler, depth + 1)
    return out


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
    requires = ("parameters(",)
    why = (
        "An optimizer keeps references to the parameter tensors it was given when it was built. "
        "`model.fc = nn.Linear(...)` afterwards puts new tensors into the model that the optimizer has never "
        "seen: the new layer computes gradients but `optimizer.step()` never updates it, so it stays at its "
        "random initialisation for the whole run (a transfer-learning head that never learns), while the old "
        "layer's orphaned weights are still updated with no gradient. PyTorch does not warn "
        "(pytorch/pytorch#14467 asks for it); as ezyang answered in pytorch/pytorch#54765, \"You need to "
        "reinitialize the optimizer; otherwise it doesn't know anything about the new nets parameters.\""
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
        "replacement; replacements in another function than the optimizer's (`__init__` and a later method), "
        "and layers swapped by a method call (`model.reset_classifier(10)`)."
    )
    verification = "`trainlint verify` replaces a head after building the optimizer and steps 3 times: the new head is in no optimizer and its weights do not move (`verify run` reports such parameters on the user's run)."
    valid = (
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
            assign = self._optimizer_assignment(model, call)
            if assign is None:
                continue
            sources = parameter_sources(model, call)
            if not sources:
                continue
            for replaced in self._replacements(model, call.site.function, call.site.order):
                target = replaced.targets[0].removesuffix("[]")
                if not any(_covers(s, target) for s in sources):
                    continue
                if self._rebuilt(model, replaced, assign) or not self._used_after(model, replaced, assign.targets[0]):
                    continue
                layer = shorten_target(model, replaced)
                yield Finding(
                    replaced.node,
                    f"`{layer}` is replaced after `{assign.targets[0]}` was built "
                    "from the model's parameters: the optimizer still holds the old layer's tensors, so the new "
                    "layer is never updated",
                )

    @staticmethod
    def _optimizer_assignment(model: TrainingModel, call: Call) -> Assign | None:
        """`opt = torch.optim.SGD(...)`: the plain assignment that binds an optimizer built by `call`."""
        if call.qualname is None or not call.qualname.startswith("torch.optim."):
            return None
        if model.value(call.node, call.site).kind is not Kind.OPTIMIZER:
            return None
        for a in model.assigns_in(call.site.statement):
            if a.value is call.node and len(a.targets) == 1 and a.op is None and not a.unpacked:
                return a
        return None

    @staticmethod
    def _replacements(model: TrainingModel, fn: Function | None, after: int) -> Iterator[Assign]:
        """Assignments of a new module with parameters to an attribute or item, after `after`."""
        for a in model.assigns:
            if a.site.function is not fn or a.site.order <= after or a.op is not None or len(a.targets) != 1:
                continue
            target = a.targets[0]
            if "." not in target and not target.endswith("[]"):
                continue  # a plain name bound again is a new model, not a replaced layer
            value = model.value(a.value, a.site)
            if value.kind is not Kind.MODULE or not value.origin:
                continue  # only classes the analysis knows: never a guess from a name
            if value.origin.rsplit(".", 1)[-1] in PARAMETERLESS_MODULES and value.origin.startswith("torch.nn."):
                continue
            yield a

    @staticmethod
    def _rebuilt(model: TrainingModel, replaced: Assign, optimizer: Assign) -> bool:
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
    def _used_after(model: TrainingModel, replaced: Assign, name: str) -> bool:
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

