"""Which parameters an optimizer is built from, and which layers a function replaces: the facts behind
"a layer replaced after the optimizer was built" when the two halves sit in different functions or
modules (`optimizer = build_optimizer(model)`, then `model.reset_classifier(10)` or `setup_head(model)`).

A summary says both in terms of the function's receiver and parameters, so that a call site can put
its own arguments in their place: `replaces_layers` ("self.head", "0 model.fc") and `optimizes`
("0 model", "0 model.backbone": the returned optimizer holds the parameters of those modules)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import libcst as cst

from trainlint.model.arguments import argument_for
from trainlint.model.gates import child_nodes
from trainlint.model.lattice import Kind, Value, origins
from trainlint.model.names import dotted

if TYPE_CHECKING:
    from trainlint.model.facts import Call, Function, Site
    from trainlint.model.training import TrainingModel

# torch.nn modules without parameters: replacing a layer by one of them leaves nothing untrained
PARAMETERLESS_MODULES = frozenset(
    """Identity Dropout Dropout1d Dropout2d Dropout3d AlphaDropout ReLU ReLU6 LeakyReLU GELU SiLU Mish
    Sigmoid Tanh Softmax LogSoftmax Softplus ELU SELU CELU Hardswish Hardsigmoid Hardtanh Flatten Unflatten
    MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool1d AdaptiveAvgPool2d
    AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d Upsample PixelShuffle""".split()
)
PARAMETER_METHODS = ("parameters", "named_parameters")


def parameter_free(module: Value) -> bool:
    """A `torch.nn` module with no parameters of its own: a loss (`nn.CrossEntropyLoss()`) or a layer of
    `PARAMETERLESS_MODULES`."""
    found = [o.rsplit(".", 1)[-1] for o in origins(module) if o.startswith("torch.nn.")]
    return bool(found) and len(found) == len(origins(module)) and all(n in PARAMETERLESS_MODULES or n.endswith("Loss") for n in found)


def parameter_sources(model: "TrainingModel", call: "Call", depth: int = 0) -> set[str]:
    """The modules whose parameters an optimizer receives, as dotted texts: `SGD(model.parameters())`,
    `Adam([{"params": model.fc.parameters()}])`, `params = [p for p in model.parameters()]; SGD(params)`."""
    params = call.arg(0, "params")
    return _sources(model, params, call, depth) if params is not None else set()


def _sources(model: "TrainingModel", expr: cst.BaseExpression, call: "Call", depth: int) -> set[str]:
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


def _loop_sources(model: "TrainingModel", filler: "Call", depth: int) -> set[str]:
    """`for name, p in model.named_parameters(): params.append(p)`: the loops an append sits in."""
    out: set[str] = set()
    for loop in filler.site.loops:
        if isinstance(loop.node, cst.For):
            out |= _sources(model, loop.node.iter, filler, depth + 1)
    return out


def is_optimizer_construction(model: "TrainingModel", call: "Call") -> bool:
    """`torch.optim.SGD(...)`: an optimizer of torch's built by this call."""
    return (
        call.qualname is not None and call.qualname.startswith("torch.optim.")
        and model.value(call.node, call.site).kind is Kind.OPTIMIZER
    )


def builds_parameters(model: "TrainingModel", expr: cst.BaseExpression, site: "Site") -> bool:
    """Whether `expr` builds a module the analysis knows, with parameters: `nn.Linear(...)`, a project
    module class; not `nn.ReLU()`, `nn.Identity()` (nothing there for an optimizer to miss), nor a value
    of unknown kind (never a guess from a name)."""
    value = model.value(expr, site)
    if value.kind is not Kind.MODULE or not value.origin:
        return False
    return not any(o.startswith("torch.nn.") and o.rsplit(".", 1)[-1] in PARAMETERLESS_MODULES for o in origins(value))


def parameter_key(fn: "Function", name: str) -> str | None:
    """"0 model": a parameter's position among the explicit ones, and its name (as summaries say)."""
    positional = fn.explicit_params
    return f"{positional.index(name)} {name}" if name in positional else None


def _as_argument(fn: "Function", text: str) -> str | None:
    """A dotted text rooted at the function's receiver or a parameter, as summaries say it:
    "self.head", "0 model.fc", "0 model"; None for anything else (a global, a local)."""
    root, dot, rest = text.partition(".")
    if root == "self" and fn.class_name is not None and fn.params[:1] == ("self",):
        return text if dot else None
    key = parameter_key(fn, root) if root not in ("self", "cls") else None
    return None if key is None else f"{key}{dot}{rest}"


def replaced_layers(model: "TrainingModel", fn: "Function", replaced_by: "Callable[[Function], tuple[str, ...]]") -> tuple[str, ...]:
    """The layers every call of `fn` replaces with a new module that has parameters, as attributes of
    its receiver or of a parameter: `self.head = nn.Linear(...)` in `reset_classifier` gives
    "self.head", `model.fc = nn.Linear(...)` in `setup_head(model)` gives "0 model.fc"; and those the
    functions of this module it calls replace (`self._build_head(n)`, `setup_head(model)`, their
    summaries' `replaces_layers` by `replaced_by`). Only what runs on every call (not under an `if`, in a loop or a
    handler): a replacement on one path only is not a fact of the call. A constructor builds its
    layers; it replaces none."""
    if fn.name == "__init__":
        return ()
    out: list[str] = []
    for call in fn.calls:
        site = call.site
        callee = model.called_function(call) if site.function is fn else None
        if callee is None or site.loops or site.gate_depths or site.in_except or site.else_of:
            continue
        for entry in replaced_by(callee):
            target = replacement_target(call, entry)
            named = _as_argument(fn, target) if target is not None else None
            if named is not None and not model.reaching(fn, target.split(".", 1)[0], site):  # type: ignore[union-attr]
                out.append(named)
    for a in model.assigns:
        site = a.site
        if site.function is not fn or a.op is not None or len(a.targets) != 1 or a.unpacked:
            continue
        if site.loops or site.gate_depths or site.in_except or site.else_of:
            continue
        target = a.targets[0].removesuffix("[]")
        if "." not in target or "[]" in target:
            continue
        named = _as_argument(fn, target)
        if named is None or model.reaching(fn, target.split(".", 1)[0], site):
            continue  # (a parameter bound again: another object than the caller's)
        if builds_parameters(model, a.value, site):
            out.append(named)
    return tuple(dict.fromkeys(out))


def optimized_modules(model: "TrainingModel", fn: "Function") -> tuple[str, ...]:
    """What the optimizer `fn` returns is built from, as its receiver's or parameters' modules:
    `return torch.optim.AdamW(model.parameters())` in `build_optimizer(model)` gives "0 model" (every
    `return` gives an optimizer of torch built in `fn`, directly or through a name every binding of
    which builds one). Modules that are neither (a global model) are left out: no call site can name them."""
    returned = [r for r in fn.return_facts if r.site.function is fn]
    if not returned:
        return ()
    sources: set[str] = set()
    for r in returned:
        built = _optimizer_calls(model, r.value, r.site, fn)
        if not built:
            return ()
        for call in built:
            sources |= parameter_sources(model, call)
    named = (_as_argument(fn, s) for s in sorted(sources))
    return tuple(n for n in named if n is not None)


def _optimizer_calls(model: "TrainingModel", expr: cst.BaseExpression, site: "Site", fn: "Function") -> list["Call"]:
    """The optimizer constructions `expr` holds: the call itself, or every binding of a name (empty
    when one of them is not one)."""
    if isinstance(expr, cst.Call):
        call = model.call_at(expr)
        return [call] if call is not None and is_optimizer_construction(model, call) else []
    if not isinstance(expr, cst.Name):
        return []
    assigns = model.reaching(fn, expr.value, site)
    out: list["Call"] = []
    for a in assigns:
        if a.op is not None or a.unpacked or len(a.targets) != 1 or not isinstance(a.value, cst.Call):
            return []
        call = model.call_at(a.value)
        if call is None or not is_optimizer_construction(model, call):
            return []
        out.append(call)
    return out


def replacement_target(call: "Call", entry: str) -> str | None:
    """The layer a call replaces, as the caller writes it: "self.head" of `model.reset_classifier(10)`
    is `model.head`; "0 model.fc" of `setup_head(net)` is `net.fc` (None when the argument is no
    plain dotted name, or a method's receiver is not named)."""
    key, dot, rest = entry.partition(".")
    if key == "self":
        owner = call.receiver_text if call.method is not None else None
    else:
        given = argument_for(call.node, key)
        owner = dotted(given) if given is not None else None
    if not owner:
        return None
    return f"{owner}{dot}{rest}"
