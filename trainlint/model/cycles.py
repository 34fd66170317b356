"""Memoising answers that may lean on a cycle: the value of a parameter asks for its callers' values,
which may ask for the class being summarised, which asks for that parameter again. The question asked
again while it is under way gets no information (`CYCLE`); what is found meanwhile is partial until the
evaluation that was under way finishes."""

from __future__ import annotations

from typing import Callable, Hashable, TypeVar

from trainlint.model.lattice import CYCLE, Kind, Value

T = TypeVar("T")
SETTLED = 1 << 30  # no evaluation under way was met again
# kinds whose values name the class that made them: one without it may still learn it
_CLASSED = frozenset({Kind.MODULE, Kind.OBJECT, Kind.SCALER, Kind.FUNCTION})


class CycleMemo:
    """The evaluations under way, each with its depth, and the memoised answers that lean on them."""

    def __init__(self) -> None:
        self._in_progress: dict[object, int] = {}
        # the least depth of the evaluations under way met again since the innermost `_begin`
        self._low = SETTLED
        # unknowns found while a cycle was under way, by the depth of the evaluation they lean on:
        # dropped from their memo when it finishes, so later questions see its final answer (a
        # parameter asked for while its callers' classes were being built knew none of its calls)
        self._provisional: dict[int, list[tuple[dict, object]]] = {}  # type: ignore[type-arg]

    @property
    def evaluating(self) -> bool:
        """Whether an evaluation is under way (values found now may lean on a cycle's partial answer)."""
        return bool(self._in_progress)

    def final(self, compute: Callable[[], T]) -> tuple[T, bool]:
        """`compute()`, and whether its answer is final: it leans on no evaluation under way (so a
        memo may keep it, though the question was asked inside a cycle of values)."""
        saved = self._begin()
        try:
            found = compute()
        finally:
            low = self._end(saved)
        return found, low == SETTLED

    def _begin(self) -> int:
        saved, self._low = self._low, SETTLED
        return saved

    def _end(self, saved: int) -> int:
        """The least depth of the evaluations still under way met again since `_begin` (`SETTLED` if
        none: what was found is final)."""
        low = self._low
        self._low = min(saved, low)
        return low if low < len(self._in_progress) else SETTLED

    def _enter(self, key: object) -> int:
        self._in_progress[key] = len(self._in_progress)
        return self._begin()

    def _leave(self, key: object, saved: int) -> int:
        """End the evaluation of `key`; what `_end` says of what it found."""
        depth = self._in_progress.pop(key)
        for memo, stale in self._provisional.pop(depth, ()):
            memo.pop(stale, None)
        return self._end(saved)

    def _cycle(self, key: object) -> Value:
        """`key` is asked for while it is being evaluated: no information, and what uses it is partial."""
        self._low = min(self._low, self._in_progress[key])
        return CYCLE

    def _remember(self, memo: dict, key: object, value: Value, low: int) -> None:  # type: ignore[type-arg]
        """Memoise `value`; an unknown (or an object of no known class) only until the evaluation at
        depth `low` it leans on finishes."""
        memo[key] = value
        if low != SETTLED and (value.kind is Kind.UNKNOWN or (value.origin is None and value.kind in _CLASSED)):
            self._provisional.setdefault(low, []).append((memo, key))

    def _memoised(self, memo: dict, key: Hashable, compute: Callable[[], Value], settled_only: bool = False) -> Value:  # type: ignore[type-arg]
        """`memo[key]`, else `compute()` remembered as `_remember` says (`settled_only`: only if it leans
        on no evaluation under way); `CYCLE` if `key` is under way."""
        cached = memo.get(key)
        if cached is not None:
            return cached
        if key in self._in_progress:
            return self._cycle(key)
        saved = self._enter(key)
        try:
            value = compute()
        finally:
            low = self._leave(key, saved)
        if value is not CYCLE and not (settled_only and low != SETTLED):
            self._remember(memo, key, value, low)
        return value
