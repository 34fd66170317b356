"""A module's tree as Python's own parser reads it, parsed once for the readers that need it (its
outline, the instances it passes, the modules it imports), which ask one after another."""

from __future__ import annotations

import ast
from functools import lru_cache


@lru_cache(maxsize=8)  # (its readers ask one after another; a tree is ~10x its source)
def python_tree(source: str) -> ast.Module:
    """`ast.parse(source)` (raises as it does), shared: the tree must not be changed."""
    return ast.parse(source)
