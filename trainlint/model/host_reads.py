"""What reads a tensor's value on the host, beyond `.item()`: Python's builtins ordering tensors,
%-formatting, a chain of host copies, a count argument given as a tensor, a lambda that copies to the
host; metric loggers, the header a call sits in, and the reads of passed values reported at the callers.
Facts of values that TL401 asks about each call of a per-step line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

import libcst as cst

from trainlint.model.arguments import argument_for
from trainlint.model.extract import calls_in
from trainlint.model.facts import Call, Site
from trainlint.model.lattice import ACCEL, HOST, Kind, Value
from trainlint.model.names import dotted, root_name, tokens
from trainlint.model.moving_helpers import copied_from_device
from trainlint.model.plain_bindings import host_type
from trainlint.model.device_arguments import moved_to_device
from trainlint.model.summarizer import loop_names_over, passes_on, read_arguments
from trainlint.model.summary import ARGUMENT_READS
from trainlint.model.walk import iter_nodes

if TYPE_CHECKING:
    from trainlint.model.facts import Function
    from trainlint.model.summary import FunctionSummary
    from trainlint.model.training import TrainingModel

SYNC_METHODS = frozenset({"item", "cpu", "tolist", "numpy"})


def orders_tensors(model: TrainingModel, call: Call, site: Site) -> bool:
    """`max(lengths)` over a tensor or a list of tensors, or `max(torch.norm(y) ** 2, 1e-6)` with a
    tensor among its arguments: Python's builtin compares them with `>` and asks each answer's truth,
    reading it on the host. (Each argument is judged by its own value: `max(n, 1)` with `n` a number
    already read is none.)"""
    args = [a.value for a in call.node.args if a.keyword is None and not a.star]
    if len(args) > 1 and len(args) == len(call.node.args):
        return any(device_tensor(model.value(a, site)) for a in args)
    if len(args) != 1:
        return False
    value = model.value(args[0], site)
    element = value.element if value.kind is Kind.COLLECTION else None
    return device_tensor(value) or (element is not None and device_tensor(element))


def formats_tensor(model: TrainingModel, expr: cst.BaseExpression, site: Site) -> bool:
    """`"loss %f" % (loss,)`: %-formatting converts each tensor operand on the host."""
    if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo)):
        return False
    if not _string_expression(expr.left):
        return False
    right = expr.right
    operands = [e.value for e in right.elements] if isinstance(right, cst.Tuple) else [right]
    return any(device_tensor(model.value(v, site)) for v in operands)


def _string_expression(expr: cst.BaseExpression) -> bool:
    """A string literal, or one built from literals (YOLO's `('%11s' * 2 + '%11.4g' * 5) % (...)`):
    what makes `%` formatting, not a remainder."""
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    if not isinstance(expr, cst.BinaryOperation):
        return False
    if isinstance(expr.operator, cst.Add):
        return _string_expression(expr.left) and _string_expression(expr.right)
    if isinstance(expr.operator, cst.Multiply):
        return (_string_expression(expr.left) and isinstance(expr.right, cst.Integer)) or (isinstance(expr.left, cst.Integer) and _string_expression(expr.right))
    return False


def chain_base(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`out.argmax(1).cpu()` for the chain `out.argmax(1).cpu().numpy()`: one finding, judged at its first copy."""
    while (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in SYNC_METHODS
        and not expr.args
    ):
        expr = expr.func.value
    return expr


def bare_numpy(call: Call) -> bool:
    """A chain of host copies whose first is `.numpy()` (`t.detach().numpy()`, `t.numpy().tolist()`):
    torch raises on a device tensor rather than copy it, so where this runs the tensor is on the host
    and nothing waits."""
    expr: cst.BaseExpression = call.node
    first = ""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in SYNC_METHODS and not expr.args:
        first, expr = expr.func.attr.value, expr.func.value
    return first == "numpy"


# torch functions whose count is a Python int (the parameter, its place after the input): given a
# tensor, torch reads its value on the host (`torch.topk(cost, k=dynamic_ks[i])`); `repeat_interleave`
# reads the sum of its `repeats` to size its output unless it is given `output_size` (torch's docs)
COUNT_PARAMETERS = {"topk": ("k", 1), "kthvalue": ("k", 1), "multinomial": ("num_samples", 1), "repeat_interleave": ("repeats", 1)}
# and functions given lengths that they copy to the CPU, as a tensor or a list of its elements
# (`pack_padded_sequence(x, list(lengths))`: `torch.as_tensor(lengths, device="cpu")` reads each)
HOST_LENGTHS = {"torch.nn.utils.rnn.pack_padded_sequence": ("lengths", 1)}
GIVEN_A_TENSOR = "the tensor given for the Python int"

def count_argument(call: Call) -> tuple[str, cst.BaseExpression | None]:
    """The count parameter and argument of `torch.topk(x, k)` or `x.topk(k)`, if the call has one (also
    the lengths of `pack_padded_sequence(x, lengths)`, `HOST_LENGTHS`: the tensor a `list(...)` of them iterates)."""
    name = call.qualname.rsplit(".", 1)[-1] if call.qualname in (f"torch.{n}" for n in COUNT_PARAMETERS) else None
    if name is None and call.method in COUNT_PARAMETERS and call.qualname is None:
        name = call.method
    if (name is None and call.qualname not in HOST_LENGTHS) or any(a.keyword is not None and a.keyword.value == "output_size" for a in call.node.args):
        return "", None
    keyword, position = COUNT_PARAMETERS[name] if name is not None else HOST_LENGTHS[call.qualname]  # type: ignore[index]
    position -= 1 if call.method == name and call.qualname is None else 0
    positional = [a.value for a in call.node.args if a.keyword is None and not a.star]
    named = [a.value for a in call.node.args if a.keyword is not None and a.keyword.value == keyword]
    given = named[0] if named else positional[position] if len(positional) > position else None
    if name is None and isinstance(given, cst.Call) and dotted(given.func) in ("list", "tuple") and len(given.args) == 1:
        given = given.args[0].value
    return keyword, given


def count_on_device(keyword: str, value: Value) -> bool:
    """What a count argument holds lives on the accelerator: a tensor that may (`device_tensor`); for
    lengths, one known to (what a module gives, of unknown place, may be the host list it returned)."""
    return device_tensor(value) if keyword != "lengths" else (value.is_tensor and value.device == ACCEL) or moved_to_device(value)


def device_tensor(value: Value) -> bool:
    """A tensor that may live on the accelerator (known to be a tensor, not known to be on the host)."""
    return value.is_tensor and value.device != HOST

SIZED_FACTORIES = frozenset(f"torch.{n}" for n in "arange zeros ones empty randn rand randint full linspace eye randperm".split())
SIZE_KEYWORDS = frozenset({"size", "start", "end", "step", "steps", "low", "high", "n", "fill_value"})
SIZED_METHODS = frozenset({"new_zeros", "new_ones", "new_empty", "new_full"})


def converted_on_host(value: Value) -> bool:
    """What `float(x)`/`int(x)`/`bool(x)` reads from the accelerator: a device tensor, or something unnamed
    moved there (`for row in y:` of `y = y.to(device)`), since a module or a batch object has no number to give."""
    return device_tensor(value) or moved_to_device(value)


def sized_by_device_tensor(model: TrainingModel, call: Call, site: Site) -> bool:
    """`torch.arange(lengths.max())`, `torch.full((b,), sigma)`: a torch factory given a tensor on the
    accelerator as a size, bound or fill value, which torch reads on the host before it allocates;
    also a tensor's own factories (`dur.new_zeros([b, word_id.max() + 1])`)."""
    if call.qualname not in SIZED_FACTORIES and not (call.qualname is None and call.method in SIZED_METHODS):
        return False
    given = [a.value for a in call.node.args if a.keyword is None or a.keyword.value in SIZE_KEYWORDS]
    given = [e.value for g in given for e in (g.elements if isinstance(g, (cst.Tuple, cst.List)) else [cst.Element(g)]) if isinstance(e, cst.Element)]
    return any((v := model.value(g, site)).is_tensor and v.device == ACCEL and not _no_tensor_here(model, g, site) for g in given)


def _no_tensor_here(model: TrainingModel, expr: cst.BaseExpression, site: Site) -> bool:
    """`t` under `if not torch.is_tensor(t):` (or `not isinstance(t, torch.Tensor)`): whatever else
    the name may hold, here it is no tensor (voicebox's `torch.arange(t, device=self.device)`)."""
    if not isinstance(expr, cst.Name):
        return False
    for gate in site.gate_nodes:
        test = gate.test if gate is not None and gate not in site.else_of else None
        inner = test.expression if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) else None
        if isinstance(inner, cst.Call) and inner.args and isinstance(inner.args[0].value, cst.Name) and inner.args[0].value.value == expr.value:
            name = model.imports.resolve(inner.func)
            kind = model.imports.resolve(inner.args[1].value) if name == "isinstance" or (name is None and len(inner.args) == 2) else None
            if name == "torch.is_tensor" or kind == "torch.Tensor":
                return True
    return False


def typed_to_host(model: TrainingModel, call: Call) -> bool:
    """`mask.type(torch.FloatTensor)` of a tensor on the accelerator: a copy to the host (`.cpu()`) and a cast."""
    if call.method != "type" or len(call.node.args) != 1 or call.receiver is None or not host_type(model, call.node.args[0].value):
        return False
    receiver = model.value(call.receiver, call.site)
    return receiver.device == ACCEL and receiver.kind in (Kind.TENSOR, Kind.UNKNOWN)


def copies_to_host(model: TrainingModel, expr: cst.BaseExpression, site: Site) -> bool:
    """A lambda's body, inlined at a call, that copies a device tensor to the host: `x.item()`,
    `x.cpu()`, `x.numpy()`, `x.tolist()`, or `x.to(<the CPU>)`."""
    if not isinstance(expr, cst.Call) or not isinstance(expr.func, cst.Attribute):
        return False
    method, args = expr.func.attr.value, expr.args
    if method == "to":
        first = args[0] if args and (args[0].keyword is None or args[0].keyword.value == "device") else None
        if first is None or not model.values.spells_cpu(first.value, site.function, site):
            return False
    elif method not in SYNC_METHODS or args:
        return False
    receiver = model.value(expr.func.value, site)
    return receiver.is_tensor and not receiver.on_host

METRIC_LOGGERS = frozenset({"wandb.log", "mlflow.log_metric", "mlflow.log_metrics"})
METRIC_METHODS = frozenset({"add_scalar", "add_scalars"})


def header_calls(model: TrainingModel, nodes: list[cst.CSTNode]) -> dict[int, int]:
    """For the calls among `nodes` in a compound statement's header (an `if`/`while` test, a `for`'s
    iterable), which have no statement line: the header they are in."""
    wanted = {id(n) for n in nodes}
    out: dict[int, int] = {}
    headers = [cond.node for cond in model.conditions if cond.kind != "ifexp"] + [loop.node.iter for loop in model.loops if isinstance(loop.node, cst.For)]
    for header in headers:
        for call in calls_in(header):
            if id(call) in wanted:
                out.setdefault(id(call), id(header))
    return out


def reported_at_callers(model: TrainingModel, call: Call) -> bool:
    """A read of a value the caller passed (`v.item()` of a parameter), in a function that runs every
    step because project code calls it: the callers that pass a device tensor are reported, where the
    value is known (`metric_logger.update(loss=loss)`), and the read is not reported again here (one
    finding per defect). So is a read of another parameter in the same statement, whose value the
    callers cannot tell (`zip(phone.cpu().numpy(), src_len.cpu().numpy())`): the statement is one defect,
    reported at the calls. A step hook's parameters come from the framework: its reads stay its own."""
    memo: dict[int, bool] = model.__dict__.setdefault("_reads_reported_at_callers", {})
    if id(call) not in memo:
        memo[id(call)] = _reported_alone(model, call)
    if memo[id(call)]:
        return True
    fn, statement = call.site.function, call.site.statement
    if fn is None or statement is None or call.method not in SYNC_METHODS or call.receiver is None or root_name(chain_base(call.receiver)) not in fn.params:
        return False
    others = [c for c in model.calls if c is not call and c.site.statement is statement]
    return any(memo[id(c)] if id(c) in memo else memo.setdefault(id(c), _reported_alone(model, c)) for c in others)


def _reported_alone(model: TrainingModel, call: Call) -> bool:
    fn = call.site.function
    if fn is None or call.method not in SYNC_METHODS or call.receiver is None or fn.name in ("forward", "__call__"):
        return False
    read = chain_base(call.receiver)  # (a chain of copies reads what its first copies: `targets.cpu().numpy()`)
    if read is call.receiver and call.method not in ARGUMENT_READS:
        return False
    return callers_report(model, fn, read, call.site)


def passes_device_tensor(model: TrainingModel, call: Call, summary: FunctionSummary) -> bool:
    """Whether a call of a function that reads its arguments on the host (`summary.reads_arguments`)
    passes a device tensor where it reads one: reported here, unless this function only hands on what
    it was given as it came (`self.preprocess(targets)`), which its own callers report."""
    site = call.site
    unpacked = {id(a.value) for a in call.node.args if a.star}
    for given in read_arguments(call.node, summary):
        value = model.value(given, site)
        if id(given) in unpacked and value.kind is Kind.COLLECTION and value.element is not None:
            value = value.element  # (`update(**losses)`: the function reads each value the dict holds)
        # (what the function reads is a tensor, so a batch moved to the device is one: `y.cuda()`)
        # (a module's `forward` hands nothing on to its callers: its reads stay where its code is)
        if (device_tensor(value) or (summary.read_parameters and moved_to_device(value))) and not (
            site.function is not None and site.function.name != "forward" and (callers_report(model, site.function, given, site) or _handed_on_unknown(model, site, given, value))
        ):
            return True
    return False


def _handed_on_unknown(model: TrainingModel, site: Site, given: cst.BaseExpression, value: Value) -> bool:
    """A parameter of the calling function handed on as it came, of a place no one knows (a tensor by
    its annotation, `nums_k2: torch.Tensor`, that its own callers pass from what they cannot see): the
    function reading it reports the read itself, as its callers do not (`callers_report`)."""
    fn = site.function
    return fn is not None and value.device != ACCEL and root_name(given) in fn.params and passes_on(model, fn, given, site)


def callers_report(model: TrainingModel, fn: Function, read: cst.BaseExpression, site: Site) -> bool:
    """Whether the callers of `fn` report its read of `read` at `site` (`reported_at_callers`), also
    where `fn` hands the value on as it came to a function that reads it (`self.preprocess(targets)`
    in `ComputeLoss.__call__`): a value they pass, which they know to be on the accelerator."""
    if fn.parent is not None or model._outermost_step_loop(site) is not None or model._is_hook(fn) or not model.step_chains(fn):
        return False
    # the callers report a passed tensor they know is on the accelerator; a value the helper only
    # guesses is one (`.item()` of an unknown) stays reported here, where the callers are silent
    value = model.value(read, site)
    # (an element of a collection passed whole, `for k, v in kwargs.items(): v.item()`, is what each
    # caller passed there: they report the device tensors among them)
    element = value.kind is Kind.UNKNOWN and root_name(read) in loop_names_over(fn, site, set(fn.params) - {"self", "cls"}, model)
    # (a parameter some callers pass a device tensor for and others something unknown: those callers
    # report it, where the tensor is known, when the function's summary tells them that it reads it)
    name = root_name(read)
    facts = _reported_facts(model, fn, name) if name in fn.params else set()
    if facts and not facts & {"tensor", "device"} and not facts <= {"host"} and value.device != ACCEL:
        return False  # (no caller knows it passes a tensor: none would report it)
    # (where every caller passes a host copy, `labels = batch.cpu()`, the read waits for nothing)
    given = value.kind is Kind.UNKNOWN and bool({"tensor", "device"} & facts or (facts and facts <= {"host"}))
    return bool(device_tensor(value) or element or given) and passes_on(model, fn, read, site)


def _reported_facts(model: TrainingModel, fn: Function, name: str, depth: int = 0) -> set[str]:
    """What the calls of `fn` pass for parameter `name`, as the callers that would report it know it
    ("device", "tensor", "host", "?"): other modules' calls (`passed_facts`, where they see `fn` reading
    it) and this module's, also through its functions that hand on a parameter of theirs as it came
    (`self.preprocess(targets)` in a `__call__` other modules call with the labels)."""
    facts = set(model.passed_facts(fn, name) or ()) if _seen_reading(model, fn) else set()
    params = fn.explicit_params
    if depth >= 3 or name not in params:
        return facts
    for call in model.calls_of(fn):
        caller, given = call.site.function, argument_for(call.node, f"{params.index(name)} {name}")
        if caller is fn or given is None:
            continue
        handed = root_name(given) if caller is not None and passes_on(model, caller, given, call.site) else None
        if caller is not None and handed in caller.params:
            facts |= _reported_facts(model, caller, handed, depth + 1)  # type: ignore[arg-type]
            continue
        value = model.value(given, call.site)
        facts.add("device" if device_tensor(value) or moved_to_device(value) else "host" if value.on_host else "?")
    return facts


def _seen_reading(model: TrainingModel, fn: Function) -> bool:
    """Whether other modules see `fn` (through this module's summary) reading what they pass it: only
    then do their calls report the read (a module of an import cycle may be known by its names only)."""
    from trainlint.model.summary import FunctionSummary

    seen = model.project_symbol(f"{model.resolved_path}::{fn.qualified}") if model.path else None
    return isinstance(seen, FunctionSummary) and seen.reads_arguments


def is_metric_log(model: TrainingModel, call: Call) -> bool:
    """`wandb.log({...})`, `writer.add_scalar(tag, value, step)`: loggers convert tensors on the host.
    The writer may be a project module's (`from utils.logger import TB_LOGGER`, an object of its own
    class handing `add_scalar` on to a `SummaryWriter` through `__getattr__`)."""
    if call.qualname in METRIC_LOGGERS:
        return True
    if call.method not in METRIC_METHODS:
        return False
    return call.qualname is None or (model.project_symbol(call.qualname) is None and model._in_project(call.qualname.rpartition(".")[0]))


def truth_tested(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The test and the operands Python truth-tests first, whatever the others hold: the left operand
    of an `and` or an `or` (`if (t.isnan().any() or t.isinf().any()) and DEBUG:` reads a tensor every
    time); a right operand runs only as its left one decides (`if DEBUG and t.isnan().any():`,
    `if queue_full or not torch.all(q == 0):` are gated by the flag)."""
    out = [test]
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    if isinstance(test, cst.BooleanOperation):
        out.extend(truth_tested(test.left))
    return out


def in_optimizer_class(site: Site, model: TrainingModel) -> bool:
    """Code of an optimizer or loss-scaler class: its step must read flags on the host (torch's own
    `GradScaler.step` calls `.item()`), so the sync is the implementation's, not the training loop's.
    Named so (`...Optimizer`, `...Scaler`, or a base so named), or shaped so: a class of its own (a
    LARS wrapper) defining `step` and `zero_grad` over the `param_groups` an optimizer holds."""
    fn = site.function
    if fn is None or fn.class_name is None:
        return False
    words = set(tokens(fn.class_name)).union(*(tokens(b) for b in fn.class_bases))
    if words & {"optimizer", "scaler"}:
        return True
    info = model.local_class(fn.class_name)
    return info is not None and {"step", "zero_grad"} <= info.methods.keys() and any(
        isinstance(n, cst.Attribute) and n.attr.value == "param_groups" for n in iter_nodes(info.methods["step"].node)
    )


# what takes a number: `total += loss.data[0]`, `losses.append(...)`, `meter.update(...)`, `float(...)`
_NUMBER_TAKERS = frozenset({"append", "update", "add", "float", "int", "round", "print", "str"})
LEGACY_READ = "(PyTorch 0.3's read of a one-element tensor, which 0.4 replaced with `.item()`: it fails on a 0-dim tensor)"
INDEX_READS = {  # how each kind of read by indexing is described, and its kind for `trainlint verify run`
    "bound": lambda text: (f"slicing by tensor `{text}` (a slice bound is read as a Python int)", "value read"),
    "into host": lambda text: (f"copying device tensor `{text}` into a tensor on the host", "host copy"),
    "legacy": lambda text: (f"`{text}` {LEGACY_READ}", "value read"),
}


def index_reads(model: TrainingModel, judged: Callable[[Site], bool]) -> Iterator[tuple[Site, cst.BaseExpression, str]]:
    """Reads by indexing, in the statements of the sites `judged` accepts, each with its kind: "bound",
    the bounds of slices (`x[:, :max_len]`, `ws[:, cutoff:]`) that are tensors on the accelerator,
    which Python turns into an int with `__index__`, reading a 0-dim tensor's value on the host (as
    `.item()` does; an index tensor, `x[idx]`, is no bound: the device gathers with it); "into host",
    a device tensor assigned into a tensor built on the host (`x_pad[:, :n] = x` after
    `x_pad = torch.zeros(...)`: a blocking copy to pageable host memory); and "legacy",
    `loss.data[0]` of a tensor on the accelerator taken as a number (added up, appended, handed to a
    meter's `update`, printed)."""
    for a in model.assigns:
        target = a.node.targets[0].target if isinstance(a.node, cst.Assign) and len(a.node.targets) == 1 else None
        if isinstance(target, cst.Subscript) and judged(a.site):
            into = model.value(target.value, a.site)
            if into.kind is Kind.TENSOR and into.device == HOST and copied_from_device(model, a.value, a.site):
                yield a.site, a.value, "into host"
    sites = [c.site for c in model.calls] + [a.site for a in model.assigns]
    sites.extend(r.site for fn in model.functions for r in fn.return_facts)
    seen: set[int] = set()
    for site in sites:
        statement = site.statement
        if statement is None or id(statement) in seen or not judged(site):
            continue
        seen.add(id(statement))
        for node in iter_nodes(statement):
            if isinstance(node, cst.Slice):
                for bound in (node.lower, node.upper, node.step):
                    # (something unnamed moved to the accelerator is a tensor here: a module or a batch
                    # object is never a slice bound)
                    if bound is not None and converted_on_host(model.value(bound, site)):
                        yield site, bound, "bound"
            taken = [node.value] if isinstance(node, cst.AugAssign) else []
            if isinstance(node, cst.Call) and _called_name(node.func) in _NUMBER_TAKERS:
                taken = [a.value for a in node.args]
            for value in taken:
                if _legacy_read(model, value, site):
                    yield site, value, "legacy"


def _called_name(func: cst.BaseExpression) -> str | None:
    """`append` of `hist["loss"].append(...)` (whatever the receiver is), `float` of `float(...)`."""
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else None


def _legacy_read(model: TrainingModel, expr: cst.BaseExpression, site: Site) -> bool:
    """`loss.data[0]` of a tensor on the accelerator."""
    if not isinstance(expr, cst.Subscript) or len(expr.slice) != 1 or not isinstance(expr.value, cst.Attribute):
        return False
    index = expr.slice[0].slice
    if not (isinstance(index, cst.Index) and isinstance(index.value, cst.Integer) and index.value.value == "0"):
        return False
    return expr.value.attr.value == "data" and device_tensor(model.value(expr.value.value, site))


def drained_by(model: "TrainingModel", synced_tests: set[int], per_step: Callable[[Site], bool]) -> Callable[[Site], bool]:
    """Whether a site runs right after a test that read device values (`synced_tests`: ids of `if` and
    `while` tests) drained the device's queue: in the body of such an `if` or `while`, in its `else`, or in the rest of the block
    after one that exits early (`if loss == 0: continue`) while nothing has queued device work since
    the test (a backward or an optimizer step between them makes the next read wait again)."""
    tested_at = {id(cond.node): cond.site.order for cond in model.conditions if id(cond.node) in synced_tests}
    # (a scheduler's or an environment's `.step()` queues nothing on the device)
    queued = [c for c in model.calls if c.method in ("backward", "step") and (model.is_backward(c) or model.is_optimizer_step(c)) and per_step(c.site)]

    def after(site: Site) -> bool:
        if any(n is not None and id(n.test) in synced_tests for n in site.gate_nodes):
            return True
        if any(type(loop.node) is cst.While and id(loop.node.test) in synced_tests for loop in site.loops):
            return True
        return any(
            id(n.test) in synced_tests and (n.orelse is not None or not any(
                c.site.function is site.function and tested_at[id(n.test)] < c.site.order < site.order and n not in c.site.gate_nodes for c in queued
            ))
            for n in site.else_of
        )

    return after
