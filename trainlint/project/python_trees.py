"""A module's tree as Python's own parser reads it, parsed once for the readers that need it (its
outline, the instances it passes, the modules it imports), which ask one after another."""

from __future__ import annotations

import ast
from functools import lru_cache


@lru_cache(maxsize=8)  # (its readers ask one after another; a tree is ~10x its source)
def python_tree(source: str) -> ast.Module:
    """`ast.parse(source)` (raises as it does), shared: the tree must not be changed."""
    return ast.parse(source)


def walk(node: ast.AST) -> list[ast.AST]:
    """`ast.walk(node)` as a list: the same nodes in the same order (breadth first, fields in order).
    Kept on the node, for the outline's readers walk the same module, classes and functions one
    after another (a module's tree is walked by each of them; `ast.walk`'s generators cost more than
    the list)."""
    try:
        return node._trainlint_walk  # type: ignore[attr-defined,no-any-return]
    except AttributeError:
        pass
    nodes = [node]
    at = 0
    ast_node = ast.AST
    while at < len(nodes):
        current = nodes[at]
        at += 1
        for name in current._fields:
            child = getattr(current, name, None)
            if isinstance(child, ast_node):
                nodes.append(child)
            elif isinstance(child, list):
                nodes.extend(item for item in child if isinstance(item, ast_node))
    node._trainlint_walk = nodes  # type: ignore[attr-defined]
    return nodes
