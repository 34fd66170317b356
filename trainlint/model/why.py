"""Why code runs, or does not run, every training step; what value the analysis sees: the decisions
of the per-step analysis told in words, for `trainlint explain FILE:LINE`.

Nothing here runs on the lint path: it re-reads what `TrainingModel` decided (`every_step`, the
gates of `gates.py`, the values of `values.py`) for one site at a time, and says why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import libcst as cst

from trainlint.model.branches import branch_not_taken, presence_gate
from trainlint.model.gates import (
    BOUNDARY_NAMES,
    _identifiers,
    _is_counter_equality,
    _is_diagnostic_level,
    _is_threshold,
    _presence_test,
    child_nodes,
    constant_test,
    empty_data_test,
    gate_words,
    has_modulo,
    is_inference_only_test,
    is_lazy_init_test,
    is_rank_name,
    is_training_test,
    mostly_true,
    sentinel_compared,
)
from trainlint.model.lattice import ACCEL, HOST, Kind, Value
from trainlint.model.walk import iter_nodes

if TYPE_CHECKING:
    from trainlint.model.facts import Function, Loop, Site
    from trainlint.model.training import TrainingModel

LineOf = Callable[[cst.CSTNode], int]  # a node's first line (the caller has the source's positions)


def name_list(where: str) -> str:
    """A name list as the rule pages name it (its name, and the file that holds it): "the name list
    `GATE_WORDS` of `trainlint/model/gates.py`"."""
    module, name = where.rsplit(".", 1)
    return f"the name list `{name}` of `trainlint/{module.replace('.', '/')}.py`"


def _local_gate_names(model: TrainingModel) -> dict[str, cst.CSTNode]:
    """Names bound to a periodic test (`is_log_step = step % n == 0`), as the extractor reads them."""
    out: dict[str, cst.CSTNode] = {}
    for a in model.assigns:
        value = a.value
        if a.op is None and len(a.targets) == 1 and "." not in a.targets[0] and isinstance(
            value, (cst.BinaryOperation, cst.Comparison, cst.BooleanOperation, cst.UnaryOperation)
        ) and has_modulo(value):
            out[a.targets[0]] = a.node
    return out


def gate_reason(model: TrainingModel, test: cst.BaseExpression, line_of: LineOf) -> str:
    """Why `if <test>:` is a gate, as `gates.is_gate_test` (and the extractor) decided it."""
    cached = {item.name.value for node in iter_nodes(model.module) if isinstance(node, cst.Global) for item in node.names}
    if is_lazy_init_test(test, cached):
        return "it builds what is missing (`... is None`): its body runs once, not every step"
    if sentinel_compared(test) is not None:
        return "it compares with the value the state starts at (negative, or a zero-filled buffer), which its body sets: it runs on the first call only"
    if empty_data_test(test):
        return "it tests whether the data is empty (no targets, no boxes): its body runs on the rare steps whose data says so"
    if constant_test(test) is False:
        return "its test is a constant false: its body never runs"
    if is_inference_only_test(test) or is_training_test(test):
        return "what runs while `self.training` (or a flag named for training, `is_train`) is false is the inference or evaluation path, which training steps do not take"
    if has_modulo(test) and not mostly_true(test) and not _presence_test(test):
        return "a periodic test (`%`): its body runs on some steps only"
    local = _local_gate_names(model)
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if _is_counter_equality(node):
            return "a step counter (named by a word of " + name_list("model.gates.COUNTER_WORDS") + ") compared with a constant: its body runs on one step"
        if _is_threshold(node):
            if _is_diagnostic_level(node):
                return "a debugging or verbosity level (named by a word of " + name_list("model.gates.DIAGNOSTIC_LEVEL_WORDS") + "), off in a training run"
            continue
        if isinstance(node, (cst.Name, cst.Attribute)):
            idents = _identifiers(node)
            for ident in idents:
                if ident in local:
                    return f"`{ident}` holds a periodic test (line {line_of(local[ident])}): its body runs on some steps only"
                if ident in model.settings.gate_names:
                    return f"`{ident}` is named in the `gate-names` setting"
                if ident in BOUNDARY_NAMES:
                    return f"`{ident}` marks an accumulation boundary: its body runs once per optimizer step"
                words = sorted(gate_words(ident))
                if words and not is_rank_name(idents[0]):  # (a rank test is no gate: `gates.is_rank_name`)
                    return f"`{ident}` holds `{words[0]}`, a word of " + name_list("model.gates.GATE_WORDS") + ": a flag of periodic work"
            continue
        stack.extend(child_nodes(node))
    return "its test says the body runs on some steps only"


def _code(model: TrainingModel, node: cst.CSTNode, limit: int = 60) -> str:
    text = " ".join(model.module.code_for_node(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _step_loop_of(site: Site) -> Loop | None:
    return next((loop for loop in site.loops if loop.is_step), None)


def step_verdict(model: TrainingModel, site: Site, line_of: LineOf) -> tuple[bool, list[str]]:
    """Whether code at `site` runs on every training step (as `TrainingModel.every_step` decides),
    and the decisions that made it so, in order."""
    fn = site.function
    if model.is_test_code:
        return False, ["test code: the per-step rules skip files under `tests/` and named `test_*.py` (`lint-test-code = true` checks them)"]
    if fn is not None and fn.runs_once:
        return False, [f"not per step: `{fn.qualified}` is memoised ({', '.join(f'`@{d}`' for d in fn.decorators)}): it computes once per argument"]
    if not model.in_step(site):
        return False, [_not_in_step(model, site, line_of)]
    reasons: list[str] = []
    loop = _step_loop_of(site)
    if loop is not None:
        base = site.loops.index(loop) + 1
        reasons.append(f"in the step loop at line {line_of(loop.node)} (`{_code(model, _loop_head(loop), 50)}`)")
    else:
        base = 0
        assert fn is not None  # (in a step with no step loop: a per-step function)
        reasons.append(_why_per_step(model, fn, line_of))
    if site.in_except:
        return False, [*reasons, "not every step: on the error path (an `except` handler, a `raise`, or an assert's message), which runs only when something failed, or past a `return`, `raise`, `continue` or `break` of its block, which never runs"]
    if branch_not_taken(model, site):
        return False, [*reasons, "not every step: in a branch the steps never take (every call of the function passes another value)"]
    given = presence_gate(model, site)
    if given is not None:
        where = f"`if {_code(model, given.test, 50)}:` (line {line_of(given)})"
        return False, [*reasons, f"not every step: gated by {where}: what it tests is None but on the steps of a periodic test that gives it"]
    branches = getattr(model, "_step_branches", set())
    nodes = site.gate_nodes or (None,) * len(site.gate_depths)
    for depth, node in zip(site.gate_depths, nodes):
        if node is None or depth < base:
            continue
        where = f"`if {_code(model, node.test, 50)}:` (line {line_of(node)})"
        if id(node) in branches:
            reasons.append(f"{where} is no gate: it holds the optimizer step, so its body runs on every training step")
            continue
        early = line_of(site.statement) > _last_line(node, line_of) if site.statement is not None else False
        verb = "after the early exit" if early else "gated by"
        return False, [*reasons, f"not every step: {verb} {where}: {gate_reason(model, node.test, line_of)}"]
    return True, [*reasons, "runs on every training step: no gate between it and the step"]


def _last_line(node: cst.If, line_of: LineOf) -> int:
    """The last line of an `if` (its last statement's first line is enough to tell what comes after)."""
    last: cst.CSTNode = node
    while True:
        body = getattr(last, "body", None)
        inner = getattr(body, "body", None) if body is not None else None
        if not inner:
            return line_of(last)
        last = inner[-1]


def _loop_head(loop: Loop) -> cst.CSTNode:
    node = loop.node
    return node.iter if isinstance(node, cst.For) else node.test


def _why_per_step(model: TrainingModel, fn: Function, line_of: LineOf) -> str:
    """Why a function runs every step: a chain of calls from a step loop, a hook, or its own step."""
    chains = model.step_chains(fn)
    if chains:
        steps = []
        for call in chains[0]:
            if isinstance(call, tuple):  # (a place in another module: path, line, column)
                steps.append(f"{call[0]}:{call[1]}")
            else:
                steps.append(f"line {line_of(call.node)} `{_code(model, call.node, 40)}`")
        return f"`{fn.qualified}` runs every step: called via " + " -> ".join(steps)
    if model._is_hook(fn):
        return f"`{fn.qualified}` is a per-step hook (a framework runs it every training step)"
    return f"`{fn.qualified}` updates the weights once per call and nothing here calls it: it is a training step"


def _not_in_step(model: TrainingModel, site: Site, line_of: LineOf) -> str:
    fn = site.function
    steps = [loop for loop in model.loops if loop.is_step and loop.function is fn and (loop.parent is None or not loop.parent.is_step)]
    if fn is not None and not site.loops:
        callers = [c for c in model.calls if fn in model.callees(c)]
        said = f"not per step: no chain from a step loop reaches `{fn.qualified}`"
        if not callers:
            return said + " (nothing in this module calls it, and no other module calls it every step)"
        lines = ", ".join(str(line_of(c.node)) for c in callers[:5])
        return said + f" (called at line{'s' if len(callers) > 1 else ''} {lines}, none of them on every step)"
    if steps:
        line = line_of(site.statement) if site.statement is not None else 0
        first = line_of(steps[0].node)
        if line and line < first:
            return f"not per step: before the step loop at line {first}; it runs once"
        if line:
            return f"not per step: after the step loop at line {line_of(steps[-1].node)}; it runs once, when that loop is done"
    if site.loops:
        loop = site.loops[-1]
        return f"not per step: the loop at line {line_of(loop.node)} is no step loop (no backward pass or optimizer step runs in it)"
    return "not per step: no step loop in this module holds this line, and no chain from one reaches it"


def describe_value(model: TrainingModel, expr: cst.BaseExpression, site: Site, line_of: LineOf) -> str:
    """What the analysis sees `expr` to be at `site`, and where a name got it: "`pad` is a host
    tensor: bound at line 380 (`pad = torch.tensor([0, 1])`)"."""
    value = model.value(expr, site)
    said = f"`{_code(model, expr, 40)}` is {value_phrase(value)}"
    base = expr
    while isinstance(base, (cst.Subscript, cst.Attribute)):  # `pad[0]`, `out.logits`: where `pad` came from
        base = base.value
    if base is not expr and isinstance(base, cst.Name):
        bound = model.reaching(site.function, base.value, site)
        if bound:
            where = "; ".join(f"line {line_of(a.node)} (`{_code(model, a.node, 50)}`)" for a in bound[:3])
            return f"{said}: `{base.value}` is bound at {where}"
    if isinstance(expr, cst.Name):
        bound = model.reaching(site.function, expr.value, site)
        if bound:
            where = "; ".join(f"line {line_of(a.node)} (`{_code(model, a.node, 50)}`)" for a in bound[:3])
            return f"{said}: bound at {where}"
        if site.function is not None and expr.value in site.function.params:
            return f"{said}: a parameter of `{site.function.qualified}`"
    return said


def value_phrase(value: Value) -> str:
    """An abstract value in words: "a tensor on the accelerator", "a host tensor", "a Python number"."""
    if value.kind is Kind.TENSOR:
        if value.device == HOST:
            return "a host tensor (its data lives in the CPU's memory)"
        if value.device == ACCEL:
            return "a tensor on the accelerator"
        return "a tensor that may be on the accelerator (its device is not known)"
    return {
        Kind.NUMBER: "a Python number (already on the host)",
        Kind.STRING: "a string",
        Kind.BOOL: "a Python bool",
        Kind.NONE: "None",
        Kind.HOST_ARRAY: "host data (a numpy array or the like)",
        Kind.COLLECTION: "a collection",
        Kind.MODULE: "a module",
        Kind.OPTIMIZER: "an optimizer",
        Kind.SCALER: "a loss scaler",
        Kind.SCHEDULER: "a scheduler",
        Kind.DATALOADER: "a data loader",
        Kind.OBJECT: f"an object{f' of `{value.origin}`' if value.origin else ''}",
        Kind.FUNCTION: "a function",
    }.get(value.kind, "unknown to the analysis")

