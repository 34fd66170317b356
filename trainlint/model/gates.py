"""Gates: conditions under which a statement in a training step does not run every step."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence, Set as AbstractSet

import libcst as cst

from trainlint.model.names import dotted, root_name, tokens
from trainlint.model.facts import Assign, Call
from trainlint.model.walk import is_node, iter_nodes

# words of a condition that make it periodic or a one-off (`log_interval`, `do_eval`, `print_freq`)
GATE_WORDS = frozenset(
    """log logging eval evaluate evaluation save saving print printing every interval verbose
    debug display report reporting checkpoint ckpt valid validate validation val visualize vis
    plot monitor profile profiling freq frequency period periodic first last test done""".split()
)  # (`done`: an episode's end, `if player.done:`, once per episode of a rollout, not every update)
# counters compared with a constant: `if step == 0`, `if i == 0`
COUNTER_WORDS = frozenset(
    "step steps iter iters iteration iterations it epoch batch idx i n global count counter updates update num".split()
)
# process ranks and pipeline stages: `if rank == 0:`, `if is_main_process():`, `if pgm.pp_is_last_stage:`
# hold on every step of one rank, which pays the cost every step while the others wait for it at
# the next collective: a rank test is no gate, whatever other words its name holds ("last", "first")
RANK_WORDS = frozenset("rank process master main world gpu gpus device devices node local size stage".split())
# accumulation boundaries: the statements under them run once per optimizer step, not per micro-batch
BOUNDARY_NAMES = frozenset({"sync_gradients"})


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
# fields that hold only whitespace, punctuation or operators: never an operand
_SKIPPED = ("whitespace", "lpar", "rpar", "comma", "dot", "semicolon", "colon", "equal", "star", "operator", "lbracket", "rbracket", "lbrace", "rbrace")


def gate_words(ident: str) -> list[str]:
    """The words of `GATE_WORDS` a name holds, as written or in their -ing form (`needs_displaying`,
    `is_plotting`, `validating`)."""
    found = []
    for token in tokens(ident):
        stem = token[:-3] if token.endswith("ing") else ""
        for word in (token, stem, stem + "e", stem[:-1] if stem[-2:-1] == stem[-1:] else ""):
            if word in GATE_WORDS:
                found.append(word)
                break
    return found


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """A node's children read from its fields (libcst's `.children` runs a visitor, far slower)."""
    names = _CHILD_FIELDS.get(type(node))
    if names is None:
        names = _CHILD_FIELDS[type(node)] = tuple(
            f.name for f in dataclasses.fields(node) if not f.name.startswith(_SKIPPED) and "whitespace" not in f.name
        )
    out: list[cst.CSTNode] = []
    for name in names:
        value = getattr(node, name)
        kind = value.__class__  # type tests first: isinstance on libcst's ABCs is slow
        if kind is list or kind is tuple:
            out.extend(value)  # libcst's sequence fields hold nodes only
        elif value is not None and kind is not str and is_node(value):
            out.append(value)
    return out


def has_modulo(expr: cst.CSTNode) -> bool:
    """Whether an expression contains `a % b` (string literals and nested functions are not searched)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        kind = node.__class__
        if kind is cst.BinaryOperation and node.operator.__class__ is cst.Modulo:  # type: ignore[attr-defined]
            left = node.left  # type: ignore[attr-defined]
            if not (isinstance(left, (cst.Name, cst.Attribute)) and is_rank_name(_identifiers(left)[0])):
                return True  # (`args.rank % ngpus_per_node == 0`: the first process of each node, every step)
        if kind in _NO_MODULO:
            continue
        stack.extend(child_nodes(node))
    return False


# leaves, and what has_modulo does not search (string literals, nested functions)
_NO_MODULO = frozenset(
    (cst.Name, cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString, cst.Lambda, cst.Modulo, cst.Add,
     cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Equal, cst.NotEqual, cst.LessThan, cst.GreaterThan,
     cst.LessThanEqual, cst.GreaterThanEqual, cst.Is, cst.IsNot, cst.In, cst.NotIn, cst.Not, cst.And, cst.Or)
)


def _identifiers(expr: cst.CSTNode) -> list[str]:
    if isinstance(expr, cst.Name):
        return [expr.value]
    if isinstance(expr, cst.Attribute):
        return [expr.attr.value, *_identifiers(expr.value)]
    if isinstance(expr, (cst.SimpleString, cst.Integer, cst.Float)):
        return []
    out: list[str] = []
    for child in child_nodes(expr):
        out.extend(_identifiers(child))
    return out


def _is_counter_equality(expr: cst.CSTNode, not_counters: frozenset[str] = frozenset()) -> bool:
    if not isinstance(expr, cst.Comparison) or len(expr.comparisons) != 1:
        return False
    comp = expr.comparisons[0]
    if isinstance(comp.operator, cst.In) and isinstance(comp.comparator, (cst.List, cst.Tuple, cst.Set)):
        # `if iteration in [10, 100, 1000]:`, a few chosen steps
        numbers = [e.value for e in comp.comparator.elements]
        return bool(numbers) and all(isinstance(n, cst.Integer) for n in numbers) and _is_counter(expr.left, COUNTER_WORDS)
    if not isinstance(comp.operator, cst.Equal):
        return False
    sides = (expr.left, comp.comparator)
    if not any(isinstance(s, cst.Integer) or _last_index(s) for s in sides):
        return False
    return any(
        _is_counter(s, COUNTER_WORDS) and not (isinstance(s, cst.Name) and s.value in not_counters) for s in sides
    )


def _last_index(expr: cst.BaseExpression) -> bool:
    """`len(pbar) - 1`: the index of a loop's last round (`if i == len(pbar) - 1:`, once an epoch)."""
    return (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Subtract) and isinstance(expr.right, cst.Integer)
            and expr.right.value == "1" and isinstance(expr.left, cst.Call) and dotted(expr.left.func) == "len")


def is_rank_name(ident: str) -> bool:
    """`rank`, `is_main_process`, `pp_is_last_stage`: a name (the last part of a dotted one) that says
    which process runs the code, not how often: true on every step of that process."""
    return bool(RANK_WORDS.intersection(tokens(ident)))


def _is_threshold(expr: cst.CSTNode) -> bool:
    """`x > 0`, `cfg.max_norm >= 1.0`: a value ordered against a number. Its names (`clip_val`) say
    nothing of how often it holds; counters in it (`epoch > 10`) make it hold from some step on."""
    return (
        isinstance(expr, cst.Comparison)
        and len(expr.comparisons) == 1
        and isinstance(expr.comparisons[0].operator, (cst.GreaterThan, cst.LessThan, cst.GreaterThanEqual, cst.LessThanEqual))
        and isinstance(_number(expr.comparisons[0].comparator) or _number(expr.left), (cst.Integer, cst.Float))
    )


# words of a level of diagnostic output: `if opt.debug > 0:` turns on what `if debug:` would
DIAGNOSTIC_LEVEL_WORDS = frozenset({"debug", "verbose", "verbosity"})


def _is_diagnostic_level(expr: cst.Comparison) -> bool:
    """`opt.debug > 0`, `verbose >= 2`: a debugging or verbosity level compared with a number, off in
    a training run (a threshold of any other name, `clip_val > 0`, is a setting and holds every step)."""
    operand = expr.left if _number(expr.left) is None else expr.comparisons[0].comparator
    if not isinstance(operand, (cst.Name, cst.Attribute)):
        return False
    return bool(DIAGNOSTIC_LEVEL_WORDS & set(tokens(_identifiers(operand)[0])))


def _number(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        expr = expr.expression
    return expr if isinstance(expr, (cst.Integer, cst.Float)) else None


def _compares_with_none(test: cst.BaseExpression, operator: type[cst.BaseCompOp]) -> bool:
    """`x is None` (operator `cst.Is`) or `x is not None` (`cst.IsNot`), alone in the test."""
    return (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, operator)
        and isinstance(test.comparisons[0].comparator, cst.Name)
        and test.comparisons[0].comparator.value == "None"
    )


def is_lazy_init_test(test: cst.BaseExpression, cached_globals: AbstractSet[str] = frozenset()) -> bool:
    """`if self.graph is None:` / `if cache is None:`: a body that runs once, to build what is missing
    (`if self.J is None or n > self.J.shape[-1]:` too: built again only when it is outgrown). A bare
    name qualifies when it is a module-level cache, one that a function declares `global` (`cached_globals`)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        return is_lazy_init_test(test.left, cached_globals)
    if not _compares_with_none(test, cst.Is):
        return _empty_test(test)
    left = test.left  # type: ignore[attr-defined]
    return isinstance(left, cst.Attribute) or (isinstance(left, cst.Name) and left.value in cached_globals)


def is_cached_value(expr: cst.IfExp) -> bool:
    """`x.cuda() if br is None else br` (or `... if self.mask is None else ...`): the body builds what the
    test finds missing, which the other branch gives afterwards; it runs once."""
    kept = dotted(expr.orelse)
    return is_lazy_init_test(expr.test) or (kept is not None and _compares_with_none(expr.test, cst.Is) and dotted(expr.test.left) == kept)  # type: ignore[attr-defined]


def is_first_value_test(node: cst.If, loop: cst.CSTNode | None) -> bool:
    """`if loss_ema is None: loss_ema = loss.item()` in a loop: the body gives the name its first value,
    so it runs on the loop's first round only (unless the loop sets the name back to None)."""
    test = node.test
    if loop is None or not _compares_with_none(test, cst.Is) or not isinstance(test.left, cst.Name):  # type: ignore[union-attr]
        return False
    name = test.left.value  # type: ignore[union-attr]

    def assigned(root: cst.CSTNode, to_none: bool) -> bool:
        return any(
            isinstance(n, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == name for t in n.targets)
            and (not to_none or (isinstance(n.value, cst.Name) and n.value.value == "None"))
            for n in iter_nodes(root)
        )

    return assigned(node.body, False) and not assigned(loop, True)


def sentinel_compared(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """What `x < 0`, `x <= -1` or `x == -1` compares with a negative sentinel, else None."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    operator, right = test.comparisons[0].operator, test.comparisons[0].comparator
    number = _number(right)
    if number is None:
        return None
    negative = right is not number
    zero = number.value.rstrip("0.") == ""  # (0, 0.0, 0.)
    if (isinstance(operator, cst.LessThan) and (negative or zero)) or (isinstance(operator, (cst.Equal, cst.LessThanEqual)) and negative and not zero):
        return test.left
    if isinstance(operator, cst.Equal) and zero and not negative and isinstance(test.left, cst.Subscript) and root_name(test.left) == "self":
        return test.left  # (an element of the object's zero-filled buffer, `self.freqs_cos[0, 0] == 0`, until the body computes it)
    return None


def is_latch_test(node: cst.If) -> bool:
    """`if not self.logged_image: self.logged_image = True; ...` (alone or as a conjunct): a body that
    sets the flag its test found unset runs once."""
    test, negated = node.test, []
    conjuncts = [test]
    while conjuncts:
        part = conjuncts.pop()
        if isinstance(part, cst.BooleanOperation) and isinstance(part.operator, cst.And):
            conjuncts += [part.left, part.right]
        elif isinstance(part, cst.UnaryOperation) and isinstance(part.operator, cst.Not) and dotted(part.expression):
            negated.append(dotted(part.expression))
    return bool(negated) and any(
        isinstance(n, cst.Assign) and isinstance(n.value, cst.Name) and n.value.value == "True"
        and any(dotted(t.target) in negated for t in n.targets)
        for n in iter_nodes(node.body)
    )


def is_sentinel_test(node: cst.If) -> bool:
    """`if Z < 0: self.params[2] = out.mean() * n; Z = self.params[2].item()`: state that starts at a
    negative sentinel and is set in the body to the value it keeps (the body writes the object's state:
    `self.params`, or the tested attribute itself), so the body runs on the first call only."""
    held = sentinel_compared(node.test)
    if not isinstance(held, (cst.Name, cst.Attribute, cst.Subscript)):
        return False
    targets = [e.value if isinstance(t.target, cst.Tuple) else t.target for n in iter_nodes(node.body) if isinstance(n, cst.Assign)
               for t in n.targets for e in (t.target.elements if isinstance(t.target, cst.Tuple) else (t,))]  # type: ignore[union-attr]
    if isinstance(held, cst.Name):  # a local read from the object's state before the test
        return any(isinstance(t, cst.Name) and t.value == held.value for t in targets) and any(
            isinstance(t, (cst.Attribute, cst.Subscript)) and root_name(t) == "self" for t in targets
        )
    whole = held.value if isinstance(held, cst.Subscript) else held  # (the buffer whose element is tested, replaced whole)
    return root_name(held) == "self" and any(t.deep_equals(held) or t.deep_equals(whole) for t in targets)


def _empty_test(test: cst.BaseExpression) -> bool:
    """`if not len(self.q):`, `if self.q.numel() == 0:`: an object's buffer, empty until the body fills it."""
    return _own_attribute(_emptied(test))


def empty_data_test(test: cst.BaseExpression) -> bool:
    """`if len(tgt_boxes) == 0:`, `if targets.numel() == 0:`: the branch for a batch with nothing in it
    (no targets, no boxes), taken on the rare steps whose data says so, as an `if` reading a tensor is."""
    held = _emptied(test)
    return held is not None and not _own_attribute(held)


def _own_attribute(expr: cst.BaseExpression | None) -> bool:
    """`self.q`: what the object holds."""
    return isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self"


def _emptied(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """What `test` tests for emptiness (`not len(x)`, `len(x) == 0`, `x.numel() == 0`), or None."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        size = test.expression
    elif isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.comparisons[0].operator, cst.Equal):
        zero = test.comparisons[0].comparator
        size = test.left if isinstance(zero, cst.Integer) and zero.value == "0" else None
    else:
        return None
    if not isinstance(size, cst.Call) or len(size.args) > 1:
        return None
    if isinstance(size.func, cst.Name) and size.func.value == "len" and size.args:
        return size.args[0].value
    if isinstance(size.func, cst.Attribute) and size.func.attr.value == "numel" and not size.args:
        return size.func.value
    return None


# the words of a flag that says whether a pass trains (`def run_epoch(loader, is_train):`, `train_mode`):
# a function that trains and evaluates, chosen by it; what runs while it is false is the evaluation pass
TRAINING_FLAG_WORDS = frozenset({"train", "training"})
_FLAG_FILLERS = frozenset({"is", "do", "in", "mode"})


def _training_flag(expr: cst.BaseExpression) -> bool:
    """`self.training` (nn.Module's mode, which `model.train()` sets on every submodule), or a name made
    of a word of `TRAINING_FLAG_WORDS` and fillers only (`is_train`, `training`, `self.train_mode`)."""
    text = dotted(expr)
    if text is None:
        return False
    if text == "self.training":
        return True
    words = set(tokens(text.rpartition(".")[2]))
    return bool(words & TRAINING_FLAG_WORDS) and words <= TRAINING_FLAG_WORDS | _FLAG_FILLERS


def is_inference_only_test(test: cst.BaseExpression) -> bool:
    """`if not self.training:` (also as a conjunct: `if not self.training and self.windowing:`): a
    module's inference path, not taken by the forward passes of training steps; likewise `if not
    is_train:`, the evaluation pass of a function that trains or evaluates as its flag says."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return is_inference_only_test(test.left) or is_inference_only_test(test.right)
    return isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) and _training_flag(test.expression)


def is_training_test(test: cst.BaseExpression) -> bool:
    """`if self.training:` (or `if is_train:`): the training path; its `else`, and what follows an
    early return in it, is the inference or evaluation path, which training steps do not take."""
    return _training_flag(test)


def after_training_test(else_of: Sequence[cst.If], node: cst.CSTNode) -> bool:
    """`node` (an `elif` or an `else:` block) follows `if self.training:` down its chain of `elif`s
    (`else_of`: the `if`s whose `orelse` is being visited, innermost last): the evaluation path."""
    for outer in reversed(else_of):
        if outer.orelse is not node:
            return False
        if is_training_test(outer.test):
            return True
        node = outer
    return False


def constant_test(test: cst.BaseExpression) -> bool | None:
    """`if True:` / `if 1:` (True), `if False:` / `if 0:` (False): a test written as a constant, whose
    other branch never runs (a switch edited by hand); None for any other test."""
    if isinstance(test, cst.Name) and test.value in ("True", "False"):
        return test.value == "True"
    if isinstance(test, cst.Integer):
        return test.evaluated_value != 0
    return None


def _presence_test(test: cst.BaseExpression) -> bool:
    """`if log_writer is not None:` (or `if not log_writer is None:`): whether an object was configured,
    true on every step or none."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _compares_with_none(test.expression, cst.Is)
    return _compares_with_none(test, cst.IsNot)


def mostly_true(test: cst.BaseExpression) -> bool:
    """`if step % 100:`, `if step % 100 != 0:`, `if step != capture_step:` (a step counter unequal to
    one value), or an `or` holding one: true on all steps but a few, the opposite of a gate (an early
    exit on it leaves the rest to those few)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        return mostly_true(test.left) or mostly_true(test.right)
    if isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo):
        return True
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or not isinstance(test.comparisons[0].operator, cst.NotEqual):
        return False
    left, right = test.left, test.comparisons[0].comparator
    if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo):
        return isinstance(right, cst.Integer) and right.value == "0"
    return any(_is_counter(a) and not has_modulo(b) for a, b in ((left, right), (right, left)))


def exit_gates(test: cst.BaseExpression, is_gate: Callable[[cst.BaseExpression], bool], negated_gate: Callable[[cst.BaseExpression], bool]) -> bool:
    """Whether an early exit (`if <test>: ...; return`) leaves the rest of its block to some steps: a
    test true on most steps (`if step % 10 != 0:`, `if step - last < interval:`, `if not do_log:`), or
    a training test (the rest is the inference path). Not one true on few (`if step % 100 == 0:`, `if
    num_boxes == 0: continue`): the rest runs on all the others."""
    rarely = empty_data_test(test) or isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.comparisons[0].operator, cst.Equal) and (
        has_modulo(test) or _is_counter_equality(test)
    )
    return is_gate(test) and not rarely or negated_gate(test) or mostly_true(test) or is_training_test(test)


# the counters of training steps (not of items within one: `batch`, `idx`, `n`)
STEP_COUNTER_WORDS = frozenset("step steps iter iters iteration iterations it epoch".split())


def _is_counter(expr: cst.BaseExpression, counters: frozenset[str] = STEP_COUNTER_WORDS) -> bool:
    """`step`, `self.global_step`: a name whose words say it is one of `counters` (not a rank)."""
    if not isinstance(expr, (cst.Name, cst.Attribute)):
        return False
    words = set(tokens(_identifiers(expr)[0]))
    return bool(counters & words) and not RANK_WORDS & words


def is_gate_test(
    test: cst.BaseExpression, gate_names: set[str], extra_gates: frozenset[str], not_counters: frozenset[str] = frozenset()
) -> bool:
    """Whether `if <test>:` runs its body only on some steps (periodically, once, or at a boundary);
    `not_counters`: names that index something within a step (a library hook's `optimizer_idx`)."""
    if _presence_test(test) or mostly_true(test):
        return False
    if has_modulo(test) or empty_data_test(test):
        return True
    stack: list[cst.CSTNode] = [test]
    while stack:
        node = stack.pop()
        if _is_counter_equality(node, not_counters):
            return True
        if _is_threshold(node):
            if _is_diagnostic_level(node):
                return True  # `if opt.debug > 0:`: a level of debugging output, as `if debug:` is a flag of it
            continue  # `if self.gradient_clip_val > 0:` holds on every step or on none: a setting, no gate
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not) and isinstance(node.expression, (cst.Name, cst.Attribute)):
            continue  # `not cross_valid`, `not do_log`: true on the steps the flag leaves out, every training step
        if isinstance(node, (cst.Name, cst.Attribute)):
            idents = _identifiers(node)
            if any(ident in gate_names or ident in extra_gates or ident in BOUNDARY_NAMES for ident in idents):
                return True
            if not is_rank_name(idents[0]) and any(gate_words(ident) for ident in idents):
                return True
            continue
        stack.extend(child_nodes(node))
    return False


def boundary_branches(module: cst.Module, calls: Sequence[Call], assigns: Sequence[Assign], branches: set[int]) -> set[int]:
    """The `if`s that run once per optimizer step as the step branches (`branches`, the `if`s holding
    the step) do: an accumulation boundary (`if accelerator.sync_gradients:`), and an `if` testing
    exactly what a step branch of its function tests, none of the test's names rebound there (`if step
    % ratio == 0:` holding the generator's step, and a later one logging its losses: KAIR's GAN)."""
    nodes: list[tuple[cst.If, int]] = []
    seen: set[int] = set()
    for call in calls:
        for node in call.site.gate_nodes:
            if node is not None and id(node) not in seen:
                seen.add(id(node))
                nodes.append((node, id(call.site.function)))
    out = {id(node) for node, _ in nodes if "sync_gradients" in (dotted(node.test) or "")}
    code = module.code_for_node
    stepped = {(fn, code(node.test).strip()) for node, fn in nodes if id(node) in branches}
    rebound = {(id(a.site.function), t) for a in assigns for t in a.targets} if stepped else set()
    for node, fn in nodes:
        if id(node) in branches or (fn, code(node.test).strip()) not in stepped:
            continue
        names = {n.value for n in iter_nodes(node.test) if isinstance(n, cst.Name)}
        if not any((fn, n) in rebound for n in names):
            out.add(id(node))
    return out


def isinstance_tests(gates: Sequence[cst.If | None]) -> Iterator[tuple[cst.BaseExpression, list[cst.BaseExpression], bool]]:
    """Each enclosing `if isinstance(x, T):`, `if isinstance(x, (A, B)):` or `if not isinstance(...)`
    of a site's `gate_nodes`: the object tested, the classes, and whether the test is negated."""
    for gate in gates:
        test = gate.test if gate is not None else None
        negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
        inner = test.expression if negated else test  # type: ignore[union-attr]
        if isinstance(inner, cst.Call) and dotted(inner.func) == "isinstance" and len(inner.args) == 2:
            classes = inner.args[1].value
            yield inner.args[0].value, [e.value for e in classes.elements] if isinstance(classes, cst.Tuple) else [classes], negated
