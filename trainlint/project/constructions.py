"""What the constructions of a project class give one of its constructor's parameters: taming's
`VectorQuantizer2(n_e, e_dim, beta=0.25)` leaves `remap=None`, so every object keeps `self.remap` None
and its `if self.remap is not None:` branches never run. Read with Python's own parser from the class's
module and the modules naming it (the import index), memoised per content."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from trainlint.project.hierarchy import per_content
from trainlint.project.python_trees import python_tree, walk
from trainlint.reading import module_code

MAX_MODULES = 24  # modules naming the class that are read; more say nothing
DEFAULT = "default"  # what a construction that does not give the parameter leaves it
Naming = Callable[[Path, str], "list[Path]"]


@dataclass
class _Uses:
    """How one module uses each class name: what its constructions give by keyword and how many
    positionals they pass (with `*`/`**`: "?"), the names it imports under another name, and the names
    it uses otherwise (hands on, derives from: built elsewhere)."""

    built: dict[str, list[tuple[dict[str, ast.expr], int, bool, dict[str, tuple[str, int, object]]]]] = field(default_factory=dict)
    aliases: dict[str, set[str]] = field(default_factory=dict)
    other: set[str] = field(default_factory=set)


_USES: dict[Path, tuple[object, _Uses | None]] = {}


def constructed_values(naming: Naming | None, target: Path, name: str, param: str, index: int, hops: int = 0) -> frozenset[object] | None:
    """What the constructions of class `name` of module `target` give parameter `param` (explicit
    parameter `index` of its `__init__`): literals (None, True, False), and `DEFAULT` for those that give
    none; a parameter of another constructor handed on as it came (`BboxLoss(n, use_dfl=use_dfl)` in
    `ComputeLoss.__init__`) gives what that one's constructions give; none for a class never built.
    None where that cannot be told: the name handed on or derived from, a module unread, too many
    modules, another value, or no `naming` (the modules whose imports name a word: a summary has no
    import index of its own)."""
    if naming is None or hops > 2:
        return None
    modules = [target, *(m for m in naming(target, name) if m != target)]
    if len(modules) > MAX_MODULES:
        return None
    found: set[object] = set()
    for module in modules:
        uses = _uses(module)
        spelled = {name, *uses.aliases.get(name, ())} if uses is not None else set()
        if uses is None or spelled & uses.other:
            return None
        for keywords, positionals, starred, enclosing in (c for s in spelled for c in uses.built.get(s, ())):
            given = keywords.get(param)
            if starred or positionals > index:
                return None
            if given is None:
                found.add(DEFAULT)
            elif isinstance(given, ast.Constant) and given.value in (None, True, False):
                found.add(given.value)
            elif isinstance(given, ast.Name) and given.id in enclosing:
                owner, place, default = enclosing[given.id]
                handed = constructed_values(naming, module, owner, given.id, place, hops + 1)
                if handed is None:
                    return None
                found |= {default if v == DEFAULT else v for v in handed}
            else:
                return None
    return frozenset(found)  # (empty: never built, nor named but in its own definition)


def _uses(path: Path) -> _Uses | None:
    return per_content(_USES, path, lambda data, _: _read(module_code(str(path), data)), None)


def _read(source: str) -> _Uses | None:
    try:
        tree = python_tree(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    uses = _Uses()
    called: set[int] = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for init in (f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"):
            for node in walk(init):
                if isinstance(node, ast.Call):
                    _construction(node, uses, called, _handing(init, cls.name))
    for node in walk(tree):
        if isinstance(node, ast.Call) and id(node.func) not in called:
            _construction(node, uses, called, None)
    for node in walk(tree):  # (`super(Quantizer, self)`, `isinstance(q, Quantizer)` build nothing)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("super", "isinstance", "issubclass"):
            called.update(id(a) for a in node.args)
    for node in walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.asname:
                    uses.aliases.setdefault(alias.name, set()).add(alias.asname)
        elif isinstance(node, ast.ClassDef):
            uses.other.update(b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute)))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in called:
            uses.other.add(node.id)  # (`partial(Quantizer, remap=...)`, `{"vq": Quantizer}`: built elsewhere)
    return uses


def _handing(init: ast.FunctionDef, cls: str) -> Callable[[str], tuple[str, int, object] | None]:
    """For a name a construction in `cls.__init__` gives: (class, place, default) where it is a
    parameter of that `__init__` with a literal default that the function never binds again."""
    args = [a.arg for a in init.args.args][1:]
    defaults = dict(zip(args[len(args) - len(init.args.defaults):], init.args.defaults))
    bound = {t.id for n in walk(init) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
             for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}

    def handed(name: str) -> tuple[str, int, object] | None:
        default = defaults.get(name)
        if not isinstance(default, ast.Constant) or default.value not in (None, True, False) or name in bound:
            return None
        return cls, args.index(name), default.value

    return handed


def _construction(node: ast.Call, uses: _Uses, called: set[int], handing: Callable[[str], tuple[str, int, object] | None] | None) -> None:
    name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else None
    if name is None:
        return
    called.add(id(node.func))
    starred = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
    keywords = {k.arg: k.value for k in node.keywords if k.arg}
    handed = {v.id: h for v in keywords.values() if isinstance(v, ast.Name) and handing is not None and (h := handing(v.id)) is not None}
    uses.built.setdefault(name, []).append((keywords, len(node.args), starred, handed))


def forget_constructions() -> None:
    """Forget the modules read (`shared.forget_projects`)."""
    _USES.clear()
