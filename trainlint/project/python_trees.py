"""A module's tree as Python's own parser reads it, parsed once for the readers that need it (its
outline, the instances it passes, the modules it imports), which ask one after another."""

from __future__ import annotations

import ast
from functools import lru_cache
from itertools import chain
from typing import Iterator


@lru_cache(maxsize=8)  # (its readers ask one after another; a tree is ~10x its source)
def python_tree(source: str) -> ast.Module:
    """`ast.parse(source)` (raises as it does), shared: the tree must not be changed."""
    return ast.parse(source)


# the fields that never hold a node worth walking: names and flags, and the contexts and operators
# (`Load`, `Add`, `Eq`), nodes that no reader of a walk looks for
_NOT_WALKED = frozenset({"ctx", "op", "ops", "id", "attr", "arg", "name", "module", "level", "kind", "type_comment", "conversion", "is_async", "simple"})
_WALKED: dict[type, tuple[str, ...]] = {}


def children(node: ast.AST) -> list[ast.AST]:
    """`ast.iter_child_nodes(node)`, in its order, without contexts and operators."""
    kind = node.__class__
    fields = _WALKED.get(kind)
    if fields is None:
        fields = _WALKED[kind] = tuple(f for f in kind._fields if f not in _NOT_WALKED)
    out: list[ast.AST] = []
    for field in fields:
        value = getattr(node, field, None)
        if value.__class__ is list:
            out.extend([item for item in value if isinstance(item, ast.AST)])
        elif isinstance(value, ast.AST):
            out.append(value)
    return out


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk(node)`, in its order (breadth first), without contexts and operators: an outline
    walks every function of every module a project analysis touches, and `ast.walk`'s generic
    iteration over fields was a tenth of a cold run; this takes half the time. The nodes below are
    kept on the node walked (its readers walk the same function one after another; the tree is never
    changed), without the node itself: no cycle keeps a tree alive for the garbage collector."""
    below = node.__dict__.get("_below")
    if below is None:
        below = children(node)
        i = 0
        while i < len(below):
            below.extend(children(below[i]))
            i += 1
        node._below = below  # type: ignore[attr-defined]
    return chain((node,), below)
