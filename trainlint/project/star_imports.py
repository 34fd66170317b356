"""What `from module import *` binds, read as the interpreter binds it: the names the module lists in
`__all__`, else every public name it defines or imports at its top level."""

from __future__ import annotations

import ast

from trainlint.project.python_trees import python_tree

STAR = "*"  # an outline's key for a star import it makes (`*.misc`), to the module it names


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
