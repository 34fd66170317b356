"""Losses known by what is done with them: a name handed to a function that backpropagates it on every
call (`self._update_generator(gen_loss)`, whose body runs `gen_loss.backward()`) is a tensor with a
graph, whatever computed it (a model held in a dict passed in, a loss of an unknown class)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

import libcst as cst

from trainlint.model.arguments import argument_for
from trainlint.model.parameter_facts import BACKPROPS, fact, keys

if TYPE_CHECKING:
    from trainlint.model.facts import Call, Function
    from trainlint.model.training import TrainingModel


def backpropagated_parameters(model: "TrainingModel", fn: "Function") -> list[str]:
    """The facts "backprops 0 loss" of the explicit parameters `fn` backpropagates (`loss.backward()`,
    `scaler.scale(loss).backward()`), as its summary tells other modules."""
    return [fact(BACKPROPS, key) for key in _backpropagated(model, fn)]


def _backpropagated(model: "TrainingModel", fn: "Function") -> list[str]:
    """The explicit parameters `fn` backpropagates, as summaries name parameters ("0 loss")."""
    uses = model._protocol_uses
    return [f"{i} {p}" for i, p in enumerate(fn.explicit_params) if getattr(uses.get((id(fn), p)), "graph", None) is True]


_ASKING: set[tuple[int, str]] = set()  # the questions open: resolving a callee may ask of values again
_ANSWERS: "WeakKeyDictionary[TrainingModel, dict[tuple[int, str], bool]]" = WeakKeyDictionary()
# per model, per function: the calls of its own body by the names they pass (asked of many names)
_HANDING: "WeakKeyDictionary[TrainingModel, dict[int, dict[str, list[Call]]]]" = WeakKeyDictionary()


def handed_to_backward(model: "TrainingModel", name: str, fn: "Function") -> bool:
    """Whether `fn` hands the value of `name` to a function of this module or of the project that
    backpropagates it (memoised per model, when no other question was open)."""
    key, answers = (id(fn), name), _ANSWERS.setdefault(model, {})
    if key not in answers:
        outermost = not _ASKING
        answer = _handed(model, name, fn)
        if outermost:
            answers[key] = answer
        return answer
    return answers[key]


def _handed(model: "TrainingModel", name: str, fn: "Function") -> bool:
    if (id(fn), name) in _ASKING:
        return False
    _ASKING.add((id(fn), name))
    try:
        for call in _calls_passing(model, fn).get(name, ()):
            callee = model.callee(call)
            if callee is not None:
                handed = _backpropagated(model, callee)
            else:
                summary = model.project_call_summary(call)
                handed = keys(summary, BACKPROPS) if summary is not None and summary.backprops else []
            if any(type(a := argument_for(call.node, key)) is cst.Name and a.value == name for key in handed):  # type: ignore[union-attr]
                return True
        return False
    finally:
        _ASKING.discard((id(fn), name))


def _calls_passing(model: "TrainingModel", fn: "Function") -> "dict[str, list[Call]]":
    """The calls of `fn`'s own body, by each name they pass as an argument."""
    known = _HANDING.setdefault(model, {})
    found = known.get(id(fn))
    if found is None:
        found = known[id(fn)] = {}
        for call in fn.calls:
            if call.site.function is fn:
                for name in dict.fromkeys(a.value.value for a in call.node.args if type(a.value) is cst.Name):
                    found.setdefault(name, []).append(call)
    return found
