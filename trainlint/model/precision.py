"""Mixed-precision facts that several rules read: where a model's parameters are cast to fp16/bf16
(and whether those parameters reach an optimizer), whether an autocast wraps training, and which
scaler scales a backward."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from trainlint.model.extract import Call, Function
from trainlint.model.lattice import Kind, Value
from trainlint.model.names import dotted
from trainlint.model.torchnames import GRAD_SCALER, dtype_name
from trainlint.model.training import TrainingModel


@dataclass(frozen=True)
class Cast:
    """A cast of a model's parameters to a low-precision dtype."""

    call: Call
    dtype: str
    targets: frozenset[str]  # names holding the cast model in `function`
    function: Function | None


def cast_dtype(model: TrainingModel, call: Call) -> str | None:
    """The low-precision dtype a call casts its receiver (or result) to, if any."""
    if call.method in ("half", "bfloat16") and not call.node.args and call.receiver is not None:
        return "float16" if call.method == "half" else "bfloat16"
    if call.method == "to" and call.receiver is not None:
        for arg in call.node.args:
            if arg.keyword is None or arg.keyword.value == "dtype":
                name = dtype_name(arg.value, model.imports)
                if name in ("float16", "bfloat16") and not isinstance(arg.value, cst.SimpleString):
                    return name
        return None
    if call.method == "from_pretrained" or (call.qualname or "").endswith(".from_pretrained"):
        for key in ("torch_dtype", "dtype"):
            name = dtype_name(call.kwarg(key), model.imports)
            if name in ("float16", "bfloat16"):
                return name
    return None


def assigned_targets(model: TrainingModel, call: Call) -> set[str]:
    """Names that receive the value of the statement containing `call` (`model = Net().to(...)`)."""
    stmt = call.site.statement
    out: set[str] = set()
    if stmt is None:
        return out
    for a in model.assigns_in(stmt):
        if a.site.function is call.site.function and _contains(a.value, call.node):
            out.update(a.targets)
    return out


def _contains(expr: cst.CSTNode, target: cst.CSTNode) -> bool:
    if expr is target:
        return True
    if isinstance(expr, cst.Call):
        return _contains(expr.func, target)
    if isinstance(expr, cst.Attribute):
        return _contains(expr.value, target)
    return False


def dotted_root(expr: cst.BaseExpression) -> str | None:
    """The first name of a dotted expression: `model.encoder` -> "model"."""
    text = dotted(expr)
    return text.split(".")[0] if text else None


def reaches(cast: Cast, opt: Call, roots: set[str]) -> bool:
    """Whether the names `roots` that an optimizer call optimizes hold the cast model."""
    if not roots & cast.targets:
        return False
    if opt.site.function is cast.function:
        return True
    # `self.model` across methods, or a module-level model used inside a function
    if cast.function is None:
        return True
    return any(t.startswith("self.") for t in roots & cast.targets) and (
        opt.site.function is not None and opt.site.function.class_name == cast.function.class_name
    )


def parameter_casts(model: TrainingModel) -> list[Cast]:
    """Every cast of a model's parameters to fp16/bf16: `.half()`, `.to(dtype)`, `from_pretrained(torch_dtype=)`,
    `torch.set_default_dtype`, and models returned cast by a function of this module or the project."""
    casts: list[Cast] = []
    returning: dict[str, str] = {}  # function name -> dtype of the cast model it returns
    for call in model.calls:
        fn = call.site.function
        if call.qualname == "torch.set_default_dtype":
            dtype = dtype_name(call.arg(0, "d"), model.imports)
            if dtype in ("float16", "bfloat16"):
                casts.append(Cast(call, dtype, frozenset(), None))
            continue
        dtype = cast_dtype(model, call)
        if dtype is None:
            continue
        targets = assigned_targets(model, call)
        if call.method != "from_pretrained" and call.receiver is not None and call.site.statement is not None:
            receiver = dotted(call.receiver)
            if receiver and not targets:
                targets.add(receiver)  # in-place module cast: `model.bfloat16()`
        if not targets:
            continue
        casts.append(Cast(call, dtype, frozenset(targets), fn))
        if fn is not None and any(model.roots_of(r, fn) & targets for r in fn.returns):
            returning[fn.name] = dtype
    # `model = build_model(cfg)` where a function of another module of the project returns a cast model
    for a in model.assigns:
        if type(a.value) is not cst.Call or len(a.targets) != 1 or a.op is not None:
            continue
        call = model.call_at(a.value)
        if call is None or call.qualname is None or model.project_symbol(call.qualname) is None:
            continue
        value = model.value(a.value, a.site)
        if value.kind is Kind.MODULE and value.dtype in ("float16", "bfloat16"):
            casts.append(Cast(call, value.dtype, frozenset(a.targets), a.site.function))
    casts.extend(_layer_casts(model, casts))
    # `model = build(cfg)` where build returns a cast model
    by_returning = {c.function.name: c for c in casts if c.function is not None and c.function.name in returning}
    for call in model.calls:
        if call.name in by_returning and model.callee(call) is not None:
            targets = assigned_targets(model, call)
            if targets:
                origin = by_returning[call.name]
                casts.append(Cast(origin.call, origin.dtype, frozenset(targets), call.site.function))
    return casts


def _layer_casts(model: TrainingModel, casts: list[Cast]) -> list[Cast]:
    """A layer a class of this module builds cast (`self.embed = nn.Embedding(v, d).bfloat16()` in
    `__init__`), as the names holding an instance see it: `model.embed` (an optimizer group of its
    parameters) and `model.parameters` (all of them), for each `model = GPT(...)` of the module. Only
    torch layers built in place (not buffers or tensors), and never a layer the module sets back to
    fp32 or freezes."""
    layers: dict[str, list[tuple[str, Cast]]] = {}  # class -> (attribute, its cast)
    for cast in casts:
        fn = cast.function
        if fn is None or fn.class_name is None or not isinstance(cast.call.receiver, cst.Call):
            continue
        built = model.call_at(cast.call.receiver)
        if built is None or not (built.qualname or "").startswith("torch.nn.") or not (built.qualname or "").rsplit(".", 1)[-1][:1].isupper():
            continue
        for target in cast.targets:
            if target.startswith("self.") and target.count(".") == 1:
                layers.setdefault(fn.class_name, []).append((target[5:], cast))
    out: list[Cast] = []
    if not layers:
        return out
    for call in model.calls:
        if call.name not in layers or call.receiver is not None:
            continue
        for instance in assigned_targets(model, call):
            for attribute, cast in layers[call.name]:
                held = f"{instance}.{attribute}"
                if not _restored(model, (instance, held, f"self.{attribute}")):
                    out.append(Cast(cast.call, cast.dtype, frozenset({held, f"{instance}.parameters"}), call.site.function))
    return out


def _restored(model: TrainingModel, names: tuple[str, ...]) -> bool:
    """Whether the module sets one of `names` back to fp32 (`.float()`, `.to(torch.float32)`) or
    freezes it (`.requires_grad_(False)`)."""
    for call in model.calls:
        if call.receiver is None or dotted(call.receiver) not in names:
            continue
        if call.method == "float" or call.method == "requires_grad_":
            return True
        if call.method == "to" and any(dtype_name(a.value, model.imports) == "float32" for a in call.node.args):
            return True
    return False


def on_training_path(model: TrainingModel, call: Call) -> bool:
    """An autocast that wraps training, not an evaluation or an inference pipeline."""
    if model.under(call.site, "no_grad"):
        return False
    fn = call.site.function
    if fn is None or model.in_step(call.site):
        return True
    summary = model.summarizer.function(fn)
    return summary.backprops or summary.steps or summary.trains


def scaled_backward_scaler(call: Call) -> str | None:
    """`scaler.scale(loss).backward()` -> "scaler"."""
    if call.method != "backward" or not isinstance(call.receiver, cst.Call):
        return None
    inner = call.receiver.func
    if isinstance(inner, cst.Attribute) and inner.attr.value == "scale":
        return dotted(inner.value)
    return None


def factory_scaler(model: TrainingModel, call: Call) -> Value | None:
    """The torch GradScaler a call of a function of another project module gives back, alone or in the tuple it returns
    (`model, optimizer, scaler = init_opt(cfg)`, the scaler built in another module), or None. A
    scaler the factory may return as None (`GradScaler() if use_amp else None`) has `enabled` None:
    whether it scales depends on what the caller asked for. A call handed a scaler (one that gives
    back what it is given) makes none."""
    # `init_opt(...)` or `setup.init_opt(...)` of another module (a scaler built in this module is
    # found where it is built)
    if call.qualname is None or call.qualname in GRAD_SCALER or not model.is_project_function(call.qualname):
        return None
    value = model.value(call.node, call.site)
    found = [v for v in (value, *(value.items or ())) if v.kind is Kind.SCALER and (v.origin or "") in GRAD_SCALER]
    if not found or any(model.value(a.value, call.site).kind is Kind.SCALER for a in call.node.args):
        return None
    return found[0]


# wrappers that keep fp32 master copies of the low-precision parameters of the optimizer they wrap,
# and the optimizer's state in fp32 (apex's legacy mixed-precision API)
MASTER_WEIGHT_WRAPPERS = frozenset({
    "apex.fp16_utils.FP16_Optimizer", "apex.fp16_utils.fp16_optimizer.FP16_Optimizer", "apex.optimizers.FP16_Optimizer",
    "apex.contrib.optimizers.FP16_Optimizer",
})


def master_weights_kept(model: TrainingModel, opt: Call) -> bool:
    """Whether the optimizer `opt` builds is handed to a wrapper that keeps fp32 master weights
    (`optimizer = FP16_Optimizer(optimizer, ...)`): the name it is bound to reaches the wrapper's call."""
    for call in model.calls:
        if call.qualname not in MASTER_WEIGHT_WRAPPERS or not call.node.args or not isinstance(call.node.args[0].value, cst.Name):
            continue
        name = call.node.args[0].value.value
        reaching = model.reaching(call.site.function, name, call.site) or model.reaching(None, name, None)
        if any(a.value is opt.node for a in reaching):
            return True
    return False
