"""Class-hierarchy analysis over the project's own definitions: which classes the project can build
(an override of a class nobody builds never runs), and which project classes an object may be when
the value model cannot tell (built from a configuration string through a registry or a dict of
classes, or declared as a base): the classes that define the called method and could be built there."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypeVar

from trainlint.model.summary import ATTRIBUTES, DEFINING
from trainlint.model.hooks import LIBRARY_REGISTRY_BUILDERS
from trainlint.project.classes import class_hierarchy
from trainlint.project.python_trees import python_tree, walk
from trainlint.project.roots import real_path
from trainlint.project.watching import note, note_all, watching
from trainlint.reading import module_code, read_state

if TYPE_CHECKING:
    from trainlint.project.importers import ImportIndex
    from trainlint.project.index import Project


def unbuilt(project: "Project", target: Path, name: str, base: str) -> bool:
    """Whether the project builds objects of other classes deriving from `base` ("file::Base", or
    that class itself) but never one of class `name` of module `target`: an application that builds
    its objects, one of which it never builds (a library whose users build its classes builds none)."""
    if _built_or_derived(project, target, name, 0):
        return False
    base_path, _, base_name = base.rpartition("::")
    mine = f"{target}::{name}"
    for sibling in _derived(project, _real(Path(base_path)), base_name):
        path, _, cls = sibling.rpartition("::")
        if sibling != mine and built(project, Path(path), cls):
            return True
    return False


def _built_or_derived(project: "Project", target: Path, name: str, depth: int) -> bool:
    """Whether the project builds an object of class `name` or of a class deriving from it (an
    intermediate base, `BaseConditionalGenerator`, runs its methods in the objects of its subclasses),
    `MAX_DERIVED_LEVELS` of subclasses down."""
    if built(project, target, name):
        return True
    if depth >= MAX_DERIVED_LEVELS or project.depth > 0:
        return False
    for sub in _derived(project, _real(target), name)[1:]:
        path, _, cls = sub.rpartition("::")
        if _built_or_derived(project, Path(path), cls, depth + 1):
            return True
    return False


MAX_DERIVED_LEVELS = 2


def built(project: "Project", target: Path, name: str) -> bool:
    """Whether the project may build an object of class `name` of module `target`: its module, or one
    that imports the name, names it other than in an import or a `class` statement (constructs it,
    registers it, hands it on), a decorator registers it, or its package offers it (`_published`).
    A class named nowhere else is never built (a name may only silence: any other use counts as one). Asked by the analysis of the module
    linted; a deeper level (a summary) has no import index of its own to ask and takes every class as
    built."""
    if project.depth > 0:
        return True
    index = project._import_index(target)
    # asked for every override of every base a step dispatches to: read once per index, which is
    # dropped when a module on disk changes (`ImportIndex.current`), as are the answers it keeps
    known = index.built.get((target, name))
    if known is None:
        with watching() as read:
            answer = _built(index, target, name)
        known = index.built[(target, name)] = (answer, tuple(read))
    note_all(known[1])
    return known[0]


def _built(index: "ImportIndex", target: Path, name: str) -> bool:
    modules = [target, *(f for f in index.by_word.get(name, ()) if f != target)]
    word = re.compile(rf"(?<![\w.]){re.escape(name)}\b")
    for module in modules[:MAX_MODULES]:
        state, data = read_state(str(module))
        note(state)
        if data is None:
            return True
        text = _IMPORTS.sub("", module_code(str(module), data))
        for line in text.splitlines():
            if word.search(line) and not line.lstrip().startswith(("class ", "import ", "from ", "def ")):
                return True
        if module == target and re.search(rf"^[ \t]*@.*\n(?:[ \t]*@.*\n)*[ \t]*class {re.escape(name)}\b", text, re.M):
            return True
    return _published(target, name)


def _published(target: Path, name: str) -> bool:
    """Whether the package holding module `target` offers class `name` from its `__init__.py` (`from
    .wgan_gp_base import *`, `from .pg import PGPolicy`): a package's users build what it offers."""
    state, data = read_state(str(target.parent / "__init__.py"))
    note(state)
    if not data or target.name == "__init__.py":
        return False
    text = module_code(str(target.parent / "__init__.py"), data)
    module = re.escape(target.stem)
    return re.search(rf"^[ \t]*from[ \t]+\.{module}[ \t]+import[ \t]+(?:\*|[^#\n]*(?<![\w.]){re.escape(name)}\b)", text, re.M) is not None


_IMPORTS = re.compile(r"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]*\([^)]*\)", re.M)  # (multi-line imports)


REGISTRY_GET = ".get()"  # (a factory returning `REGISTRY.get(key)(...)`, as `_TopLevel.factories` notes it)
MAX_MODULES = 24  # modules read for the classes registered in a registry or deriving from a base
MAX_DEFINING = 3  # classes defining a method, at most, for an object known only by that method


def classes_defining(project: "Project", from_file: Path, method: str) -> tuple[str, ...]:
    """The project classes ("file::Class") that define `method` themselves and that the project builds:
    what an object handed to a function may be when nothing but the method called on it says (a
    `log_data` parameter whose `log_data.add_metric(...)` only `MetricLog` defines). None past
    `MAX_DEFINING`, or where a module defining one cannot be read; asked by the module linted only."""
    if project.depth > 0:
        return ()
    index = project._import_index(_real(from_file))
    known = index.defining.get(method)
    if known is None:
        with watching() as read:
            found: list[str] = []
            files = index.methods.get(method, ())
            for file in files[:MAX_MODULES] if len(files) <= MAX_MODULES else ():
                for name, cls in project.outline(file).classes.items():
                    if method in cls.methods and built(project, file, name):
                        found.append(f"{_real(file)}::{name}")
        known = index.defining[method] = (tuple(found), tuple(read))
    note_all(known[1])
    return known[0] if len(known[0]) <= MAX_DEFINING else ()


def class_candidates(project: "Project", from_file: Path, kind: str, qualname: str) -> tuple[str, ...]:
    """The project classes ("file::Class") an object may be when module `from_file` builds it from
    `qualname` (as it spells it, or "file::NAME"): "table", the classes a dict of classes holds;
    "registry", those a method of it decorates (`@LOSSES.register()`); "builders", the functions it decorates; "library", those a method of a
    library's registry ("detectron2.ROI_HEADS_REGISTRY") decorates in any module; "factory", those of the registry
    whose class every return of function `qualname` builds (`return LOSSES.get(name)(cfg)`); "base", the class and its
    subclasses in the modules importing its module; "functions", the functions ("file::f") a dict of
    functions holds (`loss_registry = {"simple": noise_estimation_loss}`), when it holds only those;
    ATTRIBUTES + prefix, the classes of module `qualname` and those its factories build, named with
    the prefix (`getattr(models, "build_%s" % name)`); DEFINING + method, those defining the method
    (`classes_defining`, `qualname` unused). Empty when `qualname` is none of these."""
    if kind.startswith(DEFINING):
        return classes_defining(project, from_file, kind[len(DEFINING):])
    if kind == "library":
        return _library_registered(project, from_file, qualname)
    if kind.startswith(ATTRIBUTES):  # (a module, found as the home of a name in it)
        home = project.locate_any(from_file, f"{qualname}.*")
        return _attributes(project, _real(home[0]), kind[len(ATTRIBUTES):]) if home is not None and home[1] == ["*"] else ()
    where = project.locate_any(from_file, qualname)
    if where is None or len(where[1]) != 1:
        return ()
    path, name = _real(where[0]), where[1][0]
    if kind == "table":
        return _table(project, path, name)
    if kind == "functions":
        return _function_table(project, path, name)
    if kind in ("registry", "builders"):
        return _registered(project, path, name, functions=kind == "builders")
    if kind == "factory":
        return _factory_registered(project, path, name)
    if kind == "base" and name in project.outline(path).classes:
        return _derived(project, path, name)
    return ()


_real = real_path


@dataclass(frozen=True)
class _TopLevel:
    """What the class-hierarchy questions read of a module's top level, kept instead of its tree
    (a tree per module of the project would be most of a worker's memory)."""

    assigned: frozenset[str]  # names bound by a top-level assignment (a registry object, a table)
    tables: dict[str, tuple[str | None, ...]]  # `NAME = {...}`: each value's text (a name or attribute), else None
    registrations: tuple[tuple[str, str], ...]  # (class, registry) of `@REGISTRY.method(...) class C`
    # `def DiT_S_2(**kw): return DiT(depth=12, **kw)`: a top-level function whose every `return` calls one name
    factories: dict[str, str] = field(default_factory=dict)
    builders: tuple[tuple[str, str], ...] = ()  # (function, registry) of `@REGISTRY.method(...) def build(args)`


def _top_level(path: Path) -> _TopLevel | None:
    """A module's `_TopLevel` (memoised by content), its read noted; None if it cannot be read or parsed."""
    return per_content(_TOP_LEVELS, path, _read_top_level, None)


def _read_top_level(data: bytes, path: Path) -> _TopLevel | None:
    try:
        tree = python_tree(module_code(str(path), data))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    assigned: set[str] = set()
    tables: dict[str, tuple[str | None, ...]] = {}
    registrations: list[tuple[str, str]] = []
    factories: dict[str, str] = {}
    builders: list[tuple[str, str]] = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        assigned.update(t.id for t in targets if isinstance(t, ast.Name))
        if len(targets) == 1 and isinstance(targets[0], ast.Name) and isinstance(node.value, ast.Dict):  # type: ignore[union-attr]
            values = node.value.values  # type: ignore[union-attr]
            tables[targets[0].id] = tuple(ast.unparse(v) if isinstance(v, (ast.Name, ast.Attribute)) else None for v in values)
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                func = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(func, ast.Attribute):  # (`@LOSSES.register("set")`: a method of the registry)
                    (registrations if isinstance(node, ast.ClassDef) else builders).append((node.name, ast.unparse(func.value)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            made = _factory_of(node)
            if made is not None:
                factories[node.name] = made
    return _TopLevel(frozenset(assigned), tables, tuple(registrations), factories, tuple(builders))


def _factory_of(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The one name every `return` of a function calls (`return DiT(depth=28, **kw)`, or `model =
    MAR(...)` then `return model`), as written; None when the returns build anything else."""
    made: set[str | None] = set()
    for node in walk(function):
        if not isinstance(node, ast.Return):
            continue
        values: list[ast.expr | None] = [node.value]
        if isinstance(node.value, ast.Name):  # a name bound only to calls (`model = MAR(...)`)
            values = [a.value for a in walk(function) if isinstance(a, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == node.value.id for t in a.targets)] or [None]
        made.update(_made_by(v) for v in values)
    return made.pop() if len(made) == 1 and None not in made else None


def _made_by(value: ast.expr | None) -> str | None:
    """What a returned call calls, as written: `DiT` of `DiT(depth=28)`, or `REGISTRY.get()` of
    `REGISTRY.get(name)(cfg)` (a class the registry holds); None for anything else."""
    if not isinstance(value, ast.Call):
        return None
    func = value.func
    if isinstance(func, ast.Call) and isinstance(func.func, ast.Attribute) and func.func.attr == "get" and isinstance(func.func.value, (ast.Name, ast.Attribute)):
        return ast.unparse(func.func.value) + REGISTRY_GET
    return ast.unparse(func) if isinstance(func, (ast.Name, ast.Attribute)) else None


T = TypeVar("T")


def per_content(memo: dict[Path, tuple[object, T]], path: Path, read: Callable[[bytes, Path], T], missing: T) -> T:
    """`read(data, path)` of a module's content, memoised by its state (read again once it changes);
    the read noted; `missing` for a module that cannot be read."""
    state, data = read_state(str(path))
    note(state)
    if data is None:
        return missing
    known = memo.get(path)
    if known is None or known[0] != state:
        known = memo[path] = (state, read(data, path))
    return known[1]


_TOP_LEVELS: dict[Path, tuple[object, "_TopLevel | None"]] = {}
_DECORATED = re.compile(rb"^[ \t]*@[\w.]+\.\w+", re.M)  # a decorator that is an object's method


def _class_of(project: "Project", path: Path, spelled: str) -> str | None:
    """A class as module `path` names it (its own, or imported): "file::Class"."""
    if "." not in spelled and spelled in project.outline(path).classes:
        return f"{path}::{spelled}"
    exports = project.outline(path).exports
    head, _, rest = spelled.partition(".")
    full = ".".join(p for p in (exports.get(head, head), rest) if p)
    found = project.locate(path, full)
    if found is None or len(found[1]) != 1:
        return None
    home = _real(found[0])
    return f"{home}::{found[1][0]}" if found[1][0] in project.outline(home).classes else None


def _table(project: "Project", path: Path, name: str) -> tuple[str, ...]:
    facts = _top_level(path)
    out: list[str] = []
    # `models_mae.__dict__[args.model](...)`: a module's own names looked up as a table, where what
    # is meant to be picked are its factories (`mae_vit_base_patch16`), each returning a class
    texts = tuple(facts.factories) if facts is not None and name == "__dict__" else facts.tables.get(name, ()) if facts is not None else ()
    for text in texts:
        # (a factory of this module in the table: the class it builds)
        text = facts.factories.get(text, text) if text is not None else None  # type: ignore[union-attr]
        found = _class_of(project, path, text) if text is not None else None
        if found is not None and found not in out:
            out.append(found)
    return tuple(out)


def _attributes(project: "Project", path: Path, prefix: str) -> tuple[str, ...]:
    """The classes of module `path`, and those its factories build, named with `prefix` (what
    `getattr(module, "build_%s" % args.model)` may give)."""
    facts = _top_level(path)
    factories = facts.factories if facts is not None else {}
    out: list[str] = []
    for name in (*project.outline(path).classes, *factories):
        found = _class_of(project, path, factories.get(name, name)) if name.startswith(prefix) else None
        if found is not None and found not in out:
            out.append(found)
    return tuple(out)


def _function_table(project: "Project", path: Path, name: str) -> tuple[str, ...]:
    facts = _top_level(path)
    out: list[str] = []
    for text in facts.tables.get(name, ()) if facts is not None else ():
        own = text is not None and text in project.outline(path).functions
        found = (path, text) if own else _located(project, path, text) if text is not None else None
        if found is None or found[1] not in project.outline(found[0]).functions:
            return ()  # (anything else in it: not a table of functions)
        out.append(f"{found[0]}::{found[1]}")
    return tuple(dict.fromkeys(out))


def _modules(project: "Project", path: Path) -> list[Path]:
    """A module and those that import it (where what it defines is used)."""
    return [path, *(p for p in project.importers(path) if p.suffix == ".py")][:MAX_MODULES]


def _registered(project: "Project", path: Path, name: str, functions: bool = False) -> tuple[str, ...]:
    """The classes registered in registry `name` of module `path` (`functions`: the functions, "builders")."""
    facts = _top_level(path)
    if facts is None or name not in facts.assigned:
        return ()
    out: list[str] = []
    for module in _modules(project, path):
        registered = _top_level(module)
        for cls, registry in (registered.builders if functions else registered.registrations) if registered is not None else ():
            if module == path and registry == name or _located(project, module, registry) == (path, name):
                out.append(f"{_real(module)}::{cls}")
    return tuple(dict.fromkeys(out))


def _library_registered(project: "Project", from_file: Path, registry: str) -> tuple[str, ...]:
    """The project classes registered in a library's registry (`@ROI_HEADS_REGISTRY.register()`, the
    name imported from the library), read in the modules whose imports name it."""
    modules = project._import_index(_real(from_file)).by_word.get(registry.partition(".")[2], [])
    out: list[str] = []
    for module in modules if len(modules) <= MAX_MODULES else ():
        facts = _top_level(module)
        for cls, spelled in facts.registrations if facts is not None else ():
            if _library_registry(project, module, spelled) == registry:
                out.append(f"{_real(module)}::{cls}")
    return tuple(dict.fromkeys(out))


def _library_builders(project: "Project", module: Path, spelled: str) -> list[str]:
    """The library functions that build what registry `spelled` of `module` holds, when it is a
    library's (`build_roi_heads` for `ROI_HEADS_REGISTRY` imported from detectron2)."""
    registry = _library_registry(project, module, spelled)
    return [builder for (_, builder), built in LIBRARY_REGISTRY_BUILDERS.items() if built == registry] if registry else []


def _library_registry(project: "Project", module: Path, spelled: str) -> str | None:
    """"library.NAME" for a registry `spelled` in `module` that it imports from a library, else None."""
    head, _, rest = spelled.partition(".")
    library = project.outline(module).exports.get(head, "").partition(".")[0]
    return f"{library}.{(rest or head).rpartition('.')[2]}" if library and not library.startswith(".") else None


def _factory_registered(project: "Project", path: Path, name: str, depth: int = 0) -> tuple[str, ...]:
    """The classes function `name` may build: those of the registry whose class every `return`
    builds (`return SPARSE_INST_CRITERION_REGISTRY.get(name)(cfg, matcher)`), or what the same
    function of each module of a dict of modules builds (`return method_dict[cfg['method']].config.get_trainer(...)`
    with `method_dict = {'gan2d': gan2d, 'giraffe': giraffe}`: each package's `config.get_trainer`,
    returning `training.Trainer(...)`). `depth`: factories followed so far; past the first, a
    factory returning one class (`return training.Trainer(...)`) gives it."""
    facts = _top_level(path)
    for _ in range(3):  # (a package's `__init__` re-exporting it: where it is defined)
        if facts is None or name in facts.factories:
            break
        found = _located(project, path, name)
        if found is None or found == (path, name):
            return ()
        path, name = found
        facts = _top_level(path)
    made = facts.factories.get(name, "") if facts is not None else ""
    if made.endswith(REGISTRY_GET):
        registry = made[: -len(REGISTRY_GET)]
        home = (path, registry) if registry in facts.assigned else _located(project, path, registry)  # type: ignore[union-attr]
        return _registered(project, *home) if home is not None else ()
    table = _MODULE_TABLE.fullmatch(made)
    if table is not None and facts is not None and table[1] in facts.tables and depth < MAX_FACTORY_DEPTH:
        out: list[str] = []
        for module in facts.tables[table[1]]:
            found = _located(project, path, f"{module}.{table[2]}") if module is not None else None
            built_there = _factory_registered(project, *found, depth=depth + 1) if found is not None else ()
            if not built_there:
                return ()  # (a value that is no module, or a function building no known class: nothing)
            out.extend(built_there)
        return tuple(dict.fromkeys(out))
    if depth and made:
        found_class = _class_of(project, path, made)
        return (found_class,) if found_class is not None else ()
    return ()


# what a factory of a dict of modules calls: `method_dict[method].config.get_trainer`
_MODULE_TABLE = re.compile(r"(\w+)\[[^\[\]]*\]\.([\w.]+)")
MAX_FACTORY_DEPTH = 3


def _located(project: "Project", module: Path, spelled: str) -> tuple[Path, str] | None:
    exports = project.outline(module).exports
    head, _, rest = spelled.partition(".")
    found = project.locate(module, ".".join(p for p in (exports.get(head, head), rest) if p))
    return (_real(found[0]), found[1][0]) if found is not None and len(found[1]) == 1 else None


def _derived(project: "Project", path: Path, name: str) -> tuple[str, ...]:
    """A class and its subclasses in the modules that import its module (what a configuration may
    name: `criterion: Criterion = instantiate(cfg.criterion)`)."""
    out = [f"{path}::{name}"]
    for module in _modules(project, path):
        for cls in project.outline(module).classes:
            if (module, cls) == (path, name):
                continue
            bases = class_hierarchy(module, cls, project.outline, project.locate)[1]
            if any((_real(p), n) == (path, name) for p, n in bases):
                out.append(f"{_real(module)}::{cls}")
    return tuple(dict.fromkeys(out))


def choosing_modules(project: "Project", target: Path) -> list[Path]:
    """Modules that may build objects of `target`'s classes without importing it, choosing the class at
    run time: the importers of the registries its classes register in (`@LOSSES.register()`), and
    those of the project bases they derive from that declare an object as one
    (`criterion: Criterion = instantiate(cfg.criterion)`, `-> Criterion`)."""
    state, data = read_state(str(target))
    note(state)
    # (its syntax is read only where a class may be decorated by an object's method: `@LOSSES.register()`)
    facts = _top_level(target) if data is not None and _DECORATED.search(data) else None
    homes: dict[Path, set[str]] = {}  # module -> the bases of it declared (none: a registry's module)
    for name in project.outline(target).classes:
        for path, base in class_hierarchy(target, name, project.outline, project.locate)[1]:
            if _real(path) != target:
                homes.setdefault(_real(path), set()).add(base)
    registries: set[Path] = set()
    # (and the registries of its builder functions: `@MODULE_BUILD_FUNCS.registe_with_name() def build_dino`)
    for _, registry in (*facts.registrations, *facts.builders) if facts is not None else ():
        found = _located(project, target, registry)
        if found is not None and found[0] != target:
            registries.add(found[0])
    out: list[Path] = []
    for _, registry in facts.registrations if facts is not None else ():
        # a library's registry (detectron2's `ROI_HEADS_REGISTRY`): the modules calling its builders
        for builder in _library_builders(project, target, registry):
            callers = project._import_index(target).by_word.get(builder, [])
            out.extend(m for m in callers[:MAX_MODULES] if m != target and m not in out)
    for home in [*registries, *(h for h in homes if h not in registries)]:
        bases = homes.get(home, set()) if home not in registries else set()
        for module in project.importers(home):
            if module == target or module in out:
                continue
            # (an importer of a base module that declares no object as one chooses none)
            if bases and bases.isdisjoint(_declared(module)):
                continue
            out.append(module)
    return out


# a name in an annotation or a return type: `criterion: Criterion`, `-> "losses.Criterion"`
_DECLARATION = re.compile(rb"[:>][ \t]*[\"']?([\w.]+)")


def _declared(path: Path) -> frozenset[str]:
    """Each name a module's text declares something as (each part of `: a.Criterion`), memoised by
    content: asked for every module that may build a base's classes, by every module linted."""
    return per_content(_DECLARED, path, lambda data, _: frozenset(
        part.decode() for token in _DECLARATION.findall(data) for part in token.split(b".") if part
    ), frozenset())


_DECLARED: dict[Path, tuple[object, frozenset[str]]] = {}


def forget_hierarchy() -> None:
    """Forget the modules read (`project.index.forget_projects`)."""
    _TOP_LEVELS.clear()
    _DECLARED.clear()
