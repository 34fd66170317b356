"""Loops that time a forward and backward pass instead of training: a benchmark's `for i in
range(n):` that runs the model and backpropagates, reads a clock around `torch.cuda.synchronize()`
and never updates a weight (`compute_time_train` in a model zoo, `measure_fp_bp_time` called from a
`--debug` loop). The synchronize is the measurement there, and the loop is no training step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Sequence

if TYPE_CHECKING:
    import libcst as cst

    from trainlint.model.facts import Call, Function, Loop

# what reads a clock: the standard library's, a CUDA event's, and a timer object's `tic()`/`toc()`
_CLOCKS = frozenset({"time.time", "time.perf_counter", "time.monotonic", "time.process_time", "timeit.default_timer"})
_CLOCK_METHODS = frozenset({"tic", "toc", "elapsed_time"})


def times_passes(
    loop: "Loop", module_calls: "Sequence[Call]", callees: "Callable[[Call], Iterable[Function]]", resolve: "Callable[[cst.BaseExpression], str | None]"
) -> bool:
    """Whether a counted loop reads a clock and synchronises the device, in its body or in a
    function of this module it calls (`callees`; `module_calls`: the module's calls): a loop that
    measures how long the passes take. `resolve` gives a call's qualified name."""
    if not loop.counted:
        return False
    called = {id(fn) for call in loop.direct_calls for fn in callees(call)}
    calls = [*loop.direct_calls, *(c for c in module_calls if c.site.function is not None and id(c.site.function) in called)]
    clocked = any(resolve(c.node.func) in _CLOCKS or c.method in _CLOCK_METHODS for c in calls)
    return clocked and any(resolve(c.node.func) == "torch.cuda.synchronize" for c in calls)
