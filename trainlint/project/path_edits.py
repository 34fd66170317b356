"""The folders a module's text puts on `sys.path` (`sys.path.insert(0, os.path.dirname(__file__) + "/..")`,
a function of its own that does so for the path it is given), worked out from `__file__` without
running anything."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from trainlint.project.python_trees import python_tree, walk

PATH_EDITS = ("insert", "append", "extend")
MAX_NAME_HOPS = 8  # `ROOT = FILE.parents[1]` through other names: this many at most


def path_edits(path: Path, text: str) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """The folders the module's text puts on `sys.path` (`sys.path.insert(0, X)`; `.append(X)`,
    `.extend([X])` after the others), where X is worked out from `__file__`, the working folder (taken
    as the file's: scripts are mostly run from theirs) and names bound to such paths."""
    try:
        tree = python_tree(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return (), ()
    names: dict[str, ast.expr] = {}
    for node in walk(tree):  # module-level or not: one binding of each name is followed
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            names.setdefault(node.targets[0].id, node.value)
    # functions that put a parameter on the path (`def add_path(path): sys.path.insert(0, path)`):
    # a call of one is an edit of the path it is given
    helpers: dict[str, tuple[int, bool]] = {}
    for node in walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parameters = [a.arg for a in node.args.args]
            for inner in walk(node):
                edit = _edit(inner)
                for target in edit[0] if edit is not None else ():
                    if isinstance(target, ast.Name) and target.id in parameters:
                        helpers.setdefault(node.name, (parameters.index(target.id), edit[1]))  # type: ignore[index]
    inserted: list[Path] = []
    appended: list[Path] = []
    for node in walk(tree):
        edit = _edit(node)
        if edit is None and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers:
            index, first = helpers[node.func.id]
            edit = ([node.args[index]], first) if index < len(node.args) else None
        for target in edit[0] if edit is not None else ():
            found = _path_value(target, path, names, 0)
            if found is not None:
                (inserted if edit[1] else appended).append(Path(os.path.normpath(found)))  # type: ignore[index]
    return tuple(dict.fromkeys(inserted)), tuple(dict.fromkeys(appended))


def _edit(node: ast.AST) -> tuple[list[ast.expr], bool] | None:
    """The paths a `sys.path` edit puts on the path, and whether first (`insert`) or last."""
    func = node.func if isinstance(node, ast.Call) else None
    if not (isinstance(func, ast.Attribute) and func.attr in PATH_EDITS and _dotted(func.value) == "sys.path"):
        return None
    args = node.args  # type: ignore[union-attr]
    if func.attr == "insert" and len(args) == 2:
        return [args[1]], True
    if func.attr == "append" and len(args) == 1:
        return [args[0]], False
    if func.attr == "extend" and len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple)):
        return list(args[0].elts), False
    return None


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


UNCHANGED = frozenset({"abspath", "realpath", "normpath", "str", "Path", "PurePath", "fspath", "resolve", "absolute", "expanduser"})


def _path_value(node: ast.expr, path: Path, names: dict[str, ast.expr], hops: int) -> str | None:
    """The path an expression builds from `__file__` (see `path_edits`), or None."""
    if hops > MAX_NAME_HOPS:
        return None
    here = str(path.parent)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value if os.path.isabs(node.value) else os.path.join(here, node.value)
    if isinstance(node, ast.Name):
        if node.id == "__file__":
            return str(path)
        bound = names.get(node.id)
        return _path_value(bound, path, names, hops + 1) if bound is not None else None
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = _path_value(node.value, path, names, hops + 1)
        return os.path.dirname(os.path.normpath(inner)) if inner is not None else None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
        inner = _path_value(node.value.value, path, names, hops + 1)
        index = node.slice
        if inner is None or not (isinstance(index, ast.Constant) and isinstance(index.value, int) and 0 <= index.value < 16):
            return None
        out = os.path.normpath(inner)
        for _ in range(index.value + 1):
            out = os.path.dirname(out)
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div)):
        left = _path_value(node.left, path, names, hops + 1)
        right = node.right.value if isinstance(node.right, ast.Constant) and isinstance(node.right.value, str) else None
        if left is None or right is None:
            return None
        return left + right if isinstance(node.op, ast.Add) else os.path.join(left, right)
    if isinstance(node, ast.JoinedStr):
        parts: list[str] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            elif isinstance(value, ast.FormattedValue) and (inner := _path_value(value.value, path, names, hops + 1)) is not None:
                parts.append(inner)
            else:
                return None
        return "".join(parts)
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("getcwd", "cwd") and not node.args:
            return here
        if isinstance(func, ast.Attribute) and name in ("resolve", "absolute", "expanduser") and not node.args:
            return _path_value(func.value, path, names, hops + 1)
        if name == "dirname" and len(node.args) == 1:
            inner = _path_value(node.args[0], path, names, hops + 1)
            return os.path.dirname(os.path.normpath(inner)) if inner is not None else None
        if name in UNCHANGED and len(node.args) == 1:
            return _path_value(node.args[0], path, names, hops + 1)
        if name == "join" and node.args:
            head = _path_value(node.args[0], path, names, hops + 1)
            rest = [a.value for a in node.args[1:] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if head is None or len(rest) != len(node.args) - 1:
                return None
            return os.path.join(head, *rest)
    return None
