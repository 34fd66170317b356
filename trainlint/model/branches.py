"""Branches the steps never take: `if mode == "cpu":` in a function that every caller off the error
path calls with another mode (a fallback kept for an out-of-memory handler)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.facts import Function, Site
from trainlint.model.torchnames import literal_string

if TYPE_CHECKING:
    from trainlint.model.training import TrainingModel


def branch_not_taken(model: "TrainingModel", site: Site) -> bool:
    """Inside `if mode == "cpu":` of a function whose calls (off the error path) all pass another
    value (`get_assignments(...)` on every step, `get_assignments(..., "cpu")` in an OOM handler),
    or leave a default that is another: a branch the steps never take."""
    fn = site.function
    if fn is None or fn.parent is not None:
        return False
    for depth, node in zip(site.gate_depths, site.gate_nodes):
        if depth != -1 or node is None:
            continue
        test = node.test
        if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1):
            continue
        compared = test.comparisons[0]
        if not isinstance(compared.operator, (cst.Equal, cst.NotEqual)) or literal_string(compared.comparator) is None:
            continue
        passed = _passed_literals(model, fn, test.left.value)
        if passed and all((value == literal_string(compared.comparator)) != isinstance(compared.operator, cst.Equal) for value in passed):
            return True
    return False


def _passed_literals(model: "TrainingModel", fn: Function, name: str) -> set[str] | None:
    """The strings every call of `fn` off the error path passes for parameter `name` (its
    default where a call passes none); None when one is not a literal or others may call it."""
    if name not in fn.params or (model.project is not None and fn in getattr(model, "_external_chains", {})) or model._is_hook(fn):
        return None
    positional = [p for p in fn.params if p not in ("self", "cls")] if fn.class_name is not None else list(fn.params)
    calls = [c for c in model.calls_of(fn) if not c.site.in_except]
    if not calls:
        return None
    default = literal_string(fn.defaults[name]) if name in fn.defaults else None
    found: set[str] = set()
    for call in calls:
        args = [a for a in call.node.args if a.keyword is None]
        if any(a.star for a in call.node.args):
            return None
        arg = next((a.value for a in call.node.args if a.keyword is not None and a.keyword.value == name), None)
        if arg is None and name in positional and positional.index(name) < len(args):
            arg = args[positional.index(name)].value
        value = literal_string(arg) if arg is not None else default
        if value is None:
            return None
        found.add(value)
    return found
