"""A CPU-time budget of its own for each module summary computed while a file is analysed.

A file's analysis may summarise many modules of its project (those it imports, those that call it).
Charged to the file, that work turns a valid 26-line `__init__.py` into a TL000 for its CPU time. So a
summary runs under a budget of its own: the file's timer (the worker's `ITIMER_PROF`) is paused while
it runs and given back its remaining time afterwards, and a summary that cannot be made within its
budget ends with `OverBudget`: it is treated as unknown by the caller (its callers lose that
precision, nothing else), and named once in the run's summary line.

Only where a timer is armed (a worker with a time limit) is there a budget: an in-process analysis
without a limit computes every summary in full, as before.
"""

from __future__ import annotations

import signal
from typing import Any

_TIMER = hasattr(signal, "setitimer") and hasattr(signal, "SIGPROF")


class OverBudget(BaseException):
    """A summary ran past its own budget. A BaseException, so that the analysis's `except Exception`
    (a module it cannot analyse says nothing) does not take it for a bug of the module."""


def _expired(signum: int, frame: Any) -> None:
    raise OverBudget()


# seconds of CPU time each summary may take (`configure`); 0: no budget of its own
_SECONDS = 0.0
# the modules whose summary ran out of budget while the current file was analysed, and in this
# process (its summaries are remembered: a file that reads one later depends on it too)
_EXCEEDED: set[str] = set()
_UNKNOWN: set[str] = set()


def configure(seconds: float) -> None:
    """Give each summary computed from now on `seconds` of CPU time (the file's own time limit)."""
    global _SECONDS
    _SECONDS = seconds


def patience() -> float:
    """How long (wall-clock seconds) a worker waits for a summary another worker is computing: the
    budget that one has, several times over for a busy machine, well within a worker's backstop."""
    return 3 * _SECONDS + 10 if _SECONDS > 0 else 120.0


def exceeded() -> set[str]:
    """The modules whose summary ran out of budget since the last `forget`."""
    return _EXCEEDED


def used(module: str) -> None:
    """The analysis read the summary of `module`: if it ran out of budget, the file depends on that."""
    if module in _UNKNOWN:
        _EXCEEDED.add(module)


def ran_out_elsewhere(module: str) -> None:
    """Another worker's summary of `module` ran out of budget: unknown here too, and named."""
    _EXCEEDED.add(module)
    _UNKNOWN.add(module)


def forget() -> None:
    """Start a new file: no summary has run out of budget yet."""
    _EXCEEDED.clear()


class own_budget:
    """Run the block (a summary's computation) on a CPU budget of its own, if a timer is armed.

    The enclosing timer (the file's, or an enclosing summary's) is paused and given back its remaining
    time when the block ends, so that nobody's time is charged to another. `OverBudget` leaves the
    block when its budget runs out; the module is then noted in `exceeded()`."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.outer = 0.0
        self.previous: Any = None

    def __enter__(self) -> None:
        if not _TIMER or _SECONDS <= 0:
            return
        self.outer = signal.setitimer(signal.ITIMER_PROF, 0)[0]
        if self.outer <= 0:  # no limit is armed here: no budget either
            return
        self.previous = signal.signal(signal.SIGPROF, _expired)
        signal.setitimer(signal.ITIMER_PROF, _SECONDS)

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, trace: Any) -> bool:
        if self.outer <= 0:
            return False
        expired = kind is OverBudget
        while True:  # the budget's signal may still arrive until it is ignored: then it counts as run out
            try:
                signal.signal(signal.SIGPROF, signal.SIG_IGN)  # (a pending trip of `_expired` is dropped)
                break
            except OverBudget:
                expired = True
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, self.previous)
        signal.setitimer(signal.ITIMER_PROF, self.outer)  # the enclosing work's time, as it was left
        if not expired:
            _UNKNOWN.discard(self.module)
        else:
            _EXCEEDED.add(self.module)
            _UNKNOWN.add(self.module)
            if kind is not OverBudget:
                raise OverBudget()
        return False
