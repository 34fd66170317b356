"""Which classes are `torch.nn.Module`s, and what a constructor call builds: a layer with state, a
stateless layer, or an `nn.Parameter`. Read from class bases resolved through the imports, this
module's own classes (through their bases, transitively) and the project's class summaries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import libcst as cst

from trainlint.model.facts import ClassInfo, Function
from trainlint.model.gates import child_nodes
from trainlint.model.lattice import Kind
from trainlint.model.names import dotted

if TYPE_CHECKING:
    from trainlint.model.training import TrainingModel

PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
# library bases that are `nn.Module` subclasses outside `torch.nn`
LIBRARY_MODULE_BASES = (
    "pytorch_lightning.LightningModule", "pytorch_lightning.core.LightningModule", "lightning.LightningModule",
    "lightning.pytorch.LightningModule", "lightning.pytorch.core.LightningModule", "transformers.PreTrainedModel",
    "transformers.modeling_utils.PreTrainedModel",
)
# `torch.nn` layers without parameters or buffers whose output does not depend on train/eval mode:
# leaving one out of the module tree loses nothing (dropout and batch norm are not among them)
STATELESS_LAYERS = frozenset({
    "ReLU", "ReLU6", "LeakyReLU", "RReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Sigmoid", "Tanh", "Softplus",
    "Softsign", "Softmax", "Softmax2d", "LogSoftmax", "Softmin", "Hardtanh", "Hardswish", "Hardsigmoid", "Tanhshrink",
    "Softshrink", "Hardshrink", "LogSigmoid", "Threshold", "GLU", "Identity", "Flatten", "Unflatten", "Upsample",
    "UpsamplingNearest2d", "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle", "ChannelShuffle", "Fold", "Unfold",
    "CosineSimilarity", "PairwiseDistance", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d", "LPPool1d", "LPPool2d", "LPPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
    "ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ReflectionPad1d",
    "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d",
    "CircularPad1d", "CircularPad2d", "CircularPad3d",
})

Built = Literal["layer", "stateless", "parameter"]


def is_torch_module_base(qualname: str) -> bool:
    """`torch.nn.Module`, `torch.nn.Sequential`, a Lightning or HF model base: an `nn.Module` class."""
    namespace, _, last = qualname.rpartition(".")
    if namespace.startswith("torch.nn") and not namespace.startswith(("torch.nn.utils", "torch.nn.functional")):
        return last[:1].isupper() and qualname not in PARAMETER_CLASSES
    return qualname in LIBRARY_MODULE_BASES


def is_module_class(model: TrainingModel, info: ClassInfo, _seen: frozenset[str] = frozenset()) -> bool:
    """Whether instances of a class of this module are `nn.Module`s, through its bases."""
    if info.name in _seen:
        return False
    seen = _seen | {info.name}
    for base in info.bases:
        if is_torch_module_base(base):
            return True
        head, _, rest = base.partition(".")
        local = model.local_class(rest if head in model.imports.own_module else base)  # (`d2l.Encoder`, d2l this module)
        if local is not None and is_module_class(model, local, seen):
            return True
        if "." in base and _project_module_class(model, base):
            return True
    return False


def _project_module_class(model: TrainingModel, qualname: str) -> bool:
    from trainlint.model.summary import ClassSummary

    symbol = model.project_symbol(qualname)
    return isinstance(symbol, ClassSummary) and symbol.kind is Kind.MODULE


def method_class(model: TrainingModel, fn: Function | None) -> tuple[ClassInfo, Function] | None:
    """The `nn.Module` class whose method (or a function nested in one) `fn` is, with that method;
    None for plain functions, static and class methods."""
    while fn is not None and fn.class_name is None:
        fn = fn.parent
    if fn is None or not fn.params or any(d.rsplit(".", 1)[-1] in ("staticmethod", "classmethod") for d in fn.decorators):
        return None
    info = model.local_class(fn.class_name or "")
    if info is None or not is_module_class(model, info):
        return None
    return info, fn


def built_by(model: TrainingModel, expr: cst.BaseExpression) -> Built | None:
    """What the call `expr` constructs: a layer with state ("layer"), one without ("stateless"), an
    `nn.Parameter`; None for anything else (a factory function, a copy, a value of unknown class)."""
    if not isinstance(expr, cst.Call):
        return None
    qual = model.imports.resolve(expr.func)
    if qual in PARAMETER_CLASSES:
        return "parameter"
    if qual is not None and is_torch_module_base(qual):
        return "stateless" if qual.rpartition(".")[2] in STATELESS_LAYERS or qual.endswith("Loss") else "layer"
    if isinstance(expr.func, cst.Name):
        local = model.local_class(expr.func.value)
        if local is not None and is_module_class(model, local):
            return "stateless" if _stateless_class(model, local) else "layer"
        if local is not None:
            return None
    if qual is not None and _project_module_class(model, qual):
        return "layer"
    return None


# `nn.Module` methods that put a layer or parameter into the module tree (beside `setattr(self, ...)`)
REGISTERING_METHODS = frozenset({"add_module", "register_module", "register_parameter", "register_buffer"})


def _stateless_class(model: TrainingModel, info: ClassInfo) -> bool:
    """A module class of this module that holds nothing a module tree would carry: derived from
    `nn.Module` itself, building only stateless layers (or such classes of this module), registering
    nothing, and binding on `self` only those layers, literals, or arguments that it uses as plain
    values (never called, handed on or asked for a method: `self.kernel_size = kernel_size` read in
    arithmetic). Leaving one out of the module tree loses no parameter, buffer or train/eval switch."""
    known: dict[str, bool] = model.__dict__.setdefault("_stateless_classes", {})
    if info.name not in known:
        known[info.name] = False  # (classes building each other: not known stateless)
        known[info.name] = _holds_nothing(model, info)
    return known[info.name]


def _holds_nothing(model: TrainingModel, info: ClassInfo) -> bool:
    if not info.bases or any(base not in ("torch.nn.Module", "torch.nn.modules.module.Module") for base in info.bases):
        return False
    methods = [fn for fn in model.functions if fn.class_name == info.name and fn.parent is None]
    own = {id(fn) for fn in methods}
    arguments: set[str] = set()
    for assign in model.assigns:
        fn = assign.site.function
        if fn is None or id(fn) not in own:
            continue
        for target in assign.targets:
            if not target.startswith("self."):
                continue
            value = assign.value
            if isinstance(value, cst.Name) and value.value in fn.params:
                arguments.add(target)
            elif not isinstance(value, (cst.Integer, cst.Float, cst.SimpleString)) and not (
                isinstance(value, cst.Name) and value.value in ("None", "True", "False")
            ) and built_by(model, value) != "stateless":
                return False
    for fn in methods:
        for call in fn.calls:
            if call.method in REGISTERING_METHODS or call.name == "setattr" or built_by(model, call.node) in ("layer", "parameter"):
                return False
            used = [call.node.func, *(a.value for a in call.node.args)]
            if isinstance(call.node.func, cst.Attribute):
                used.append(call.node.func.value)
            if any(dotted(e) in arguments for e in used):
                return False  # an argument called, handed on or asked for a method: it may be a module
    return True


def mentions(node: cst.CSTNode, text: str) -> bool:
    """Whether the dotted name `text` (`self.blocks`) appears anywhere inside `node`."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, (cst.Name, cst.Attribute)) and dotted(current) == text:
            return True
        stack.extend(child_nodes(current))
    return False


def torch_nn_prefix(model: TrainingModel) -> str | None:
    """How this module spells `torch.nn`: `nn`, `torch.nn`, `T.nn`; None when it imports neither at
    its top level (a name a function imports for itself is not bound where a fix writes it)."""
    top = _top_level_imported(model.module)
    names = {local: target for local, target in model.imports.names.items() if local in top}
    for local, target in names.items():
        if target == "torch.nn":
            return local
    for local, target in names.items():
        if target == "torch":
            return f"{local}.nn"
    return None


def _top_level_imported(module: cst.Module) -> set[str]:
    """The names the module's own top-level import statements bind."""
    bound: set[str] = set()
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
                for alias in small.names:
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        bound.add(alias.asname.name.value)
                    else:
                        bound.add(dotted(alias.name).split(".")[0])
    return bound

