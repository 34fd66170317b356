"""What an instance of a class holds without the class saying so: the Parameters a `torch.nn` layer it
derives from creates (`self.weight` in a subclass of `nn.Linear`), the buffers its methods register
(`self.register_buffer("steps", torch.tensor(0))`), and whether the class gives a
gradient-flag name an attribute of its own (for other modules' classes, their summary's `lacks` says)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import libcst as cst

    from trainlint.model.facts import ClassInfo
    from trainlint.model.training import TrainingModel

# the names a freeze is written with: PyTorch's flag and method, and the misspellings of the flag
FLAG_ATTRIBUTES = ("requires_grad", "requires_grad_", "require_grad", "requires_grads", "require_grads")

# `torch.nn` layers and the Parameters their constructors register (affine norms: when affine, the
# default; otherwise `weight` is None and setting an attribute on it raises, which is no silent no-op)
_WEIGHT_BIAS = ("weight", "bias")
LAYER_PARAMETERS: dict[str, tuple[str, ...]] = {
    **{name: _WEIGHT_BIAS for name in (
        "Linear", "LazyLinear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
        "ConvTranspose3d", "LazyConv1d", "LazyConv2d", "LazyConv3d", "LayerNorm", "GroupNorm", "BatchNorm1d",
        "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
    )},
    "Embedding": ("weight",), "EmbeddingBag": ("weight",), "PReLU": ("weight",), "RMSNorm": ("weight",),
}


def torch_layer_parameter(model: "TrainingModel", class_name: str, attr: str, _seen: frozenset[str] = frozenset()) -> bool:
    """Whether `self.<attr>` in this module's class `class_name` is a Parameter that a `torch.nn` base
    layer creates (`self.weight` in `class LoRALinear(nn.Linear)`): no method of the class, nor of a
    base of this module between it and the layer, assigns the attribute."""
    info = model.local_class(class_name)
    if info is None or class_name in _seen or model.attribute_assigns(class_name, f"self.{attr}"):
        return False
    for base in info.bases:
        namespace, _, last = base.rpartition(".")
        if namespace.startswith("torch.nn") and attr in LAYER_PARAMETERS.get(last, ()):
            return True
        if "." not in base and torch_layer_parameter(model, base, attr, _seen | {class_name}):
            return True
    return False


def registered_buffers(model: "TrainingModel", class_name: str | None, attr: str) -> "list[tuple[cst.BaseExpression, object]]":
    """The tensors the methods of class `class_name` register as buffer `attr`
    (`self.register_buffer("update_count", torch.tensor([0]))`), each with the call's site."""
    out = []
    for call in model.calls_by_method.get("register_buffer", ()):
        fn = call.site.function
        if call.receiver_text != "self" or fn is None or fn.class_name != class_name:
            continue
        name, tensor = call.positional(0), call.positional(1) or call.kwarg("tensor")
        if tensor is not None and name is not None and getattr(name, "evaluated_value", None) == attr:
            out.append((tensor, call.site))
    return out


def class_mentions(model: "TrainingModel", info: "ClassInfo", attr: str, seen: set[str]) -> bool:
    """The class or one of its bases defines or assigns `attr`, or a base is one the analysis cannot see."""
    seen.add(info.name)
    # (`self.requires_grad_(False)` calls torch's method: not an attribute of the class's own)
    own = rf"\bself\.{re.escape(attr)}\b(?!\s*\()|\bdef\s+{re.escape(attr)}\b|^\s*{re.escape(attr)}\s*[:=]"
    if attr in info.methods or re.search(own, model.module.code_for_node(info.node), re.MULTILINE):
        return True
    for base in info.bases:
        local = model.local_class(base)
        if local is not None:
            if local.name not in seen and class_mentions(model, local, attr, seen):
                return True
        elif not base.startswith("torch.nn."):
            return True  # a base from elsewhere may define it
    return False
