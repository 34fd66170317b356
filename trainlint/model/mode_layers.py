"""Which modules hold layers that behave differently in training and evaluation mode: dropout with a
non-zero probability, batch norm that tracks running statistics.

Known from the code that builds the module: a class of this module whose methods (or the helpers
and classes they call) construct `nn.Dropout`/`nn.BatchNorm*` or call `F.dropout(..., training=
self.training)`; a `torch.nn` container built from such layers; a torchvision classification or
segmentation model, all of which have batch norm or dropout by default. A class of another project
module, a timm or `from_pretrained` model, a dropout probability that is not a literal (nor a
parameter's literal default) prove nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.facts import Call, ClassInfo, Function
from trainlint.model.modes import PASS_THROUGH, SAME_MODULE_METHODS
from trainlint.model.names import dotted

if TYPE_CHECKING:
    from trainlint.model.facts import Site
    from trainlint.model.training import TrainingModel

DROPOUT = frozenset({"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"})
BATCH_NORM = frozenset({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d"})
# `torch.nn` layers with dropout on by default (0.1)
DROPOUT_BY_DEFAULT = frozenset({"Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer"})
CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})
# torchvision constructors whose models have batch norm or dropout (p > 0) by default
TORCHVISION_PREFIXES = (
    "resnet", "resnext", "wide_resnet", "vgg", "alexnet", "densenet", "mobilenet_v2", "mobilenet_v3", "efficientnet",
    "inception_v3", "googlenet", "squeezenet", "shufflenet", "mnasnet", "regnet", "fcn_", "deeplabv3", "lraspp",
)
FUNCTIONAL_DROPOUT = frozenset({"torch.nn.functional.dropout", "torch.nn.functional.dropout1d", "torch.nn.functional.dropout2d", "torch.nn.functional.dropout3d", "torch.nn.functional.alpha_dropout"})
_MAX_DEPTH = 10  # (a model built, converted to SyncBatchNorm, wrapped in DDP, then passed on: ~8 steps)


class ModeLayers:
    """Finds the mode-dependent layers of the modules of one module's code."""

    def __init__(self, model: "TrainingModel") -> None:
        self.model = model
        self._classes: dict[int, str | None] = {}
        self._functions: dict[int, str | None] = {}

    def of_module(self, expr: cst.BaseExpression, fn: Function | None, site: "Site | None", depth: int = 0) -> str | None:
        """The mode-dependent layer (as code: "`nn.Dropout(0.5)` in `Net`") of the module `expr` holds
        at `site`, or None when none is known."""
        if depth > _MAX_DEPTH:
            return None
        m = self.model
        text = dotted(expr)
        if text is None:
            return self.of_construction(expr, fn, site, depth + 1) if isinstance(expr, cst.Call) else None
        parts = text.split(".")
        if parts[0] == "self" and len(parts) > 1:
            cls = fn.class_name if fn is not None else None
            target = ".".join(parts[:2])
            for a in m.attribute_assigns(cls, target):
                if not a.unpacked:
                    found = self.of_construction(a.value, a.site.function, a.site, depth + 1)
                    if found:
                        return found
            return None
        root = parts[0]
        assigns = m.reaching(fn, root, site)
        if not assigns and fn is not None and root in fn.params:
            return self._from_callers(fn, root, depth + 1)
        if not assigns and fn is not None:
            assigns = m.reaching(None, root, None)  # a global
        for a in assigns:
            if not a.unpacked and a.op is None:
                found = self.of_construction(a.value, a.site.function, a.site, depth + 1)
                if found:
                    return found
        return None

    def _from_callers(self, fn: Function, param: str, depth: int) -> str | None:
        m = self.model
        params = fn.explicit_params
        for call in m.calls:
            if fn not in m.callees(call):
                continue
            arg = call.kwarg(param)
            if arg is None and param in params:
                arg = call.positional(params.index(param))
            if arg is not None:
                found = self.of_module(arg, call.site.function, call.site, depth)
                if found:
                    return found
        return None

    def of_construction(self, expr: cst.BaseExpression, fn: Function | None, site: "Site | None", depth: int) -> str | None:
        """The mode-dependent layer of the module an expression builds (through `.to()`, wrappers)."""
        m = self.model
        if not isinstance(expr, cst.Call):
            return self.of_module(expr, fn, site, depth + 1) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        func = expr.func
        qual = m.imports.resolve(func) or ""
        if not qual and isinstance(func, cst.Attribute) and func.attr.value in SAME_MODULE_METHODS | {"train"}:
            return self.of_construction(func.value, fn, site, depth + 1)
        if qual in PASS_THROUGH or (not qual and isinstance(func, cst.Attribute) and func.attr.value == "prepare"):
            args = [a.value for a in expr.args if a.keyword is None]
            return self.of_construction(args[0], fn, site, depth + 1) if args else None
        if isinstance(func, cst.Name) and not qual:
            info = self._class_at(func.value, site)
            if info is not None:
                return self.of_class(info)
            local = m.local_function(func.value)
            if local is not None:
                return self.of_function(local)
        call = m.call_at(expr)
        return self.of_layer_call(call, fn) if call is not None else None

    def _class_at(self, name: str, site: "Site | None") -> ClassInfo | None:
        """The class `name` is where it is built: of a name a notebook or script defines twice, the
        last definition before `site` (`Classifier` of cell 4, not the one cell 19 redefines)."""
        m = self.model
        found = m.local_class(name)
        defined = [c for c in m.classes if c.name == name]
        if site is None or len(defined) < 2:
            return found
        before = [c for c in defined if (first := self._first_order(c)) is not None and first < site.order]
        return before[-1] if before else found

    def _first_order(self, info: ClassInfo) -> int | None:
        """Where a class stands among the module's facts: the first fact inside its methods."""
        methods = {id(statement) for statement in info.node.body.body if isinstance(statement, cst.FunctionDef)}
        orders = [c.site.order for c in self.model.calls if c.site.function is not None and id(c.site.function.node) in methods]
        orders += [a.site.order for a in self.model.assigns if a.site.function is not None and id(a.site.function.node) in methods]
        return min(orders) if orders else None

    def of_layer_call(self, call: Call, fn: Function | None) -> str | None:
        """A call that is itself a mode-dependent layer, or a container or torchvision model holding one."""
        m = self.model
        qual = call.qualname or ""
        last = qual.rsplit(".", 1)[-1]
        code = m.module.code_for_node(call.node)
        short = code if len(code) <= 60 else code[:57] + "..."
        if qual.startswith("torch.nn.") and not qual.startswith("torch.nn.functional"):
            if last in DROPOUT and _nonzero_probability(call, fn, ("p", 0)):
                return f"`{short}`"
            if last in BATCH_NORM and not _false(call.kwarg("track_running_stats")):
                return f"`{short}`"
            if last in DROPOUT_BY_DEFAULT and _nonzero_probability(call, fn, ("dropout", -1), default=0.1):
                return f"`{short}`"
            if last in CONTAINERS:
                for arg in call.node.args:
                    inner = self.of_construction(arg.value, fn, call.site, 1) if isinstance(arg.value, cst.Call) else None
                    if inner:
                        return inner
            return None
        if qual in FUNCTIONAL_DROPOUT:
            training = call.arg(2, "training")
            if training is not None and dotted(training) == "self.training" and _nonzero_probability(call, fn, ("p", 1)):
                return f"`{short}`"
            return None
        if qual.startswith("torchvision.models.") and last.startswith(TORCHVISION_PREFIXES):
            return f"`{short}` (torchvision; batch norm or dropout)"
        return None

    def of_class(self, info: ClassInfo, depth: int = 0) -> str | None:
        """A mode-dependent layer a class of this module builds (its methods, local bases, and the
        local classes and functions they call)."""
        key = id(info)
        if key in self._classes:
            return self._classes[key]
        self._classes[key] = None
        found: str | None = None
        for method in info.methods.values():
            found = self.of_function(method, depth + 1)
            if found:
                break
        if not found and depth < _MAX_DEPTH:
            for base in info.bases:
                parent = self.model.local_class(base.rsplit(".", 1)[-1])
                if parent is not None and parent is not info:
                    found = self.of_class(parent, depth + 1)
                    if found:
                        break
        if found and f"in `{info.name}`" not in found and " in `" not in found:
            found = f"{found} in `{info.name}`"
        self._classes[key] = found
        return found

    def of_function(self, fn: Function, depth: int = 0) -> str | None:
        """A mode-dependent layer a function of this module constructs or calls for."""
        key = id(fn)
        if key in self._functions:
            return self._functions[key]
        self._functions[key] = None
        m = self.model
        found: str | None = None
        for call in fn.calls:
            found = self.of_layer_call(call, fn)
            if not found and depth < _MAX_DEPTH and call.name is not None and call.qualname is None:
                info = m.local_class(call.name)
                local = m.local_function(call.name) if info is None else None
                if info is not None:
                    found = self.of_class(info, depth + 1)
                elif local is not None and local is not fn:
                    found = self.of_function(local, depth + 1)
            if found:
                break
        self._functions[key] = found
        return found


def _false(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"


def _nonzero_probability(call: Call, fn: Function | None, where: tuple[str, int], default: float = 0.5) -> bool:
    """Whether a dropout probability is known to be above zero: a literal, the layer's default, or a
    parameter of the enclosing function whose default is such a literal."""
    name, index = where
    value = call.kwarg(name) if index < 0 else call.arg(index, name)
    if value is None:
        return default > 0
    if isinstance(value, (cst.Float, cst.Integer)):
        return float(value.value) > 0
    if isinstance(value, cst.Name) and fn is not None and value.value in fn.defaults:
        literal = fn.defaults[value.value]
        return isinstance(literal, (cst.Float, cst.Integer)) and float(literal.value) > 0
    return False
