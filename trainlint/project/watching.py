"""What an analysis depended on, recorded as it goes, and answers given while a cycle was open.

`watching()` collects the states of the files the analysis inside it read (modules read, paths
probed), as cache.py checks them. `InProgress` keeps the questions being worked out, in order: a
question asked again while open is a cycle (modules that import each other); the inner ask sees
nothing, and the answers worked out between the two asks saw that nothing, so they are not kept.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Collection, Generic, Hashable, Iterator, TypeVar

from trainlint.reading import State

# The states of the files an analysis depended on (modules read, paths probed), recorded while `watching()` is active (cache.py)
_WATCHING: list[set[State]] = []
# per watcher, the memoised collections of states already added whole, by identity (held, so that an
# id is not reused): a project's answers are asked thousands of times, each with what it depended on
_ADDED: list[dict[int, Collection[State]]] = []


def note(*states: State) -> None:
    if _WATCHING:  # the innermost watcher; each passes what it saw to the one around it when it ends
        _WATCHING[-1].update(states)


def note_all(states: Collection[State], *more: State) -> None:
    """`note(*more, *states)`, with `states` a memo's collection, which is never changed: added to a
    watcher once."""
    if not _WATCHING:
        return
    _WATCHING[-1].update(more)
    if id(states) not in _ADDED[-1]:
        _ADDED[-1][id(states)] = states
        _WATCHING[-1].update(states)


@contextmanager
def watching() -> Iterator[set[State]]:
    """Collect the states of the files the analysis inside the block depends on, as it found them."""
    watched: set[State] = set()
    _WATCHING.append(watched)
    _ADDED.append({})
    try:
        yield watched
    finally:
        for i in range(len(_WATCHING) - 1, -1, -1):  # by identity: two watchers' sets may be equal
            if _WATCHING[i] is watched:
                del _WATCHING[i]
                added = _ADDED.pop(i)
                if i:
                    _WATCHING[i - 1].update(watched)
                    _ADDED[i - 1].update(added)
                break


@contextmanager
def unwatched() -> Iterator[None]:
    """Read without noting: for questions whose answer the states already noted cover (which files
    of a project import a module, where the project's listing is noted with the import index)."""
    _WATCHING.append(set())
    _ADDED.append({})
    try:
        yield
    finally:
        _WATCHING.pop()
        _ADDED.pop()


K = TypeVar("K", bound=Hashable)


class InProgress(Generic[K]):
    """The questions being worked out, in the order they were asked, and those that met a cycle."""

    def __init__(self) -> None:
        self._open: dict[K, None] = {}
        self._tainted: set[K] = set()

    def __contains__(self, key: K) -> bool:
        return key in self._open

    def cycle(self, key: K) -> None:
        """`key`, open, is asked again: what was asked after it saw it unanswered."""
        inside = list(self._open)
        self._tainted.update(inside[inside.index(key) + 1 :])

    @contextmanager
    def working(self, key: K) -> Iterator[None]:
        self._open[key] = None
        try:
            yield
        finally:
            del self._open[key]

    def keep(self, key: K) -> bool:
        """Whether the answer just worked out for `key` may be kept (it met no cycle)."""
        tainted = key in self._tainted
        self._tainted.discard(key)
        return not tainted


V = TypeVar("V")

MAX_ROUNDS = 8  # rounds of a cycle's fixpoint (answers only grow; a bound against a chain's churn)


class CycleFixpoint(Generic[K, V]):
    """Answers to questions that ask each other (a module's step seeds need its callers' seeds,
    whose callers may call it back), each worked out once however the asks go round.

    A question asked again while open, or one answered provisionally in this round, answers its
    provisional value (`empty` at first), and every open question but the outermost is then
    provisional too. The outermost works its answer out again, the provisional answers kept and each
    question worked out once a round, until no answer changes (answers only grow as callers' seeds
    do: the least fixpoint); then every answer is kept. Without cycles each answer is kept as soon as
    it is made. Answers are kept with the states of the files they read (`watching`)."""

    def __init__(self, empty: V, holds: Callable[[State], bool] | None = None) -> None:
        self._empty = empty
        self._holds = holds  # whether a state read is still as it was (for answers set aside by `forget`)
        self._open: dict[K, None] = {}
        self._kept: dict[K, tuple[V, tuple[State, ...]]] = {}
        self._before: dict[K, tuple[V, tuple[State, ...]]] = {}
        self._provisional: dict[K, tuple[V, tuple[State, ...]]] = {}
        self._this_round: set[K] = set()
        self._tainted: set[K] = set()
        self._changed = False
        self._cycled = False  # a question was asked again while open, or read provisionally

    def forget(self) -> None:
        """Set the kept answers aside: one asked for again is given while every state it read still
        `holds` (a long-lived process forgets before each lint; most answers still hold). An answer
        that read nothing (one kept when its budget ran out) is worked out again."""
        self._before.update(self._kept)
        self._kept.clear()

    def __contains__(self, key: K) -> bool:
        return key in self._kept

    @property
    def asking(self) -> bool:
        """Whether a question is being worked out (the one asked now is asked inside it)."""
        return bool(self._open)

    def keep(self, key: K, value: V) -> None:
        """Keep an answer worked out otherwise (unknown, once its budget ran out)."""
        self._kept[key] = (value, ())

    def ask(self, key: K, work_out: Callable[[K], V]) -> V:
        kept = self._kept.get(key)
        if kept is None and key in self._before:
            earlier = self._before.pop(key)
            if earlier[1] and self._holds is not None and all(self._holds(s) for s in earlier[1]):
                kept = self._kept[key] = earlier
        if kept is not None:
            note_all(kept[1])
            return kept[0]
        if key in self._open or key in self._this_round:
            self._tainted.update(list(self._open)[1:])  # (the outermost works the cycle out)
            self._cycled = True
            known = self._provisional.get(key)
            if known is None:
                return self._empty
            note_all(known[1])
            return known[0]
        outermost = not self._open
        try:
            return self._work_out(key, work_out, outermost)
        except BaseException:
            if outermost:  # (a budget ran out: nothing provisional outlives the question)
                self._settle({})
            raise

    def _work_out(self, key: K, work_out: Callable[[K], V], outermost: bool) -> V:
        for _ in range(MAX_ROUNDS):
            self._open[key] = None
            try:
                with watching() as read:
                    value = work_out(key)
            finally:
                del self._open[key]
            if key not in self._tainted and not (outermost and self._cycled):
                break  # (it met no cycle)
            self._tainted.discard(key)
            old = self._provisional.get(key)
            self._changed |= old is None or old[0] != value
            self._provisional[key] = (value, tuple(read))
            if not outermost:  # provisional until the outermost settles
                self._this_round.add(key)
                return value
            if not self._changed:
                break
            self._changed = False
            self._this_round.clear()
        if outermost:  # settled: the cycle's answers are final
            self._settle(self._provisional)
        self._kept[key] = (value, tuple(read))
        return value

    def _settle(self, answers: dict[K, tuple[V, tuple[State, ...]]]) -> None:
        self._kept.update(answers)
        self._provisional = {}
        self._this_round.clear()
        self._tainted.clear()
        self._changed = self._cycled = False
