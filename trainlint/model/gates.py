"""Gates: conditions under which a statement in a training step does not run every step."""

from __future__ import annotations

import libcst as cst

from trainlint.model.names import tokens

# words of a condition that make it periodic or a one-off (`log_interval`, `do_eval`, `print_freq`)
GATE_WORDS = frozenset(
    """log logging eval evaluate evaluation save saving print printing every interval verbose
    debug display report reporting checkpoint ckpt valid validate validation val visualize vis
    plot monitor profile profiling freq frequency period periodic first last""".split()
)
# counters compared with a constant: `if step == 0`, `if i == 0`
COUNTER_WORDS = frozenset(
    "step steps iter iters iteration iterations it epoch batch idx i n global count counter updates update num".split()
)
# `if rank == 0`, `if local_rank == 0`: the main process runs it on every step, it is no gate
RANK_WORDS = frozenset("rank process master main world gpu gpus device devices node local size".split())
# accumulation boundaries: the statements under them run once per optimizer step, not per micro-batch
BOUNDARY_NAMES = frozenset({"sync_gradients"})


def has_modulo(expr: cst.CSTNode) -> bool:
    """Whether an expression contains `a % b`."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo):
        return True
    return any(has_modulo(child) for child in expr.children)


def _identifiers(expr: cst.CSTNode) -> list[str]:
    if isinstance(expr, cst.Name):
        return [expr.value]
    if isinstance(expr, cst.Attribute):
        return [expr.attr.value, *_identifiers(expr.value)]
    if isinstance(expr, (cst.SimpleString, cst.Integer, cst.Float)):
        return []
    out: list[str] = []
    for child in expr.children:
        out.extend(_identifiers(child))
    return out


def _is_counter_equality(expr: cst.CSTNode) -> bool:
    if not isinstance(expr, cst.Comparison) or len(expr.comparisons) != 1:
        return False
    comp = expr.comparisons[0]
    if not isinstance(comp.operator, cst.Equal):
        return False
    sides = (expr.left, comp.comparator)
    if not any(isinstance(s, cst.Integer) for s in sides):
        return False
    return any(
        isinstance(s, (cst.Name, cst.Attribute))
        and COUNTER_WORDS & set(tokens(_identifiers(s)[0]))
        and not RANK_WORDS & set(tokens(_identifiers(s)[0]))
        for s in sides
    )


def is_lazy_init_test(test: cst.BaseExpression) -> bool:
    """`if self.graph is None:` / `if cache is None:`: a body that runs once, to build what is missing."""
    return (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, cst.Is)
        and isinstance(test.comparisons[0].comparator, cst.Name)
        and test.comparisons[0].comparator.value == "None"
        and isinstance(test.left, cst.Attribute)
    )


def is_gate_test(test: cst.BaseExpression, gate_names: set[str], extra_gates: frozenset[str]) -> bool:
    """Whether `if <test>:` runs its body only on some steps (periodically, once, or at a boundary)."""
    if has_modulo(test):
        return True
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if _is_counter_equality(node):
            return True
        if isinstance(node, (cst.Name, cst.Attribute)):
            for ident in _identifiers(node):
                if ident in gate_names or ident in extra_gates or ident in BOUNDARY_NAMES:
                    return True
                if GATE_WORDS.intersection(tokens(ident)):
                    return True
            continue
        stack.extend(node.children)
    return False
