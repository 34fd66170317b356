"""Tests true on a loop's first rounds only, which gate what they hold (DESIGN.md, "per step"): a name
given its first value, a step counter below a number written in the code, a cache filled once per key."""

from __future__ import annotations

import libcst as cst

from trainlint.model.gates import STEP_COUNTER_WORDS, _is_counter, is_first_value_test
from trainlint.model.names import dotted, tokens
from trainlint.model.walk import iter_nodes


def is_first_rounds_test(node: cst.If, loop: cst.CSTNode | None) -> bool:
    """A test true on a loop's first rounds only: `if loss_ema is None:` (`is_first_value_test`), or a
    step counter below a number written in the code (`if global_step < 3:`, `if ni < 3:` with
    `ni = i + nb * epoch`, `first_steps_counter`): a plot of the first batches, not of every step; or
    a cache filled on the first round for each key (`memo_fill_test`)."""
    return is_first_value_test(node, loop) or first_steps_counter(node.test, loop) or memo_fill_test(node)


def memo_fill_test(node: cst.If) -> bool:
    """`if i not in self.sr_u: self.sr_u[i] = torch.ones(n).normal_().cuda()`: a body that fills the
    object's cache for the key its test found missing runs once per key (a filter, `if k not in
    self.skip:`, that fills nothing, is no such test)."""
    test = node.test
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or not isinstance(test.comparisons[0].operator, cst.NotIn):
        return False
    holder, key = dotted(test.comparisons[0].comparator), test.left
    if holder is None or not holder.startswith("self."):
        return False
    return any(isinstance(n, cst.Assign) and any(_fills(t.target, holder, key) for t in n.targets) for n in iter_nodes(node.body))


def _fills(target: cst.BaseExpression, holder: str, key: cst.BaseExpression) -> bool:
    """`self.sr_u[i] = ...`: an assignment to the entry `key` of `holder`."""
    if not isinstance(target, cst.Subscript) or dotted(target.value) != holder or len(target.slice) != 1:
        return False
    index = target.slice[0].slice
    return isinstance(index, cst.Index) and index.value.deep_equals(key)


def first_steps_counter(test: cst.BaseExpression, loop: cst.CSTNode | None) -> bool:
    """`step < 3`, `3 > self.iteration`, `ni <= 10`: a counter of the training steps (by its words,
    not `epoch`: every step of the first epochs is most of a run), or a name the loop binds to one
    counted across epochs (`ni = i + nb * epoch`), ordered below an integer literal."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or loop is None:
        return False
    operator, right = test.comparisons[0].operator, test.comparisons[0].comparator
    if isinstance(operator, (cst.LessThan, cst.LessThanEqual)) and isinstance(right, cst.Integer):
        counter = test.left
    elif isinstance(operator, (cst.GreaterThan, cst.GreaterThanEqual)) and isinstance(test.left, cst.Integer):
        counter = right
    else:
        return False
    if _is_counter(counter, STEP_COUNTER_WORDS - {"epoch"}):
        return True
    return isinstance(counter, cst.Name) and any(
        isinstance(n, cst.Assign) and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name)
        and n.targets[0].target.value == counter.value and _across_epochs(n.value)
        for n in iter_nodes(loop.body)  # type: ignore[attr-defined]
    )


def _across_epochs(value: cst.BaseExpression) -> bool:
    """`i + nb * epoch`, `epoch * len(loader) + it`: arithmetic of the epoch and a count within it."""
    if not isinstance(value, cst.BinaryOperation):
        return False
    words = {w for n in iter_nodes(value) if isinstance(n, cst.Name) for w in tokens(n.value)}
    return "epoch" in words and len(words) > 1
