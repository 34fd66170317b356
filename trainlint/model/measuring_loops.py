"""Loops that measure the passes instead of training, in a module that updates no weight anywhere:
a benchmark's `for i in range(n):` that runs the model and backpropagates and reads a clock around
`torch.cuda.synchronize()` (`compute_time_train` in a model zoo, `measure_fp_bp_time` called from a
`--debug` loop: the synchronize is the measurement), and a sweep over settings written in the code,
`for channels in [1, 16, 30]:`, calling a check that backpropagates to compare two implementations'
gradients (a custom operator's test script). A training loop draws data; neither does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import libcst as cst

if TYPE_CHECKING:
    from trainlint.model.facts import Call, Function, Loop

# what reads a clock: the standard library's, a CUDA event's, and a timer object's `tic()`/`toc()`
_CLOCKS = frozenset({"time.time", "time.perf_counter", "time.monotonic", "time.process_time", "timeit.default_timer"})
_CLOCK_METHODS = frozenset({"tic", "toc", "elapsed_time"})


def measures_passes(
    loop: "Loop", module_calls: "Sequence[Call]", callees: "Callable[[Call], Iterable[Function]]", resolve: "Callable[[cst.BaseExpression], str | None]"
) -> bool:
    """Whether a loop that backpropagates, in a module that updates no weight, measures rather than
    trains: it times its passes (`times_passes`) or sweeps settings written in the code (`sweeps_literals`)."""
    return sweeps_literals(loop, resolve) or times_passes(loop, module_calls, callees, resolve)


def sweeps_literals(loop: "Loop", resolve: "Callable[[cst.BaseExpression], str | None]") -> bool:
    """`for channels in [1, 16, 30, 1025]:`, `for dtype in (torch.float, torch.double):`: a loop over a
    list or tuple written in the code, of numbers, strings or a library's constants (not variables:
    `for loss in [loss_a, loss_b]:` may be part of a step)."""
    node = loop.node
    if not isinstance(node, cst.For) or not isinstance(node.iter, (cst.List, cst.Tuple)) or not node.iter.elements:
        return False
    return all(isinstance(e, cst.Element) and _constant(e.value, resolve) for e in node.iter.elements)


def _constant(expr: cst.BaseExpression, resolve: "Callable[[cst.BaseExpression], str | None]") -> bool:
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    return isinstance(expr, cst.Attribute) and resolve(expr) is not None  # (`torch.float16`, `np.float32`)


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
