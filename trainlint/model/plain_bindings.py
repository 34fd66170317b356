"""The assignments that alone give a name its value, and what they say it is: a dtype (`x.to(dtype)` for
`dtype = anchors.dtype` is a cast, not a move), a legacy CUDA tensor type (`x.type(Tensor)` for
`Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor` is a move). Only plain assignments
count; a name a loop, a `with`, an import or a `global` statement may bind is left unknown."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.device_arguments import DTYPE_CALLS
from trainlint.model.names import dotted
from trainlint.model.torchnames import LEGACY_CONSTRUCTORS, is_cuda_tensor_type
from trainlint.model.walk import child_nodes, iter_nodes

if TYPE_CHECKING:
    from trainlint.model.facts import Site
    from trainlint.model.training import TrainingModel

DTYPE_NAMES = frozenset(
    """float16 bfloat16 float32 float64 float half double long int int64 int32 int16 int8 uint8 uint16
    uint32 uint64 short bool complex32 complex64 complex128 cfloat cdouble chalf float8_e4m3fn
    float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz qint8 quint8 qint32""".split()
)


def is_dtype(model: "TrainingModel", expr: cst.BaseExpression, site: "Site", depth: int = 0) -> bool:
    """`torch.long`, an alias of it, `x.dtype`, `dtype`, `torch.get_default_dtype()`, or a name bound
    only to those."""
    if isinstance(expr, cst.Call):
        return model.imports.resolve(expr.func) in DTYPE_CALLS
    qual = model.imports.resolve(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
    if qual is not None and qual.startswith("torch.") and qual.removeprefix("torch.") in DTYPE_NAMES:
        return True
    text = dotted(expr) or ""
    if text and "dtype" in text.rsplit(".", 1)[-1].lower():
        return True  # `w.to(dtype)`, `x.to(param.dtype)`: a cast, the tensor stays where it is
    if isinstance(expr, cst.Name) and depth < 3:
        # what reaches the name first: whether something else binds it reads the whole scope, and
        # needs asking only when every assignment is a dtype
        reaching = plain_bindings(model, expr.value, site, other_bindings=False)
        if not reaching or not all(is_dtype(model, a.value, a.site, depth + 1) for a in reaching):
            return False
        assigns = plain_bindings(model, expr.value, site)
        return bool(assigns) and all(is_dtype(model, a.value, a.site, depth + 1) for a in assigns)
    return False


def is_cuda_type(model: "TrainingModel", expr: cst.BaseExpression, site: "Site", depth: int = 0) -> bool:
    """`torch.cuda.FloatTensor` and its kind, a choice of it or the host's type (`torch.cuda.FloatTensor
    if x.is_cuda else torch.FloatTensor`: the type of a GPU run, where the analysis places a device
    chosen at run time), or a name or an attribute of `self` bound only to those."""
    if depth > 3:
        return False
    if isinstance(expr, cst.IfExp):
        arms = (expr.body, expr.orelse)
        cuda = [is_cuda_type(model, arm, site, depth + 1) for arm in arms]
        return any(cuda) and all(c or host_type(model, arm) for c, arm in zip(cuda, arms))
    if is_cuda_tensor_type(model.imports.resolve(expr)):
        return True
    if not _binds_cuda_types(model):
        return False
    if isinstance(expr, cst.Name):
        assigns = plain_bindings(model, expr.value, site)
    elif isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self" and site.function is not None:
        # `self.FloatTensor = torch.cuda.FloatTensor if self.use_gpu() else torch.FloatTensor` in `__init__`
        assigns = model.attribute_assigns(site.function.class_name, f"self.{expr.attr.value}")
    else:
        return False
    return bool(assigns) and all(a.op is None and is_cuda_type(model, a.value, a.site, depth + 1) for a in assigns)


def _binds_cuda_types(model: "TrainingModel") -> bool:
    """Whether any assignment of the module gives a legacy CUDA type, in a conditional or not (asked
    once: most modules have none, and then no name need be followed)."""
    known = model.__dict__.get("_binds_cuda_types")
    if known is None:
        arms = (arm for a in model.assigns for arm in ((a.value.body, a.value.orelse) if isinstance(a.value, cst.IfExp) else (a.value,)))
        known = model.__dict__["_binds_cuda_types"] = any(is_cuda_tensor_type(model.imports.resolve(arm)) for arm in arms)
    return known


def host_type(model: "TrainingModel", expr: cst.BaseExpression) -> bool:
    """`torch.FloatTensor` and its kind, or `torch.Tensor`: the host's types."""
    qualname = model.imports.resolve(expr) or ""
    return qualname.startswith("torch.") and qualname[len("torch."):] in (*LEGACY_CONSTRUCTORS, "Tensor")


def plain_bindings(model: "TrainingModel", name: str, site: "Site", other_bindings: bool = True) -> list:  # type: ignore[type-arg]
    """The assignments that give `name` its value at `site`; [] when something else may (a
    parameter, a loop or `with` target, a `global` statement, an import). Without `other_bindings`,
    the assignments alone, as if nothing else bound it (the question that reads the whole scope is
    left to the caller)."""
    fn = site.function
    if other_bindings and fn is not None and name in fn.params:
        return []  # (a rebinding on one path leaves the caller's value on the others)
    scope = fn.node if fn is not None else model.module
    if other_bindings and name in _bound_otherwise(model, scope):
        return []
    found = model.reaching(fn, name, site)
    if not found and fn is not None and not (other_bindings and name in _bound_otherwise(model, model.module)):
        found = model.reaching(None, name, None)  # a module-level name read in a function
    return found


# the last model's answers, by scope (a weak reference: the model and its tree are not kept alive)
_scopes: list[tuple["weakref.ref[TrainingModel]", dict[int, frozenset[str]]]] = []


_TARGETED = frozenset({cst.For, cst.CompFor, cst.AugAssign, cst.NamedExpr})


def _bound_otherwise(model: "TrainingModel", scope: cst.CSTNode) -> frozenset[str]:
    """Names `scope` binds other than by plain assignment (loop, `with` and `except` targets,
    augmented assignments, `:=`, imports, `global`, nested definitions); once per scope."""
    if not _scopes or _scopes[0][0]() is not model:
        _scopes[:] = [(weakref.ref(model), {})]
    memo = _scopes[0][1]
    found = memo.get(id(scope))
    if found is None:
        names: set[str] = set()
        stack: list[tuple[cst.CSTNode, bool]] = [(scope, False)]
        while stack:
            node, nested = stack.pop()
            kind = type(node)  # (exact classes: isinstance on libcst's ABCs is slow, and this sees every node)
            target: cst.CSTNode | None = None
            if kind is cst.Global or kind is cst.Nonlocal:
                names |= {n.name.value for n in node.names}  # type: ignore[attr-defined]  # (from any function: it rebinds this scope's)
            elif nested:
                pass  # a nested function's or class's own names
            elif kind in _TARGETED:
                target = node.target  # type: ignore[attr-defined]
            elif kind is cst.AsName:
                target = node.name  # type: ignore[attr-defined]
            elif kind is cst.ImportAlias and node.asname is None:  # type: ignore[attr-defined]  # (`as` names are AsName's)
                bound: cst.BaseExpression = node.name  # type: ignore[attr-defined]
                while type(bound) is cst.Attribute:
                    bound = bound.value  # type: ignore[attr-defined]  # `import a.b` binds `a`
                names.add(bound.value if type(bound) is cst.Name else "")  # type: ignore[attr-defined]
            elif (kind is cst.FunctionDef or kind is cst.ClassDef) and node is not scope:
                names.add(node.name.value)  # type: ignore[attr-defined]
                nested = True
            if target is not None:
                names |= {n.value for n in iter_nodes(target) if type(n) is cst.Name}
            stack.extend((child, nested) for child in child_nodes(node))
        found = memo[id(scope)] = frozenset(names)
    return found
