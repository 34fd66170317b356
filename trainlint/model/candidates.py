"""Class-hierarchy analysis for objects whose class the project chooses at run time: `criterion =
CRITERIA[cfg.loss]()`, `LOSSES.get(cfg.loss)(cfg)`, `criterion: Criterion = build_criterion(cfg)`.
The value model cannot know which class is built, but the project's own definitions bound it: the
classes of the dict, those registered in the registry, the subclasses of the declared base that the
project builds. Those that define the called method are the candidates, as any call-graph builder
takes them; more than `MAX_CANDIDATES` says nothing (DESIGN.md: "The whole program")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.configurable import configured_argument
from trainlint.model.hooks import library_registry
from trainlint.model.lattice import Kind, Value
from trainlint.model.names import dotted
from trainlint.model.summary import ATTRIBUTES
from trainlint.model.torchnames import MODULE_MOVES, MODULE_WRAPPERS

if TYPE_CHECKING:
    from trainlint.model.facts import Assign, Site
    from trainlint.model.training import TrainingModel

MAX_CANDIDATES = 3
MAX_DEPTH = 3  # factories returning what other factories build


def candidate_classes(m: "TrainingModel", expr: cst.BaseExpression, site: "Site", method: str | None) -> tuple[str, ...]:
    """The classes (a class of this module by name, another module's as "file::Class") an object
    `expr` may be an instance of, as the project chooses its class at run time, that define `method`
    (None: the object is called, its `forward` or `__call__`); none where there are more than
    `MAX_CANDIDATES` or where a binding of it is not such a choice."""
    bindings = _configured(m, _bindings(m, expr, site))
    found: list[str] = []
    for value, annotation, at in bindings:
        chosen = _declared(m, annotation) if annotation is not None else None
        if chosen is None:
            chosen = _chosen(m, value, at, 0)
        if chosen is None:
            return ()
        found.extend(c for c in chosen if c not in found)
    names = (method,) if method else ("forward", "__call__")
    defining = [c for c in found if any(_defines(m, c, n) for n in names)]
    return tuple(defining) if len(defining) <= MAX_CANDIDATES else ()


def _configured(m: "TrainingModel", bindings: "list[tuple[cst.BaseExpression, cst.BaseExpression | None, Site]]") -> "list[tuple[cst.BaseExpression, cst.BaseExpression | None, Site]]":
    """`bindings`, with a parameter of a `@configurable` constructor (`self.head = head`) replaced by
    what detectron2's `from_config` gives it (`head = build_sem_seg_head(cfg, shape)`, then `{"head": head}`)."""
    out = []
    for value, annotation, at in bindings:
        given = configured_argument(m.local_class, at.function, value.value) if isinstance(value, cst.Name) and at.function is not None else None
        if given is None:
            out.append((value, annotation, at))
        else:
            out.extend(_bindings(m, given[0], given[2]) if isinstance(given[0], cst.Name) else [(given[0], None, given[2])])
    return out


def _bindings(m: "TrainingModel", expr: cst.BaseExpression, site: "Site") -> list[tuple[cst.BaseExpression, "cst.BaseExpression | None", "Site"]]:
    """The values `expr` is bound to where it is used (a local name, or an attribute of `self`), each
    with its declared type if any."""
    fn = site.function
    if isinstance(expr, cst.Name):
        assigns = m.reaching(fn, expr.value, site) or (m.reaching(None, expr.value, None) if fn is None else [])
    elif isinstance(expr, cst.Attribute) and dotted(expr.value) == "self" and fn is not None and fn.class_name:
        assigns = m.attribute_assigns(fn.class_name, f"self.{expr.attr.value}")
    else:
        return []
    if not assigns or any(a.op is not None for a in assigns):
        return []
    out: list[tuple[cst.BaseExpression, "cst.BaseExpression | None", "Site"]] = []
    for a in assigns:
        given = prepared_argument(m, a, expr.value) if a.unpacked and isinstance(expr, cst.Name) else None
        if a.unpacked and not isinstance(given, cst.Name):
            return []
        out.extend(_bindings(m, given, a.site) if given is not None else [(a.value, a.node.annotation.annotation if isinstance(a.node, cst.AnnAssign) else None, a.site)])
    return out


def prepared_argument(m: "TrainingModel", assign: "Assign", name: str) -> cst.BaseExpression | None:
    """`model, optimizer = accelerator.prepare(model, optimizer)`: what Accelerate's `prepare` was given
    for `name` (it returns what it is given, wrapped, in order); None for any other unpacking."""
    call = assign.value
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "prepare" and name in assign.targets):
        return None
    args = [a for a in call.args if a.keyword is None and not a.star]
    if len(args) != len(assign.targets) or m.value(call.func.value, assign.site).origin != "accelerate.Accelerator":
        return None
    return args[assign.targets.index(name)].value


def _chosen(m: "TrainingModel", value: cst.BaseExpression, at: "Site", depth: int) -> list[str] | None:
    """The classes a construction may build: `TABLE[key](...)`, `REGISTRY.get(key)(...)`,
    `REGISTRY.build(cfg)`, or a factory of this module returning one (its declared return type, or
    what each of its `return`s builds)."""
    if not isinstance(value, cst.Call) or depth > MAX_DEPTH:
        return None
    inner = _unwrapped(m, value)
    if inner is not value:  # `DDP(model.to(device))`: the object inside, as it was chosen
        if not isinstance(inner, cst.Name):
            return _chosen(m, inner, at, depth + 1)
        out: list[str] = []
        for bound, annotation, where in _bindings(m, inner, at) or [(None, None, at)]:
            chosen = _declared(m, annotation) if annotation is not None else None
            chosen = chosen if chosen is not None else _chosen(m, bound, where, depth + 1) if bound is not None else None
            if chosen is None:
                return None
            out.extend(c for c in chosen if c not in out)
        return out or None
    func = value.func
    if isinstance(func, cst.Subscript):  # `CRITERIA[cfg.loss](...)`
        return _table(m, func.value, at, depth) or _registry(m, func.value)
    if isinstance(func, cst.Call) and dotted(func.func) == "getattr" and len(func.args) >= 2:
        return _module_attribute(m, func.args[0].value, func.args[1].value, at)  # `getattr(models, cfg.arch)(...)`
    if isinstance(func, cst.Call) and isinstance(func.func, cst.Attribute):
        return _registry(m, func.func.value)  # `LOSSES.get(cfg.loss)(cfg)`: a class the registry holds
    if isinstance(func, cst.Attribute):
        found = _registry(m, func.value)  # `MODELS.build(cfg.model)`: an object of one
        if found is not None:
            return found
    factory = m.called_function(m.call_at(value)) if m.call_at(value) is not None else None  # type: ignore[arg-type]
    if factory is None and isinstance(func, (cst.Name, cst.Attribute)):
        registry = library_registry(m.imports.resolve(func))  # (`build_roi_heads(cfg, shape)` of detectron2)
        return _asked(m, "library", registry) if registry is not None else _ask(m, "factory", func)  # (`build_criterion(cfg)`)
    if factory is None or factory.class_name is not None:
        return None
    declared = _declared(m, factory.node.returns.annotation) if factory.node.returns is not None else None
    if declared is not None:
        return declared
    out: list[str] = []
    for ret in factory.return_facts:
        chosen = _chosen(m, ret.value, ret.site, depth + 1)
        if chosen is None:
            return None
        out.extend(c for c in chosen if c not in out)
    return out or None


def registered_builders(m: "TrainingModel", registry: str) -> Value | None:
    """`build_func = MODULE_BUILD_FUNCS.get(args.modelname)` (`registry`: the registry's name as the
    imports spell it): a function value that may be each project function its methods decorate
    (`@MODULE_BUILD_FUNCS.registe_with_name(module_name='dino') def build_dino(args)`); None where
    there is none or more than `MAX_CANDIDATES`."""
    found = _asked(m, "builders", registry)
    return Value(Kind.FUNCTION, origin="|".join(found)) if found and len(found) <= MAX_CANDIDATES else None


def _unwrapped(m: "TrainingModel", value: cst.Call) -> cst.BaseExpression:
    """`model.to(device)`, `DDP(model, ...)`, `torch.compile(model)`: the module inside; else `value`."""
    func = value.func
    if isinstance(func, cst.Attribute) and func.attr.value in MODULE_MOVES:
        return func.value
    if value.args and value.args[0].keyword is None and m.imports.resolve(func) in MODULE_WRAPPERS:
        return value.args[0].value
    return value


def _project_name(m: "TrainingModel", expr: cst.BaseExpression) -> str | None:
    """A module-level name as any module finds it: "file::NAME" for this module's, else as the
    imports spell it."""
    text = dotted(expr)
    if text is None:
        return None
    if "." not in text and (m.reaching(None, text, None) or m.local_class(text) is not None):
        return f"{m.path}::{text}" if m.path else None
    return m.imports.resolve(expr)  # (a local variable, an attribute of one: none)


def _ask(m: "TrainingModel", kind: str, expr: cst.BaseExpression) -> list[str] | None:
    name = _project_name(m, expr) if getattr(m.project, "class_candidates", None) is not None and m.path else None
    return _asked(m, kind, name) if name is not None else None


def _asked(m: "TrainingModel", kind: str, name: str) -> list[str] | None:
    """The project's answer to a class-hierarchy question (`ProjectLookup.class_candidates`), memoised."""
    ask = getattr(m.project, "class_candidates", None)
    if ask is None or not m.path:
        return None
    memo = m.__dict__.setdefault("_candidates_memo", {})  # (asked of the same name by many calls)
    found = memo.get((kind, name))
    if found is None:
        found = memo[(kind, name)] = tuple(ask(m.path, kind, name))
    return list(found) if found else None


def _table(m: "TrainingModel", expr: cst.BaseExpression, at: "Site | None" = None, depth: int = 0) -> list[str] | None:
    """The project classes a dict of classes holds (`CRITERIA = {"set": SetCriterion, ...}`): this
    module's own dict read here (also one bound in the function, `models = {...}` then
    `models[name](params)`, and one holding factories of this module, `{"GatedGCN": GatedGCN}` with
    `def GatedGCN(p): return GatedGCNNet(p)`), another module's asked of the project."""
    if isinstance(expr, cst.Name):
        local = m.reaching(at.function, expr.value, at) if at is not None and at.function is not None else []
        assigns = local or m.reaching(None, expr.value, None)
        if assigns:
            values = [e.value for a in assigns if isinstance(a.value, cst.Dict)
                      for e in a.value.elements if isinstance(e, cst.DictElement)]
            found: list[str] = []
            for v in values:
                built = [c] if (c := _class_named(m, v)) is not None else _built_by(m, v, depth)
                found.extend(built or ())
            return list(dict.fromkeys(found)) or None
    return _ask(m, "table", expr)


def _built_by(m: "TrainingModel", expr: cst.BaseExpression, depth: int) -> list[str] | None:
    """The classes a factory function of this module, named by `expr`, builds (what each `return` does)."""
    fn = m.local_function(expr.value) if isinstance(expr, cst.Name) else None
    if fn is None or fn.class_name is not None or not fn.return_facts or depth >= MAX_DEPTH:
        return None
    out: list[str] = []
    for ret in fn.return_facts:
        built = _class_named(m, ret.value.func) if isinstance(ret.value, cst.Call) else None  # `return GatedGCNNet(p)`
        chosen = [built] if built is not None else _chosen(m, ret.value, ret.site, depth + 1)
        if chosen is None:
            return None
        out.extend(c for c in chosen if c not in out)
    return out


def _class_named(m: "TrainingModel", expr: cst.BaseExpression) -> str | None:
    """A class of this module by its name, or a project class it imports as "file::Class"."""
    name = dotted(expr)
    if name is not None and "." not in name and m.local_class(name) is not None:
        return name
    qual = m.imports.resolve(expr)
    qualify = getattr(m.project, "qualify", None)
    if qual is None or qualify is None or not m.path or type(m.project_symbol(qual)).__name__ != "ClassSummary":
        return None
    return qualify(m.path, qual)


def _module_attribute(m: "TrainingModel", module: cst.BaseExpression, name: cst.BaseExpression, at: "Site") -> list[str] | None:
    """`getattr(base_model, "build_%s" % args.model)(...)`: the classes of a project module, and those
    its factories build, whose names start with the constant part of the name looked up (also where
    a name is bound to it: `constructor = "build_%s" % args.model`)."""
    bound = m.reaching(at.function, name.value, at) if isinstance(name, cst.Name) else []
    name = bound[0].value if len(bound) == 1 and bound[0].op is None and not bound[0].unpacked else name
    ask = getattr(m.project, "class_candidates", None)
    qual = m.imports.resolve(module) if ask is not None and m.path and not isinstance(name, cst.SimpleString) else None
    if qual is None:
        return None
    return list(ask(m.path, f"{ATTRIBUTES}{name_prefix(name)}", qual)) or None  # type: ignore[misc]


def name_prefix(name: cst.BaseExpression) -> str:
    """The constant start of a name computed from a setting: "build_" of `"build_%s" % args.model`,
    `f"build_{args.model}"` and `"build_" + args.model`; else ""."""
    if isinstance(name, cst.BinaryOperation) and isinstance(name.operator, (cst.Modulo, cst.Add)) and isinstance(name.left, cst.SimpleString):
        text = name.left.evaluated_value
        return text.split("%")[0] if isinstance(text, str) else ""
    if isinstance(name, cst.FormattedString) and name.parts and isinstance(name.parts[0], cst.FormattedStringText):
        return name.parts[0].value
    return ""


def _registry(m: "TrainingModel", expr: cst.BaseExpression) -> list[str] | None:
    """The project classes registered in a registry: decorated by one of its methods
    (`@LOSSES.register("set")`), here and in the modules that import it."""
    here: list[str] = []
    if isinstance(expr, cst.Name) and m.reaching(None, expr.value, None):
        for info in m.classes:
            for decorator in info.node.decorators:
                func = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
                if isinstance(func, cst.Attribute) and dotted(func.value) == expr.value:
                    here.append(info.name)
    found = here + [c for c in _ask(m, "registry", expr) or () if c.rpartition("::")[0] != m.resolved_path]  # type: ignore[attr-defined]
    return found or None


def _declared(m: "TrainingModel", annotation: cst.BaseExpression) -> list[str] | None:
    """The project classes an object declared as `Base` may be: `Base` and its subclasses (a class of
    this module's, read here, and those of the modules that import its module)."""
    if isinstance(annotation, cst.SimpleString):
        try:
            annotation = cst.parse_expression(annotation.evaluated_value)  # type: ignore[arg-type]
        except Exception:
            return None
    name = dotted(annotation)
    here: list[str] = []
    if name is not None and "." not in name and m.local_class(name) is not None:
        here = [name, *(c.name for c in m.subclasses(name))]
    found = here + [c for c in _ask(m, "base", annotation) or () if c.rpartition("::")[0] != m.resolved_path]  # type: ignore[attr-defined]
    return found or None


def _defines(m: "TrainingModel", origin: str, method: str) -> bool:
    """Whether an object of class `origin` has `method` of its own or from a project base."""
    if "::" not in origin:
        info = m.local_class(origin)
        return info is not None and m.inherited_method(info, method) is not None
    methods = m.class_methods(origin)
    return methods is not None and method in methods


def chosen_note(expr: str, origins: "list[str] | tuple[str, ...]") -> str:
    """What a chain says of a call resolved by class-hierarchy analysis: "`criterion` may be
    `SetCriterion`, built from the configuration"."""
    names = " or ".join(f"`{o.rpartition('::')[2]}`" for o in dict.fromkeys(origins))
    return f"`{expr}` may be {names}, built from the configuration"
