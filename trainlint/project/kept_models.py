"""A module's model built for its summary, kept for the module's own lint when nothing differs.

A module imported by another is usually summarised (depth 1) before it is linted itself (depth 0):
two analyses of one tree. The model is a function of the tree, the analysis settings and the answers
its project gave; the two views differ only where the project answers differently (the file linted
sees its callers' step seeds, what importers pass it, whether it is alone). So the summary's model
is built through a `RecordingLookup`, which notes each question and answer; the lint asks the same
questions of its own view, in the same order, and when every answer is equal the model is the one
it would have built, and is used instead (rust-analyzer and salsa check a memo's inputs the same way).
A differing answer means the lint builds its own, as before.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from trainlint.test_code import is_test_path

if TYPE_CHECKING:
    from trainlint.model.summary import ProjectLookup
    from trainlint.model.training import TrainingModel

# models kept for their module's lint, most recent last, bounded by their sources' size (a model
# holds its tree, ~80x its source: ~40 MB a process); one is taken by the lint, or dropped
_KEPT: OrderedDict[str, tuple[str, "TrainingModel", "RecordingLookup"]] = OrderedDict()
_KEPT_BYTES = 500_000
# questions whose answers no model keeps: whether importers call a method with grad is read only by
# `TrainingModel.under_no_grad_everywhere`, which memoises nothing, for the rules and the summary's
# method lists, each of which asks again of the view it is handed (the lint's own, once taken)
_NOT_KEPT = frozenset({"called_with_grad"})


class RecordingLookup:
    """A `ProjectLookup` that forwards every call and notes it with its answer, until `kept_model`
    hands the model to the lint (`hand_to`); then it forwards to the lint's view, noting nothing."""

    def __init__(self, inner: "ProjectLookup") -> None:
        self._inner = inner
        self._asked: list[tuple[str, tuple[Any, ...], dict[str, Any], Any]] | None = []

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if not callable(attribute):
            return attribute

        def ask(*args: Any, **kwargs: Any) -> Any:
            answer = getattr(self._inner, name)(*args, **kwargs)
            if self._asked is not None and name not in _NOT_KEPT:
                self._asked.append((name, args, kwargs, answer))
            return answer

        return ask

    def answers_equal(self, other: "ProjectLookup") -> bool:
        """Whether `other` answers each question noted as it was answered (asked in the same order:
        a later question may depend on an earlier answer)."""
        assert self._asked is not None
        return all(getattr(other, name)(*args, **kwargs) == answer for name, args, kwargs, answer in self._asked)

    def hand_to(self, other: "ProjectLookup") -> None:
        """Forward every later question to `other`, noting none."""
        self._inner, self._asked = other, None


def keep(path: str, source: str, model: "TrainingModel", lookup: RecordingLookup) -> None:
    """Keep a summary's model of `source` (built through `lookup`) for the lint of `path`."""
    key = os.path.abspath(path)
    if len(source) > _KEPT_BYTES // 2:
        return
    _KEPT[key] = (source, model, lookup)
    _KEPT.move_to_end(key)
    total = sum(len(s) for s, _, _ in _KEPT.values())
    while total > _KEPT_BYTES:
        _, (old, _, _) = _KEPT.popitem(last=False)
        total -= len(old)


def kept_model(path: str, source: str, settings: Any, project: "ProjectLookup") -> "TrainingModel | None":
    """The model kept for file `path` (however spelled) when it analysed this `source` with these
    settings, and `project` answers every question it asked as its summary's view did; else None.
    A model is taken once: it then asks `project`."""
    kept = _KEPT.pop(os.path.abspath(path), None)
    if kept is None:
        return None
    kept_source, model, lookup = kept
    # (the model names the file as the summaries do, from the root; what that name decides, whether
    # a parent folder makes it test code, must be the same)
    if kept_source != source or model.settings != settings or is_test_path(model.path) != is_test_path(path):
        return None
    if not lookup.answers_equal(project):
        return None
    lookup.hand_to(project)
    return model


def forget_models() -> None:
    """Drop every model kept (`shared.forget_projects`)."""
    _KEPT.clear()
