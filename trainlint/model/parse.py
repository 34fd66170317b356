"""Parsing with libcst, without validating again what its own parser built, and without parsing a
file twice in a row: a module summarised for the files that import it is often linted next."""

from __future__ import annotations

import os
from collections import OrderedDict

import libcst as cst

# the most recently parsed trees, by file; bounded by their source size (a tree takes ~80x in
# memory: ~80 MB a process). A project analysis asks for a module at two depths of summaries and
# for its own lint: a budget that holds a package's worth of modules parses each about once
_RECENT: OrderedDict[str, tuple[str, cst.Module]] = OrderedDict()
_RECENT_BYTES = 1_000_000


def _unchecked(self: cst.CSTNode) -> None:
    pass


def parse_module(source: str) -> cst.Module:
    """`libcst.parse_module`, minus each node's `_validate()` (called from `CSTNode.__post_init__`).

    The native parser builds only trees that are valid, so the check can say nothing about its
    output; skipping it makes the parse about 12% faster (libcst notes the same in `CSTNode`).
    Raises what `libcst.parse_module` raises.
    """
    checked = cst.CSTNode.__dict__["__post_init__"]
    cst.CSTNode.__post_init__ = _unchecked  # type: ignore[method-assign]
    try:
        return cst.parse_module(source)
    finally:
        cst.CSTNode.__post_init__ = checked  # type: ignore[method-assign]


def forget_trees() -> None:
    """Drop the trees kept for the next parse of the same file."""
    _RECENT.clear()


def parse_file(source: str, path: str) -> cst.Module:
    """`parse_module` of a file's text, reusing the tree of the last parse of the same text of that file.

    Trees are never changed by the analysis, so two analyses can share one.
    """
    key = os.path.abspath(path)
    recent = _RECENT.get(key)
    if recent is not None and recent[0] == source:
        _RECENT.move_to_end(key)
        return recent[1]
    module = parse_module(source)
    if len(source) <= _RECENT_BYTES // 2:
        _RECENT[key] = (source, module)
        total = sum(len(s) for s, _ in _RECENT.values())
        while total > _RECENT_BYTES:
            _, (old, _) = _RECENT.popitem(last=False)
            total -= len(old)
    return module
