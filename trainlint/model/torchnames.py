"""Knowledge of PyTorch's API surface: which dotted names mean autocast, scalers, optimizers, dtypes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.names import ImportMap

if TYPE_CHECKING:
    from trainlint.model.facts import Call, Function, WithItem
    from trainlint.model.summary import ProjectLookup

AUTOCAST = frozenset(
    {
        "torch.autocast",
        "torch.amp.autocast",
        "torch.amp.autocast_mode.autocast",
        "torch.cuda.amp.autocast",
        "torch.cpu.amp.autocast",
    }
)
NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad"})


def decorated_no_grad(decorators: "tuple[str, ...]", turns_grad_off: "Callable[[str], bool] | None" = None) -> bool:
    """A function decorated to run without grad (`@torch.no_grad()`, `@torch.inference_mode()`, or a
    project's decorator that `turns_grad_off` says applies one of those)."""
    return any(d in NO_GRAD or (turns_grad_off is not None and turns_grad_off(d)) for d in decorators)


def grad_off_decorators(project: "ProjectLookup | None", path: str) -> "Callable[[str], bool] | None":
    """Whether a decorator a module imports from another project module (its name as the imports
    resolve it) runs what it decorates without grad, by that module's summary (`wraps_without_grad`)."""
    if project is None or not path:
        return None
    return lambda qualname: getattr(project.symbol(path, qualname), "turns_grad_off", False) is True


def wraps_without_grad(function: cst.FunctionDef, resolve: Callable[[cst.BaseExpression], str | None]) -> bool:
    """A decorator that applies `torch.no_grad()` (or `inference_mode()`) to what it is given, or a
    factory returning one it defines (`def smart_inference_mode(ok=...): def decorate(fn): return
    (torch.inference_mode if ok else torch.no_grad)()(fn); return decorate`)."""
    def wraps(f: cst.FunctionDef) -> bool:
        params = f.params.params
        returns = [s.value for s in _own_statements(f) if isinstance(s, cst.Return)]
        return len(params) == 1 and bool(returns) and all(_applies_no_grad(r, params[0].name.value, resolve) for r in returns)

    if wraps(function):
        return True
    returned = {s.value.value for s in _own_statements(function) if isinstance(s, cst.Return) and isinstance(s.value, cst.Name)}
    return any(isinstance(s, cst.FunctionDef) and s.name.value in returned and wraps(s) for s in function.body.body)


def _own_statements(function: cst.FunctionDef) -> "list[cst.BaseSmallStatement | cst.BaseCompoundStatement]":
    """The statements of a function's body, a simple line's parts in it (not nested blocks)."""
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else [function.body]
    return [part for s in body for part in (s.body if isinstance(s, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else [s])]


def _applies_no_grad(value: "cst.BaseExpression | None", param: str, resolve: Callable[[cst.BaseExpression], str | None]) -> bool:
    """`torch.no_grad()(fn)`, `(torch.inference_mode if ok else torch.no_grad)()(fn)` for parameter `fn`."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Call) and len(value.args) == 1 and not value.func.args):
        return False
    if not (isinstance(value.args[0].value, cst.Name) and value.args[0].value.value == param):
        return False
    maker = value.func.func
    return all(resolve(made) in NO_GRAD for made in ([maker.body, maker.orelse] if isinstance(maker, cst.IfExp) else [maker]))


GRAD_SCALER = frozenset(
    {
        "torch.cuda.amp.GradScaler",
        "torch.amp.GradScaler",
        "torch.GradScaler",
        "torch.cpu.amp.GradScaler",
        "torch.amp.grad_scaler.GradScaler",
    }
)
LIGHTNING_TRAINERS = frozenset({"pytorch_lightning.Trainer", "lightning.Trainer", "lightning.pytorch.Trainer"})
CLIP_FUNCTIONS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_gradients"})


def is_clip_name(name: str) -> bool:
    """Whether a function's last name component clips gradients.

    Projects wrap torch's clipping (timm's `dispatch_clip_grad`, `adaptive_clip_grad`), so any name
    containing `clip_grad` counts, besides the exact torch/Lightning names.
    """
    return name in CLIP_FUNCTIONS or "clip_grad" in name
# torch factories that build a tensor on the host unless given `device=`
DETERMINISTIC_FACTORIES = frozenset(
    {"tensor", "zeros", "ones", "full", "arange", "range", "eye", "empty", "linspace", "as_tensor", "zeros_like", "ones_like", "full_like", "empty_like"}
) | frozenset({"logspace", "tril_indices", "triu_indices"}) | frozenset(
    f"{window}_window" for window in ("hann", "hamming", "bartlett", "blackman", "kaiser")  # (signal windows: sizes only)
)
RANDOM_FACTORIES = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like"})
# the legacy typed constructors: `torch.LongTensor(n)` is a CPU tensor whatever the default type
# (`torch.cuda.LongTensor(n)` a CUDA one); they take no `device=`
LEGACY_CONSTRUCTORS = frozenset(
    f"{kind}Tensor" for kind in ("Float", "Double", "Half", "BFloat16", "Byte", "Char", "Short", "Int", "Long", "Bool")
)


def is_cuda_tensor_type(qualname: str | None) -> bool:
    """`torch.cuda.FloatTensor` and its kind, also as the imports resolve a name for it (`Tensor =
    torch.cuda.FloatTensor if cuda else torch.FloatTensor`: the type of a GPU run, where the analysis
    places a device chosen at run time); `x.type(Tensor)` copies `x` to the device."""
    return qualname is not None and qualname.startswith("torch.cuda.") and qualname[len("torch.cuda."):] in LEGACY_CONSTRUCTORS


# what returns the module it is given, moved or cast in place, and the wrappers that run its `forward`
MODULE_MOVES = frozenset({"to", "cuda", "cpu", "train", "float", "half", "bfloat16", "double"})
MODULE_WRAPPERS = frozenset({
    "torch.nn.parallel.DistributedDataParallel", "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel", "torch.compile",
    "torch.distributed.fsdp.FullyShardedDataParallel",
})
FP16 = frozenset({"torch.float16", "torch.half"})
BF16 = frozenset({"torch.bfloat16"})
LOW_PRECISION = FP16 | BF16
LOW_PRECISION_STRINGS = {"float16": "float16", "fp16": "float16", "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}


# torch's dtypes as `dtype_name` names them (`.to(x)` with one of these converts, never moves)
TORCH_DTYPES = frozenset(
    """float16 bfloat16 float32 float64 int8 int16 int32 int64 uint8 bool long int short complex64 complex128
    cfloat cdouble float8_e4m3fn float8_e5m2""".split()
)


def dtype_name(expr: cst.BaseExpression | None, imports: ImportMap) -> str | None:
    """"float16"/"bfloat16"/"float32"... for `torch.bfloat16`, an alias of it, or a dtype string."""
    if expr is None:
        return None
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        if isinstance(value, str):
            return LOW_PRECISION_STRINGS.get(value.replace("torch.", ""), value)
        return None
    qual = imports.resolve(expr)
    if qual is None or not qual.startswith("torch."):
        return None
    name = qual.removeprefix("torch.")
    return {"half": "float16", "float": "float32", "double": "float64"}.get(name, name)


def is_low_precision_dtype(expr: cst.BaseExpression | None, imports: ImportMap) -> bool:
    return dtype_name(expr, imports) in ("float16", "bfloat16")


def literal_string(expr: cst.BaseExpression | None) -> str | None:
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def is_false(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"


def is_true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def autocast_dtype(call: cst.Call, qual: str | None, imports: ImportMap) -> str | None:
    """The dtype an autocast call computes in: explicit, or the device's default; None if unknown."""
    kwargs = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    positional = [a.value for a in call.args if a.keyword is None]
    if is_false(kwargs.get("enabled")):
        return None
    dtype_expr = kwargs.get("dtype")
    if dtype_expr is None and qual in ("torch.autocast", "torch.amp.autocast") and len(positional) > 1:
        dtype_expr = positional[1]
    if dtype_expr is not None:
        return dtype_name(dtype_expr, imports)
    if qual == "torch.cuda.amp.autocast":
        return "float16"
    if qual == "torch.cpu.amp.autocast":
        return "bfloat16"
    device = kwargs.get("device_type") or (positional[0] if positional else None)
    device_text = literal_string(device)
    if device_text == "cuda":
        return "float16"
    if device_text == "cpu":
        return "bfloat16"
    return None


def runs_without_grad(origin: str | None) -> bool:
    """An object a library calls under `torch.no_grad()`: diffusers' pipelines decorate `__call__` with
    it (`StableDiffusionPipeline.from_pretrained(...)(prompt)` records no graph)."""
    parts = (origin or "").split(".")
    return parts[0] == "diffusers" and any(p.endswith("Pipeline") for p in parts[1:])


# CUDA streams and events: their `synchronize()` waits for the device, as `torch.cuda.synchronize()` does
CUDA_SYNC_OBJECTS = frozenset(
    {"torch.cuda.Stream", "torch.cuda.Event", "torch.cuda.current_stream", "torch.cuda.default_stream",
     "torch.cuda.streams.Stream", "torch.cuda.streams.Event", "torch.Stream", "torch.Event",
     "torch.accelerator.current_stream"}
)


def is_scheduler_factory(qual: str) -> bool:
    """A library call that builds a learning-rate scheduler: `torch.optim.lr_scheduler.*`, the
    schedule builders of transformers and diffusers (`get_linear_schedule_with_warmup`, `get_scheduler`),
    and a library class named as torch names its schedulers (`NoamLR`, `CosineLRScheduler`)."""
    last = qual.rpartition(".")[2]
    if "lr_scheduler" in qual or (qual.startswith(("transformers.", "diffusers.")) and last.startswith("get_") and "schedule" in last):
        return True
    # a library's scheduler class, named as torch names its own (`StepLR`, coqui trainer's `NoamLR`)
    return last[:1].isupper() and last.endswith(("LR", "LRScheduler"))


# timm's loss scalers: `loss_scaler(loss, optimizer, clip_grad=...)` scales and backpropagates the loss,
# clips when given `clip_grad`, steps the optimizer and updates the scale (timm/utils/cuda.py)
LIBRARY_LOSS_SCALERS = frozenset(
    {"timm.utils.NativeScaler", "timm.utils.cuda.NativeScaler", "timm.utils.ApexScaler", "timm.utils.cuda.ApexScaler"}
)
# torch's losses that apply an activation themselves (TL509): an instance handed to another module
# tells that module what its calls of the parameter compute (`criterion(model(x), y)`)
LIBRARY_LOGITS_LOSSES = frozenset({"torch.nn.CrossEntropyLoss", "torch.nn.BCEWithLogitsLoss"})
# how a summary names a library class whose instances a module passes to another (`Argument.class_path`)
LIBRARY_CLASS = "<library>"


# reductions that return `(values, indices)`: along a dimension for max/min/median, always for the others
_VALUES_INDICES = frozenset({"max", "min", "median", "mode", "sort", "topk", "kthvalue", "cummax", "cummin"})
_ALONG_A_DIMENSION = frozenset({"max", "min", "median"})


def returns_indices(expr: cst.BaseExpression, imports: ImportMap) -> bool:
    """`x.max(1)`, `torch.sort(x)`, `x.topk(k)`: a call returning `(values, indices)`, whose indices
    (integers) never carry an autograd graph. `x.max()` and `torch.max(a, b)` return one tensor
    (`torch` as the module's imports name it: `import torch as t; t.max(x, 1)`)."""
    if not isinstance(expr, cst.Call) or not isinstance(expr.func, cst.Attribute):
        return False
    name = expr.func.attr.value
    if name not in _VALUES_INDICES:
        return False
    if name not in _ALONG_A_DIMENSION:
        return True
    if any(a.keyword is not None and a.keyword.value == "dim" for a in expr.args):
        return True
    # a dimension given by position: `x.max(1)`, `torch.max(x, -1)` (`x.max(y)`, `torch.max(a, b)`
    # of two tensors are elementwise, one tensor)
    positional = [a.value for a in expr.args if a.keyword is None]
    place = 1 if imports.resolve(expr.func.value) == "torch" else 0
    return len(positional) == place + 1 and isinstance(positional[place], (cst.Integer, cst.UnaryOperation))


def wraps_under_no_grad(fn: "Function", functions: Sequence["Function"], calls: Sequence["Call"]) -> bool:
    """`@nograd` on `fn`, where the module defines the decorator as a wrapper that calls what it wraps
    inside `with torch.no_grad():` (`def nograd(f): def new_f(*args, **kwargs): with t.no_grad(): return
    f(*args, **kwargs); return new_f`): `fn` runs without grad."""
    for name in fn.decorators:
        wrapper = next((f for f in functions if f.name == name and f.parent is None and f.class_name is None), None)
        if wrapper is None or len(wrapper.params) != 1:
            continue
        wrapped = wrapper.params[0]
        for call in calls:
            inner = call.site.function
            if inner is not None and inner.parent is wrapper and call.name == wrapped and any(w.kind == "no_grad" for w in call.site.withs):
                return True
    return False


NO_OP_CONTEXTS = frozenset({"contextlib.suppress", "contextlib.nullcontext", "contextlib.ExitStack"})


def helper_turns_grad_off(item: "WithItem", functions: Sequence["Function"], resolve: Callable[[cst.BaseExpression], str | None]) -> bool:
    """`with no_grad_ctx():` where `no_grad_ctx` is a module-level function of this module returning
    `torch.no_grad()` (or `inference_mode()`) on some path and a context that does nothing on the
    others: ENAS's `_get_no_grad_ctx_mgr()`, which gives `contextlib.suppress()` to PyTorch before 0.4."""
    call = item.call
    if item.kind != "other" or call is None or not isinstance(call.func, cst.Name) or call.args:
        return False
    helper = next((f for f in functions if f.name == call.func.value and f.parent is None and f.class_name is None), None)
    if helper is None or not helper.returns or helper.decorators:
        return False
    made = [resolve(r.func) if isinstance(r, cst.Call) else None for r in helper.returns]
    return any(m in NO_GRAD for m in made) and all(m in NO_GRAD or m in NO_OP_CONTEXTS for m in made)
