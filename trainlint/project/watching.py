"""What an analysis depended on, recorded as it goes, and answers given while a cycle was open.

`watching()` collects the states of the files the analysis inside it read (modules read, paths
probed), as cache.py checks them. `InProgress` keeps the questions being worked out, in order: a
question asked again while open is a cycle (modules that import each other); the inner ask sees
nothing, and the answers worked out between the two asks saw that nothing, so they are not kept.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Generic, Hashable, Iterator, TypeVar

from trainlint.reading import State

# The states of the files an analysis depended on (modules read, paths probed), recorded while `watching()` is active (cache.py)
_WATCHING: list[set[State]] = []


def note(*states: State) -> None:
    if _WATCHING:  # the innermost watcher; each passes what it saw to the one around it when it ends
        _WATCHING[-1].update(states)


@contextmanager
def watching() -> Iterator[set[State]]:
    """Collect the states of the files the analysis inside the block depends on, as it found them."""
    watched: set[State] = set()
    _WATCHING.append(watched)
    try:
        yield watched
    finally:
        for i in range(len(_WATCHING) - 1, -1, -1):  # by identity: two watchers' sets may be equal
            if _WATCHING[i] is watched:
                del _WATCHING[i]
                if i:
                    _WATCHING[i - 1].update(watched)
                break


@contextmanager
def unwatched() -> Iterator[None]:
    """Read without noting: for questions whose answer the states already noted cover (which files
    of a project import a module, where the project's listing is noted with the import index)."""
    _WATCHING.append(set())
    try:
        yield
    finally:
        _WATCHING.pop()


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
