"""The project's local import graph, read cheaply: which modules import which, directly or not.

A module's summary is computed once per content and reads the summaries of the project modules it
imports in full, each computed once in turn (bottom-up over the import graph). A module that imports
the one being summarised, directly or not, cannot be waited for: its own summary may read this one.
Such a module (one of its import cycle, or an importer handing it objects of its classes) is seen
by its outline, always, whichever module a run happens to ask for first, so that a summary is a
function of its module's content and of its dependencies' summaries only (index.py).

The graph's edges are read with Python's own parser from the import statements a module runs when it
is imported (not those inside its functions, which run when called: a common way to break a cycle),
and found as the interpreter finds them (`ModuleFinder`); what that read is noted, so that a result
depending on it is invalidated when a module on the way may import others.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable

from trainlint.project.python_trees import python_tree
from trainlint.project.watching import note_all, watching
from trainlint.reading import State, module_code, read_state

# a module's imports, each as the (dotted module, level) it names, the first of them that is a file:
# `from ..a import b` names module `..a.b` if there is one, else name `b` of module `..a`
Imports = list[tuple[tuple[str, int], ...]]


def imported_modules(source: str) -> Imports:
    """Every module an import statement of `source` names (a package's `__init__` only where the
    name imported is not a module of its own: `from . import x` reads `x.py`, the package need not
    import it back to be seen in full)."""
    try:
        tree = python_tree(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out: dict[tuple[tuple[str, int], ...], None] = {}
    for node in _executed_on_import(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out[((alias.name, 0),)] = None
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                if alias.name == "*":
                    out[((module, node.level),)] = None
                else:
                    out[((f"{module}.{alias.name}" if module else alias.name, node.level), (module, node.level))] = None
    return list(out)


def _executed_on_import(tree: ast.Module) -> list[ast.AST]:
    """The nodes that run when the module is imported: not the bodies of its functions, whose imports
    run when they are called (where code often puts an import to break a cycle)."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    return out


class Components:
    """The import graph's edges (memoised by each module's content) and what each module reaches."""

    def __init__(self, find: Callable[[Path, str, int], Path | None], real: Callable[[Path], Path]) -> None:
        self._find = find  # `ModuleFinder.imported_file`
        self._real = real
        # module -> its content's state, the local modules it imports, the states read to find them
        self._edges: dict[Path, tuple[State, tuple[Path, ...], tuple[State, ...]]] = {}
        # module -> the modules it imports directly or not, and the states of the modules (and paths
        # probed) that was read from
        self._reached: dict[Path, tuple[frozenset[Path], tuple[State, ...]]] = {}

    def forget(self) -> None:
        """Files may have changed (a long-lived process, before each lint)."""
        self._edges.clear()
        self._reached.clear()

    def edges(self, module: Path) -> tuple[Path, ...]:
        """The project modules `module` imports (itself excluded), noting what finding them read."""
        state, data = read_state(str(module))
        known = self._edges.get(module)
        if known is None or known[0] != state:
            found: dict[Path, None] = {}
            with watching() as probed:
                if data is not None:
                    for alternatives in imported_modules(module_code(str(module), data)):
                        for name, level in alternatives:
                            path = self._find(module, name, level) if name or level else None
                            if path is not None:
                                found[self._real(path)] = None
                                break
            found.pop(module, None)
            known = self._edges[module] = (state, tuple(found), tuple(probed))
        note_all(known[2], known[0])
        return known[1]

    def reaches(self, source: Path, target: Path) -> bool:
        """Whether module `source` imports `target`, directly or not (or is it). Depends on every module
        `source` reaches (any of them may come to import `target`): noted."""
        known = self._reached.get(source)
        if known is None:
            with watching() as read:
                found = self._reach(source)
            known = self._reached[source] = (found, tuple(read))
        note_all(known[1])
        return target in known[0]

    def _reach(self, module: Path) -> frozenset[Path]:
        reached: set[Path] = set()
        stack = [module]
        while stack:  # (iterative: an import chain may be long)
            current = stack.pop()
            if current not in reached:
                reached.add(current)
                stack.extend(p for p in self.edges(current) if p not in reached)
        return frozenset(reached)
