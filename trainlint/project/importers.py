"""Which files of a project import which modules (the index the project phase reads to find the
modules that may call a file's functions every step, see `Project.step_seeds`), and what a module
with no training code offers to the modules that import it, read without parsing it with libcst."""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from trainlint.model.class_attributes import FLAG_ATTRIBUTES
from trainlint.project.python_trees import python_tree, walk
from trainlint.model.lattice import HOST, Kind, Value
from trainlint.model.modules_by_name import modules_named
from trainlint.model.saved_arguments import FRAME_READERS
from trainlint.model.summary import EMPTY, ClassSummary, FunctionSummary, ModuleSummary, registry_root
from trainlint.project.computed_returns import numpy_modules, returned_computation, torch_modules
from trainlint.project.outline_moves import moves_fact
from trainlint.project.outline_effects import add_effects, bound_targets as _targets, explicit_parameters, imported_names, own_statements as _own_statements, spelled as _spelled
from trainlint.project.outline_returns import ReturnedClasses
from trainlint.project.roots import IMPORT_TEXT
from trainlint.project.star_imports import STAR, star_reached
from trainlint.project.watching import note, unwatched
from trainlint.reading import MAX_MODULE_BYTES, MAX_PROJECT_MODULES, State, module_code, project_modules, project_state, read_regular, read_state

MAX_IMPORTERS = 40
MAX_OUTLINED_IMPORTERS = 160  # importers with no training code, read for the objects they pass
# a module containing none of these can say nothing a training step needs
TRAINING_TOKENS = (
    "backward", ".step(", "zero_grad", "clip_grad", "GradScaler", ".scale(", "synchronize", ".item()",
    ".train(", "optim", "half()", "bfloat16", "float16", "torch_dtype",
)
# a module without these has nothing a summary beyond its outline says: the training tokens, what
# the parameter facts read (a function evaluating a model under `no_grad`, a loader's sampler), and
# the host reads of what a caller passes (`reads_arguments`: `targets.cpu().numpy().tolist()`)
SUMMARISED_TOKENS = (*TRAINING_TOKENS, "no_grad", "inference_mode", "DistributedSampler", "set_epoch", ".cpu()", ".tolist()")
# torch's factories that build a tensor from sizes alone (not `torch.tensor(data)`, not `*_like`)
HOST_BUILT = frozenset({"zeros", "ones", "full", "arange", "eye", "empty", "linspace", "rand", "randn", "randint", "randperm"})
MAX_CHAINS = 4
MAX_PACKAGE_LEVELS = 3  # the packages above a module whose importers may name what it defines


@dataclass
class ImportIndex:
    """Which files of a project import which names (every word of each imported dotted name)."""

    by_word: dict[str, list[Path]] = field(default_factory=dict)
    training: set[Path] = field(default_factory=set)  # the files with training code (TRAINING_TOKENS)
    # the names in the project's folders, as one state: a module added or removed anywhere
    # invalidates what used the index
    listings: list[State] = field(default_factory=list)
    # each file's imports as (dotted module, leading dots), every module each statement may name
    imports: dict[Path, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    named: dict[Path, frozenset[Path]] = field(default_factory=dict)  # the local modules they name, once asked
    # (module, class) -> whether the project may build it (`hierarchy.built`), and the states read
    built: dict[tuple[Path, str], tuple[bool, tuple[State, ...]]] = field(default_factory=dict)
    methods: dict[str, list[Path]] = field(default_factory=dict)  # a method's name -> the files defining one
    # a method's name -> the classes defining it that the project builds (`hierarchy.classes_defining`)
    defining: dict[str, tuple[tuple[str, ...], tuple[State, ...]]] = field(default_factory=dict)
    # a method's name -> the files whose text calls one (`calling_by_text`), and the states read: once asked
    called: tuple[dict[str, list[Path]], tuple[State, ...]] | None = None
    modules: int = 0  # how many modules were read
    read: dict[Path, tuple[int, ...]] = field(default_factory=dict)  # each module's times, size and inode as read

    def current(self, root: Path) -> bool:
        """Whether the project is still as this index read it: the same names in its folders and the
        same modules, by their times and sizes (a long-lived process asks before each lint instead of
        reading every module again: the editor's buffer changes, the files on disk seldom do). The
        change time is among them: a write moves it even when the modification time is set back."""
        if not self.listings or project_state(str(root)) != self.listings[0]:
            return False
        try:
            return all(_signature(os.stat(file)) == seen for file, seen in self.read.items())
        except OSError:
            return False


def _signature(info: os.stat_result) -> tuple[int, ...]:
    return info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino


def import_index(root: Path) -> ImportIndex:
    """Read every module of the project once (bounded), noting each import statement's words."""
    index = ImportIndex(listings=[project_state(str(root))])
    count = 0
    for folder, files, _ in project_modules(root):
        for name in files:
            if not name.endswith((".py", ".ipynb")):  # (a notebook calls the project's functions too)
                continue
            count += 1
            if count > MAX_PROJECT_MODULES:
                return index
            index.modules = count
            try:
                file = Path(folder, name).resolve()
                seen = _signature(os.stat(file))
            except (OSError, RuntimeError):  # a symlink loop, a name the system refuses: not a module
                continue
            index.read[file] = seen
            data = read_regular(str(file), MAX_MODULE_BYTES)  # a FIFO or a device is never read
            if data is None:
                continue
            text = module_code(name, data)
            words: set[str] = set()
            named: dict[tuple[str, int], None] = {}
            for match in IMPORT_TEXT.finditer(text):
                dots, module, names = match.group(1, 2, 3)
                words.update(w for w in (module or "").split(".") if w)
                for part in (names or "").split(","):
                    dotted = part.split(" as ")[0].strip()
                    words.update(w for w in dotted.split(".") if w.isidentifier())
                    parts = dotted.split(".")
                    named.update(dict.fromkeys((".".join(parts[:n]), 0) for n in range(len(parts), 0, -1) if dotted))
                if module is not None:  # `from pkg import mod`: the names imported may be modules
                    line_end = text.find("\n", match.end())
                    rest = text[match.end(): line_end if line_end >= 0 else len(text)]
                    imported = [w.strip("() ").split(" as ")[0] for w in rest.split(",")]
                    words.update(w for w in imported if w.isidentifier())
                    level = len(dots or "")
                    named[(module, level)] = None
                    if rest.lstrip().startswith("("):  # `from pkg import (a,\n b)`: the names below too
                        start = text.find("(", match.end())
                        listed = re.sub(r"#[^\n]*", "", text[start + 1: text.find(")", start)])
                        imported = [w.strip().split(" as ")[0].strip() for w in listed.split(",")]
                    named.update(dict.fromkeys((f"{module}.{w}" if module else w, level) for w in imported if w.isidentifier()))
                    if "\\" in rest:  # (names on the lines below: any module of that package)
                        named[(f"{module}.*" if module else "*", level)] = None
            for imported in modules_named(text):  # `model = importlib.import_module(args.model)`
                words.update(imported.split("."))
                named[(imported, 0)] = None
            index.imports[file] = tuple(named)
            for word in words:
                index.by_word.setdefault(word, []).append(file)
            for method in set(_METHOD_DEFINED.findall(text)):
                index.methods.setdefault(method, []).append(file)
            if any(token in text for token in TRAINING_TOKENS):
                index.training.add(file)
    return index


_METHOD_DEFINED = re.compile(r"^[ \t]+def[ \t]+([A-Za-z]\w*)", re.M)  # (an indented `def`: a method, or a nested function)


def module_outline(source: str, path: str = "") -> ModuleSummary:
    """What a module with no training code of its own offers, read with Python's own fast parser: its
    top-level functions and classes (doing nothing a step needs; a class deriving from a `...Module`
    or defining `forward` is a module whose `forward` runs when an instance is called), and the names
    it imports (for re-exports)."""
    try:
        tree = python_tree(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return EMPTY
    exports: dict[str, str] = {}
    imported: dict[str, str] = {}  # `import a.b as c`: c -> a.b; `import a.b`: a -> a
    functions: dict[str, FunctionSummary] = {}
    classes: dict[str, ClassSummary] = {}
    factories: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]] = []  # with the class defining it
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            exports.update(imported_names(node))
            if any(alias.name == "*" for alias in node.names):  # (expanded by the project, which reads that module)
                exports[f"{STAR}{'.' * node.level}{node.module or ''}"] = "." * node.level + (node.module or "")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = FunctionSummary(
                where=f"`{node.name}`", returns_argument=_returned_parameter(node, False), adds_methods=_adds_methods(node),
                calls_parameters=_called_parameters(node), parameter_facts=moves_fact(node, False), returns_computed=returned_computation(node, False, torch_modules(imported, exports), numpy_modules(imported, exports)),
            )
            factories.append((node, ""))
        elif isinstance(node, ast.Assign) and ast.unparse(node.value) == "sys.modules[__name__]":
            imported.update((t.id, "") for t in node.targets if isinstance(t, ast.Name))  # (the module itself)
        elif isinstance(node, ast.ClassDef):
            defs = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
            own = {m.name for m in defs}
            torch_names, numpy_names = torch_modules(imported, exports), numpy_modules(imported, exports)  # (once per class, not per method)
            methods = {
                m.name: FunctionSummary(
                    where=f"`{node.name}.{m.name}`", returns_argument=_returned_parameter(m, True), self_calls=_self_calls(m, own), self_methods=_self_calls(m, own, True),
                    saves_arguments=_saves_arguments(m), calls_parameters=_called_parameters(m, True), parameter_facts=moves_fact(m, True),
                    returns_computed=returned_computation(m, True, torch_names, numpy_names),
                )
                for m in defs
            }
            bases = [ast.unparse(b) for b in node.bases]
            # (a class with no base but `object` is no `nn.Module`, whatever it names its methods: a `forward` of numpy code)
            module = any(b.endswith(("Module", "Model")) for b in bases) or "forward" in methods and any(b not in ("object", "ABC", "abc.ABC") for b in bases)
            spelled = tuple(_spelled(b, exports, imported) for b in bases if _dotted(b))
            classes[node.name] = ClassSummary(Kind.MODULE if module else Kind.OBJECT, methods, spelled, holds=_held_parameters(defs))
            factories.extend((m, node.name) for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)))
    for node in tree.body:  # `@Plugin("name").register()` on a definition: registered under Plugin
        for decorator in getattr(node, "decorator_list", ()):
            root = registry_root(decorator)
            if root in classes:
                classes[root] = replace(classes[root], registered=(*classes[root].registered, node.name))
    owned: dict[str, set[str]] = {}  # class -> the gradient-flag names it mentions as its own
    for node in tree.body if path else ():
        if isinstance(node, ast.ClassDef) and node.name in classes:
            held = _held_instances(node, classes, path, lambda name: _spelled(name, exports, imported), owned.setdefault(node.name, set()))
            classes[node.name] = replace(classes[node.name], attributes=held)
    for name, cls in classes.items() if path else ():
        if cls.kind is Kind.MODULE:
            classes[name] = replace(cls, lacks=_lacked_flags(name, classes, owned, set()))
    attached = tuple(
        (_spelled(ast.unparse(d.func), exports, imported), _spelled(ast.unparse(d.args[0]), exports, imported), f"{ast.unparse(d.args[0])}.{node.name}")
        for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for d in node.decorator_list
        if isinstance(d, ast.Call) and len(d.args) == 1 and not d.keywords and _dotted(ast.unparse(d.func)) and _dotted(ast.unparse(d.args[0]))
    )
    torch_names = {name for name, full in imported.items() if full == "torch"}
    returns = ReturnedClasses(factories, classes, exports, path, imported)
    for node, owner in factories if path else ():
        returned = returns.of(node, owner) or _returned_host_tensor(node, torch_names)
        if returned is None:
            continue
        qualified = f"{owner}.{node.name}" if owner else node.name
        table = classes[owner].methods if owner else functions
        table[node.name] = replace(table[node.name], returns=returned, defined=(path, qualified))
    add_effects(tree, functions, classes, imported, exports)
    return ModuleSummary(functions, classes, exports, outline=True, attached=attached)


def _adds_methods(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """`def add_to_class(Class): def wrapper(obj): setattr(Class, obj.__name__, obj)` (`adds_methods`)."""
    params = [a.arg for a in fn.args.args]
    for inner in fn.body:
        if isinstance(inner, ast.FunctionDef) and inner.args.args and params:
            obj = inner.args.args[0].arg
            for node in walk(inner):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and len(node.args) == 3:
                    if [ast.unparse(a) for a in node.args] == [params[0], f"{obj}.__name__", obj]:
                        return True
    return False


def _saves_arguments(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A method reading its caller's frame and `setattr(self, ...)`ing what it finds (`saves_arguments`)."""
    sets = reads = False
    for node in walk(method):  # (one walk, names read without `ast.unparse`: a module has thousands of calls)
        if isinstance(node, ast.Call):
            called = _dotted_name(node.func)
            if called == "setattr" and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "self":
                sets = True
            elif called in FRAME_READERS:
                reads = True
    return sets and reads


def _dotted_name(node: ast.expr) -> str | None:
    """`a.b.c` as written, for a name or attributes of one; None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _held_instances(
    cls: ast.ClassDef, classes: dict[str, ClassSummary], path: str, spelled: Callable[[str], str], owned: set[str]
) -> dict[str, Value]:
    """`self.lstm = Lstm(...)` in a method of `cls`, with `Lstm` a class of this module, or `self.outc =
    nn.Conv2d(...)` (a `torch.nn` layer or Parameter, or a class of another module, `spelled` in full
    through the imports): the attributes its instances hold an object of one such class in (every
    assignment builds one). Adds to `owned` the gradient-flag names (`FLAG_ATTRIBUTES`) the class
    mentions as its own: a method of that name, a name bound, `self.<name>` (the same walk)."""
    built: dict[str, set[str | None]] = {}
    for node in walk(cls):
        kind = node.__class__
        if kind is ast.Attribute:
            if node.attr in FLAG_ATTRIBUTES and isinstance(node.value, ast.Name) and node.value.id == "self":  # type: ignore[attr-defined]
                owned.add(node.attr)  # type: ignore[attr-defined]
            continue
        if kind is ast.Name:
            if node.id in FLAG_ATTRIBUTES and isinstance(node.ctx, ast.Store):  # type: ignore[attr-defined]
                owned.add(node.id)  # type: ignore[attr-defined]
            continue
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef) and node.name in FLAG_ATTRIBUTES:  # type: ignore[attr-defined]
            owned.add(node.name)  # type: ignore[attr-defined]
        if kind is not ast.Assign:
            continue
        for target in node.targets:  # type: ignore[attr-defined]
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                call = node.value  # type: ignore[attr-defined]
                func = ast.unparse(call.func) if isinstance(call, ast.Call) else None
                func = func if func and _dotted(func) else None
                if func in classes:
                    built.setdefault(target.attr, set()).add(f"{path}::{func}")
                    continue
                full = spelled(func) if func else ""
                imported = full != func and full.rpartition(".")[2][:1].isupper() and not full.startswith("torch.nn.functional")
                built.setdefault(target.attr, set()).add(full if imported else None)
    # a class of another module as the imports spell it: the module reading the attribute finds it
    # (and drops a library's), `model.symbols.held_attribute`
    return {
        attr: Value(classes[origin.partition("::")[2]].kind if "::" in origin else Kind.MODULE if origin.startswith("torch.nn.") else Kind.OBJECT, origin=origin)
        for attr, names in built.items() if len(names) == 1 and (origin := next(iter(names))) is not None
    }


def _lacked_flags(name: str, classes: dict[str, ClassSummary], owned: dict[str, set[str]], seen: set[str]) -> tuple[str, ...]:
    """`ClassSummary.lacks` of class `name`: the flag names neither it nor a base of its module owns,
    when every other base is `torch.nn`'s (else nothing: a base elsewhere may define them)."""
    seen.add(name)
    lacking = [a for a in FLAG_ATTRIBUTES if a not in owned.get(name, ())]
    for base in classes[name].bases:
        if base in classes and "." not in base:
            inherited = _lacked_flags(base, classes, owned, seen) if base not in seen else ()
            lacking = [a for a in lacking if a in inherited]
        elif not base.startswith("torch.nn."):
            return ()
    return tuple(lacking)


def _returned_host_tensor(fn: ast.FunctionDef | ast.AsyncFunctionDef, torch_names: set[str]) -> Value | None:
    """A function whose every `return` gives a tensor a torch factory builds on the host from no data
    (`return torch.randn((n, self.latent_dim))`, no `device=`): such a tensor, moved by its callers."""
    built: set[str] = set()
    for node in _own_statements(fn):
        if not isinstance(node, ast.Return):
            continue
        call = node.value
        func = call.func if isinstance(call, ast.Call) else None
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in torch_names):
            return None
        if func.attr not in HOST_BUILT or any(k.arg in ("device", None) for k in call.keywords):  # type: ignore[union-attr]
            return None
        built.add(func.attr)
    if len(built) != 1:
        return None
    return Value(Kind.TENSOR, HOST, False, origin=f"torch.{built.pop()}")


def _dotted(text: str) -> bool:
    return all(part.isidentifier() for part in text.split("."))


def _self_calls(method: ast.FunctionDef | ast.AsyncFunctionDef, methods: set[str], own: bool = False) -> tuple[str, ...]:
    """The attributes of `self` a method calls on every call (`out = self.vae_layer(x)` in its body,
    not under an `if`, a loop or a `try`), other than its class's own methods; `own`: those of its
    class's methods instead (`mean, log_std = self.forward(state)` in a policy's `sample`)."""
    found: list[str] = []
    for statement in method.body:
        if isinstance(statement, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)):
            for node in walk(statement):
                func = node.func if isinstance(node, ast.Call) else None
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" and (func.attr in methods) is own:
                    found.append(func.attr)
    return tuple(dict.fromkeys(found))


def _held_parameters(methods: list[ast.FunctionDef | ast.AsyncFunctionDef]) -> tuple[str, ...]:
    """The attributes `__init__` sets from its parameters, never rebinding them (`ClassSummary.holds`)."""
    init = next((m for m in methods if m.name == "__init__"), None)
    if init is None:
        return ()
    params = [a.arg for a in [*init.args.posonlyargs, *init.args.args][1:]]
    found: list[str] = []
    stored: set[str] = set()
    for node in walk(init):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stored.add(node.id)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Name) and node.value.id in params:
            target = node.targets[0]
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                found.append(f"{target.attr}={params.index(node.value.id)} {node.value.id}")
    return tuple(h for h in dict.fromkeys(found) if h.rpartition(" ")[2] not in stored)


def _returned_parameter(fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> str | None:
    """"0 model" when every `return` gives back parameter `model`, never rebound (`FunctionSummary`)."""
    returns: list[ast.Return] = []
    stores: set[str] = set()
    for node in _own_statements(fn):
        if isinstance(node, ast.Return):
            returns.append(node)
        for target in _targets(node):
            stores.update(n.id for n in walk(target) if isinstance(n, ast.Name))
    names = {r.value.id for r in returns if isinstance(r.value, ast.Name)}
    if not returns or len(names) != 1 or any(not isinstance(r.value, ast.Name) for r in returns):
        return None
    name = names.pop()
    params = explicit_parameters(fn, method)
    if name not in params or name in stores:
        return None
    return f"{params.index(name)} {name}"


def _called_parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool = False) -> tuple[str, ...]:
    """The parameters a function (a `method`) calls on every call, never rebinding them (`FunctionSummary.
    calls_parameters`): `fn(*args)` in a statement of its body, outside any `if`, loop or `try`."""
    params = explicit_parameters(fn, method)
    stores = {n.id for node in _own_statements(fn) for t in _targets(node) for n in walk(t) if isinstance(n, ast.Name)}
    called: list[str] = []
    for statement in fn.body:
        if isinstance(statement, (ast.Expr, ast.Assign, ast.Return, ast.AnnAssign)) and statement.value is not None:
            for node in walk(statement.value):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in params and node.func.id not in stores:
                    called.append(node.func.id)
    return tuple(f"{params.index(n)} {n}" for n in dict.fromkeys(called))


def pending_bytes(
    locate: Callable[[Path, str], "tuple[Path, list[str]] | None"], held: Callable[[Path], bool], importer: Path, source: str
) -> int:
    """The size in bytes of the project's modules with training code that module `importer` (its
    text `source`) imports (found by `locate`) and that are not `held` (no summary yet): what its first full analysis
    has to summarise, one level deep (read from the text, an estimate). The language server asks it
    of a file just opened, to show its findings alone first where that analysis would be long."""
    found: set[Path] = set()
    for match in IMPORT_TEXT.finditer(source):
        dots, module, names = match.group(1, 2, 3)
        if module or dots:
            spelled = [f"{dots or ''}{module}"]
        else:
            spelled = [n.split()[0] for n in names.split(",") if n.strip()]
        for name in spelled:
            # a name inside the module stands for what the import takes from it
            located = locate(importer, f"{name}.*") if name.strip(".") else None
            if located is not None:
                found.add(located[0])
    total = 0
    for path in found:
        if held(path):
            continue
        _, data = read_state(str(path))
        if data is not None and any(token.encode() in data for token in SUMMARISED_TOKENS):
            total += len(data)
    return total


def importers_in(
    index: ImportIndex,
    target: Path,
    outline: Callable[[Path], ModuleSummary],
    resolve: Callable[[Path, tuple[tuple[str, int], ...]], frozenset[Path]],
    star: bool = True,
) -> tuple[list[Path], frozenset[Path]]:
    """The files of `index` whose imports name module `target` (`Project.importers`): those whose
    import statements name a word of it and one of which `resolve`s to it as the file's interpreter finds
    modules (`torch.distributed` in a file of the torch package is the library's, not the local
    `distributed/`), and those that star-import a module star-importing it (`from .base import *` of
    a `base.py` doing `from ..utils import *`); training code first, and those among them with training code."""
    word = target.parent.name if target.name == "__init__.py" else target.stem

    def imports(importer: Path, module: Path) -> bool:
        named = index.named.get(importer)
        if named is None:
            with unwatched():  # (the project's listing, noted with the index, covers the paths probed)
                named = index.named[importer] = resolve(importer, index.imports.get(importer, (("*", 0),)))
        return module in named or Path("*") in named

    out = [f for f in index.by_word.get(word, ()) if f != target and imports(f, target)]
    package, names = target.parent, [n.encode() for n in (*outline(target).functions, *outline(target).classes)] if target.name != "__init__.py" else []
    for _ in range(MAX_PACKAGE_LEVELS if names else 0):
        # `from pkg import Class` through the package's __init__ (or a package above it re-exporting it:
        # `from models import build_detr` of `models/detr/detr.py`); a package's name is a common word
        # (`utils`): such an importer must also name something the module defines
        if not (package / "__init__.py").is_file():
            break
        for importer in index.by_word.get(package.name, ()):
            if importer == target or importer in out or len(out) >= MAX_IMPORTERS + MAX_OUTLINED_IMPORTERS:
                continue
            if not imports(importer, package / "__init__.py"):
                continue
            state, data = read_state(str(importer))
            note(state)
            if data is not None and (b"import *" in data or any(name in data for name in names)):
                out.append(importer)
        package = package.parent
    if star:
        def theirs(module: Path) -> list[Path]:
            return importers_in(index, module, outline, resolve, star=False)[0]

        out.extend(f for f in star_reached(target, out, theirs, resolve) if f not in out)
    # those with training code first (they may call it every step), notebooks after modules
    out.sort(key=lambda f: (f not in index.training, f.suffix == ".ipynb"))
    return out, frozenset(f for f in out if f in index.training)


def set_default_device(files: list[Path]) -> bool:
    """Whether one of `files` (the scripts importing a module) may make a CUDA device the default for
    new tensors (`torch.set_default_tensor_type("torch.cuda.FloatTensor")`): a legacy `torch.Tensor(n)`
    in the module it imports is then built on the device (read from the text, each file noted)."""
    for file in files:
        state, data = read_state(str(file))
        note(state)
        # (a default named as the CPU's changes nothing: `set_default_tensor_type(torch.DoubleTensor)`)
        if data is not None and any(b"cpu" not in m or b"cuda" in m for m in _SETS_DEFAULT.findall(data)):
            return True
    return False


_SETS_DEFAULT = re.compile(rb"set_default_(?:tensor_type|device)\(([^)\n]*)")
