"""What `from module import *` binds, read as the interpreter binds it: the names the module lists in
`__all__`, else every public name it defines or imports at its top level."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable

from trainlint.project.python_trees import python_tree
from trainlint.project.watching import note
from trainlint.reading import module_code, read_state

STAR = "*"  # an outline's key for a star import it makes (`*.misc`), to the module it names
MAX_STAR_DEPTH = 3  # `from .a import *` in a module that star-imports another, and so on


def public_names(source: str) -> dict[str, str]:
    """The names `from m import *` takes from a module with this source, each as the module spells
    it: an absolute import's dotted path (`np` -> "numpy", `nn` -> "torch.nn"), "." + the name for
    what the module defines or imports relatively (reached through it), "*" + the module of a
    star import of its own (`from .layers import *`: its names, too)."""
    try:
        tree = python_tree(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    names: dict[str, str] = {}
    listed: set[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    names[head] = head
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    names[f"*{base}"] = base
                elif node.level:
                    names[alias.asname or alias.name] = "." + (alias.asname or alias.name)
                elif node.module:
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = "." + node.name
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts):
                listed = {e.value for e in node.value.elts}  # type: ignore[attr-defined]
    if listed is not None:
        return {k: v for k, v in names.items() if k in listed or k.startswith("*")}
    return {k: v for k, v in names.items() if not k.startswith("_")}


def star_reached(
    target: Path, direct: list[Path], importers_of: Callable[[Path], list[Path]], resolve: Callable[[Path, tuple[tuple[str, int], ...]], frozenset[Path]], depth: int = 0,
) -> list[Path]:
    """The files that bind `target`'s names through star imports of a module that star-imports it
    (`from .base import *` of a `base.py` doing `from ..utils import *`), to `MAX_STAR_DEPTH` modules:
    `direct` are `target`'s own importers, `importers_of` gives another module's, `resolve` the files
    an importer's (module, level) imports name."""
    reached: list[Path] = []
    for re_exporter in [f for f in direct if depth < MAX_STAR_DEPTH and _star_imports(f, target, resolve)]:
        theirs = importers_of(re_exporter)
        found = [f for f in theirs if _star_imports(f, re_exporter, resolve)] + star_reached(re_exporter, theirs, importers_of, resolve, depth + 1)
        reached.extend(f for f in found if f != target and f not in reached)
    return reached


def _star_imports(importer: Path, module: Path, resolve: Callable[[Path, tuple[tuple[str, int], ...]], frozenset[Path]]) -> bool:
    """Whether `importer` does `from module import *`: it binds every public name `module` binds."""
    state, data = read_state(str(importer))
    note(state)
    if data is None or b"import *" not in data:
        return False
    stars = tuple((s.lstrip("."), len(s) - len(s.lstrip("."))) for key, s in public_names(module_code(importer.name, data)).items() if key.startswith(STAR))
    return bool(stars) and module in resolve(importer, stars)
