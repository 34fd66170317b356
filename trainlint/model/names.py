"""Resolve names to dotted torch paths from a module's own import statements.

Full scope analysis (libcst's QualifiedNameProvider) costs about ten times the parse; a module's
imports plus simple module-level aliases (`ptdtype = torch.bfloat16`) resolve what the rules need.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Callable

import libcst as cst

if TYPE_CHECKING:
    from trainlint.model.summary import ProjectLookup


_NAME, _ATTRIBUTE = cst.Name, cst.Attribute


def dotted(expr: cst.BaseExpression) -> str | None:
    """`self.model.encoder` -> "self.model.encoder"; None for anything but names and attributes."""
    # type tests, not isinstance: libcst's classes are ABCs, and this runs for most expressions
    kind = expr.__class__
    if kind is _NAME:
        return expr.value  # type: ignore[attr-defined]
    parts: list[str] = []
    while kind is _ATTRIBUTE:
        parts.append(expr.attr.value)  # type: ignore[attr-defined]
        expr = expr.value  # type: ignore[attr-defined]
        kind = expr.__class__
    if kind is _NAME:
        parts.append(expr.value)  # type: ignore[attr-defined]
        return ".".join(reversed(parts))
    return None


def keyed(expr: cst.BaseExpression | None) -> str | None:
    """`self.optimizer["generator"]`: a dotted name subscripted by one constant string, as its text (a
    dict of optimizers, one per network); `dotted` of anything else."""
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        key, held = expr.slice[0].slice.value, dotted(expr.value)
        return f"{held}[{key.value}]" if held is not None and isinstance(key, cst.SimpleString) else None
    return dotted(expr) if expr is not None else None


def root_name(expr: cst.BaseExpression) -> str | None:
    """The leftmost name of an attribute/call/subscript chain: `model.fc.parameters()` -> "model"."""
    while True:
        if isinstance(expr, cst.Attribute):
            expr = expr.value
        elif isinstance(expr, cst.Call):
            expr = expr.func
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Name):
            return expr.value
        else:
            return None


def module_path(expr: cst.BaseExpression) -> str:
    """The dotted text of an import's module (`torch.cuda.amp`)."""
    text = dotted(expr)
    return text or ""


_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")


@lru_cache(maxsize=65536)
def tokens(identifier: str) -> tuple[str, ...]:
    """Split `log_interval`, `isLogStep`, `self.print_freq` into lower-case words (memoised: the
    same identifiers are asked about throughout a module)."""
    words: list[str] = []
    for part in re.split(r"[_.\W]+", identifier):
        words.extend(w.lower() for w in _CAMEL.findall(part))
    return tuple(words)


class ImportMap:
    """Local name -> dotted path, built from imports and module-level aliases."""

    def __init__(self, star: Callable[[str], dict[str, str]] | None = None) -> None:
        self._names: dict[str, str] = {}
        # what `from m import *` binds, as the project reads module `m` ({} for a library's)
        self._star = star
        # `d2l = sys.modules[__name__]`: names bound to this very module (`d2l.f()` calls its own `f`)
        self.own_module: set[str] = set()
        self._aliased: dict[str, str] = {}  # module-level aliases seen so far ("" once given two values)
        # names imported inside a function: the functions (by id) that import each
        self._imported_within: dict[str, set[int]] = {}
        # names a function binds to a module it imports by name (`importlib.import_module`): its own
        self._modules_within: dict[tuple[int, str], str] = {}

    def own_name(self, func: cst.BaseExpression) -> str | None:
        """The name of this module that a callee spells: `f` for `f` and for `d2l.f` when `d2l` is
        this module itself; None for anything else."""
        if func.__class__ is cst.Name:
            return func.value  # type: ignore[attr-defined]
        if func.__class__ is cst.Attribute and func.value.__class__ is cst.Name and func.value.value in self.own_module:  # type: ignore[attr-defined]
            return func.attr.value  # type: ignore[attr-defined]
        return None

    def add_import(self, node: cst.Import, within: object = None) -> None:
        """`import a.b as c`; `within`: the function whose body holds the statement, if any."""
        for alias in node.names:
            full = module_path(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._bind(alias.asname.name.value, full, within)
            else:
                head = full.split(".")[0]
                self._bind(head, head, within)

    def _bind(self, local: str, target: str, within: object) -> None:
        self._names[local] = target
        if within is not None:
            self._imported_within.setdefault(local, set()).add(id(within))

    def add_import_from(self, node: cst.ImportFrom, within: object = None) -> None:
        """`from a.b import c as d`: d -> "a.b.c"; relative imports keep their dots (`.utils.c`).
        `within`: the function whose body holds the statement, if any."""
        dots = "." * len(node.relative)
        if node.module is None and not dots:
            return
        module = module_path(node.module) if node.module is not None else ""
        if isinstance(node.names, cst.ImportStar):
            if self._star is not None and module:
                self._names.update(self._star(dots + module))
            return
        # `from .utils import x` -> ".utils.x"; `from . import x` -> ".x"; `from .. import x` -> "..x"
        base = dots + module if module else dots[:-1]
        for alias in node.names:
            if not isinstance(alias.name, cst.Name):
                continue
            local = alias.name.value
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self._bind(local, f"{base}.{alias.name.value}", within)

    @property
    def names(self) -> dict[str, str]:
        """Local name -> dotted path, for every import and alias."""
        return self._names

    def add_alias(self, local: str, target: str) -> None:
        """`ptdtype = torch.bfloat16` makes `ptdtype` resolve to torch.bfloat16. A name given two values
        (`dtype16 = torch.float16` on one branch and `torch.bfloat16` on another, or in the two arms of
        a conditional expression) is either, so it resolves to neither."""
        known = self._aliased.get(local)
        self._aliased[local] = target if known in (None, target) else ""
        if self._aliased[local]:
            self._names[local] = target
        else:
            self._names.pop(local, None)

    def forget(self, local: str) -> None:
        self._names.pop(local, None)

    def resolve(self, expr: cst.BaseExpression) -> str | None:
        """Dotted path of a name or attribute chain whose root is an imported name."""
        text = dotted(expr)
        if text is None:
            return None
        head, _, rest = text.partition(".")
        target = self._names.get(head)
        if target is None:
            return None
        return f"{target}.{rest}" if rest else target

    def bind_module(self, local: str, module: str, within: object) -> None:
        """`model = importlib.import_module("pointnet_cls")`: `local` names that module, in the function
        `within` only (elsewhere the name is another variable), or in the whole module (None)."""
        if within is None:
            self._bind(local, module, None)
        else:
            self._modules_within[(id(within), local)] = module

    def resolve_in(self, expr: cst.BaseExpression, function: object, imported_before: str | None) -> str | None:
        """`resolve`, for a use in `function` that the imports read before it in the text resolve to
        `imported_before`: a name that function imports itself resolves as its own imports before
        the use say (`if cfg.a: from .a import Decoder; d = Decoder()` then `else: from .b import
        Decoder; ...`), not as the last import of the module does; a name it binds to a module
        imported by name (`bind_module`), as that module."""
        text = dotted(expr) or ""
        head, _, rest = text.partition(".")
        module = self._modules_within.get((id(function), head)) if function is not None and self._modules_within else None
        if module is not None:
            return f"{module}.{rest}" if rest else module
        if imported_before is not None and function is not None and id(function) in self._imported_within.get(head, ()):
            return imported_before
        return self.resolve(expr)

    def imports_module(self, prefix: str) -> bool:
        return any(t == prefix or t.startswith(prefix + ".") for t in self._names.values())


def target_names(target: cst.BaseExpression) -> set[str]:
    """The names a `for` or assignment target binds (`p`, `(x, y)`, `[a, (b, c)]`)."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return set().union(*(target_names(e.value) for e in target.elements))
    return set()


def walk_names(expr: cst.BaseExpression, depth: int = 0) -> list[cst.Name]:
    """The names an expression may evaluate to a function through: itself, either branch of a
    conditional or a boolean operation, the callee and arguments of a call (`partial(step, m)`), the
    elements of a tuple or list (read field by field: libcst's `children` rebuilds every node)."""
    if depth > 6:
        return []
    if type(expr) is cst.Name:
        return [expr]
    parts: list[cst.BaseExpression] = []
    if type(expr) is cst.IfExp:
        parts = [expr.body, expr.orelse]
    elif type(expr) is cst.BooleanOperation:
        parts = [expr.left, expr.right]
    elif type(expr) is cst.Call:
        parts = [expr.func, *(a.value for a in expr.args)]
    elif type(expr) in (cst.Tuple, cst.List):
        parts = [e.value for e in expr.elements]  # type: ignore[attr-defined]
    return [n for part in parts for n in walk_names(part, depth + 1)]


def top_level_names(module: cst.Module) -> set[str]:
    """The names a module binds at its top level by `def`, `class` or a plain assignment."""
    out: set[str] = set()
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            out.add(statement.name.value)
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    out.update(t.target.value for t in small.targets if isinstance(t.target, cst.Name))
                elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    out.add(small.target.value)
    return out


def star_reader(module: cst.Module, path: str, project: "ProjectLookup") -> Callable[[str], dict[str, str]]:
    """What a `from m import *` of this module binds, as the project reads `m`, less the names the
    module binds itself at its top level (its own function, not the imported one, is what it calls)."""

    def read(imported: str) -> dict[str, str]:
        names = project.star_names(path, imported)
        if names:
            own = top_level_names(module)
            names = {k: v for k, v in names.items() if k not in own}
        return names

    return read


def is_super(receiver: cst.BaseExpression | None) -> bool:
    """`super()` (or `super(Cls, self)`) as a call's receiver."""
    return type(receiver) is cst.Call and type(receiver.func) is cst.Name and receiver.func.value == "super"  # type: ignore[union-attr]
