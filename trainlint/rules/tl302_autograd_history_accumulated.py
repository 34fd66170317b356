"""TL302 autograd-history-accumulated."""

from __future__ import annotations

import re
from typing import Callable, Iterator

import libcst as cst

from trainlint.diagnostics import Applicability, Severity
from trainlint.model.fix_safety import may_be_differentiated
from trainlint.model import Assign, Call, Loop, Site, TrainingModel
from trainlint.model.lattice import Kind
from trainlint.model.state_resets import reset_before, reset_earlier
from trainlint.model.arguments import argument_for
from trainlint.model.names import dotted
from trainlint.rules.rule import Finding, NodeEdit, NodeFix, Rule, shorten


# a codebook keeping what a reduction along a dimension gives, step after step (for the examples)
_KEPT_CODES = """
import torch
from torch import nn

class Quantize(nn.Module):
    def __init__(self, dim, n_embed):
        super().__init__()
        self.proj = nn.Linear(dim, n_embed)
        self.codes = None

    def forward(self, x):
        {unpack} = self.proj(x).max(1)
        self.codes = {kept} if self.codes is None else torch.cat([self.codes, {kept}])
        return self.proj(x)

model = Quantize(4, 8)
for x in loader:
    model(x).mean().backward()
    optimizer.step()
"""

_ADDED_TO_ITSELF = re.compile(r"\b([\w.]+)[ \t]*=[ \t]*\1[ \t]*\+")


class AutogradHistoryAccumulated(Rule):
    code = "TL302"
    name = "autograd-history-accumulated"
    severity = Severity.ERROR
    summary = "A tensor carrying autograd history kept across steps: `total += loss`, `losses.append(loss)`, `self.h = f(x, self.h)`."
    hint = "Keep a detached copy: `total += loss.detach()` (or `.item()` at log steps only)."
    requires = ("+=", ".append(", "self.", "+")

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        # `total += loss`, `losses.append(loss)`, state on `self`, or `total = total + loss`
        return any(t in source for t in ("+=", ".append(", "self.")) or _ADDED_TO_ITSELF.search(source) is not None
    per_step = True
    why = (
        "A loss or model output references the whole autograd graph that produced it, with every saved "
        "activation. Adding it into a running total, appending it to a list or storing it on `self` keeps "
        "that graph alive after the step: accumulated, memory grows every step until the GPU runs out; "
        "stored, the last step's graph is held twice. The PyTorch FAQ: \"Don't accumulate history across "
        "your training loop ... total_loss += loss ... fix this by writing total_loss += float(loss)\"."
        " `total = total + loss` accumulates as `total += loss` does (the fix detaches the term added)."
        " A term of the loss a step backpropagates (`loss = loss_b + 0.9 * loss_r`, then `loss.backward()`) carries the graph,"
        " whatever computed it: accumulating `loss_r` is flagged (unsafe fix unless it is known to be a tensor, not a number)."
        " A helper of the module that accumulates only what it is given (`AverageMeter.update`'s "
        "`self.sum += val * n`) keeps the graphs of the calls that hand it a tensor with one: the finding is "
        "at each such call in a step (`losses.update(total_loss, n)`; a data timer handed numbers is fine), "
        "with an unsafe fix detaching the argument."
    )
    story = (
        "Field report 004: persistent tensors on `self` without detachment and retained graphs: CUDA OOM "
        "(28+ GB) on batch 2; the fix added `detach_persistent_tensors()`. pytorch/pytorch #1840: "
        "\"will keep the graph of all previous timesteps forever\"."
    )
    example = """\
import torch

total_loss = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total_loss += loss
"""
    fixed_example = """\
import torch

total_loss = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total_loss += loss.detach()
"""
    not_flagged = (
        "Detached or converted values (`.detach()`, `.item()`, `float(...)`), accumulators reset within the "
        "step, lists drained with `pop()`/`clear()` in the same function (pipeline-schedule queues), "
        "accumulators that are themselves backpropagated (gradient accumulation by summing losses), "
        "accumulators reset on the optimizer-step branch (`if (i + 1) % accum == 0: ...; total = 0`), "
        "values computed under `torch.no_grad()` or detached upstream (two lines above, or in a callee), "
        "an element of what an `isinstance` test calls a sequence (`if isinstance(loss, tuple): count += loss[1]`), "
        "state on `self` that a method rebuilds from nothing (`torch.zeros(...)`) before each pass or on "
        "every step, even when another module calls it (a decoder calling `attention.init_states(x)`), or that the "
        "function adding or appending to it resets first on the same path (`self.loss_dict = defaultdict(float)` or `self.outputs = []` atop `forward`), "
        "values the analysis does not know to carry a graph (the indices of a reduction along a dimension, `_, idx = x.max(1)`, `x.topk(k)`, `x.sort()`, are integers and carry none), a last output kept on `self` (its saved "
        "tensors were freed by backward; nothing grows), test code, and code outside training steps. The "
        "`.detach()` fix is safe (applied by `--fix`) only when every later use of the total is proven to "
        "end in a number (`.item()`, `float()`, `print`) or in a callee that leaves it alone (torch, logging, "
        "or a project function, in this module or another local one, whose body is checked the same way); "
        "a total that is returned, handed to an unknown callable or stored where other code reads it gets "
        "an unsafe fix."
    )
    verification = (
        "`trainlint verify` measures the growth per step of an accumulated graph's autograd nodes. "
        "`trainlint verify run` names the script's variables whose graphs grow per step, and the bytes saved "
        "for backward that stay alive."
    )
    valid = (
        """
total = 0.0
for x in loader:
    loss = model(x)
    loss.backward()
    optimizer.step()
    total += loss.item()
""",
        """
for i, x in enumerate(loader):
    loss = model(x)
    acc_loss += loss
    if (i + 1) % 4 == 0:
        acc_loss.backward()
        optimizer.step()
        acc_loss = 0
""",
        """
for x in loader:
    loss = 0
    for part in model(x):
        loss += part
    loss.backward()
    optimizer.step()
""",
        # the last output kept on `self`: its saved tensors were freed by backward; nothing grows
        """
class Trainer:
    def train_step(self, x):
        out = self.model(x)
        self.last_out = out
        loss = out.mean()
        loss.backward()
        self.opt.step()
""",
        # reset on the optimizer-step branch: the accumulator lives for one optimizer step
        """
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accum
    loss.backward()
    running += loss
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
        log(running)
        running = 0
""",
        # a pipeline schedule's queue: appended and popped within the step
        """
def forward_backward(model, batches, optimizer):
    outputs = []
    for x in batches:
        outputs.append(model(x))
        out = outputs.pop(0)
        out.backward()
    optimizer.step()
""",
        # the indices of a reduction along a dimension (`_, idx = x.max(1)`) are integers: no graph
        _KEPT_CODES.format(unpack="_, codes", kept="codes"),
        # the same through `torch` imported under another name, the dimension given by position
        _KEPT_CODES.replace("import torch\n", "import torch\nimport torch as t\n").replace("self.proj(x).max(1)", "t.max(self.proj(x), 1)").format(unpack="_, codes", kept="codes"),
        # rebuilt at the top of every forward before each head's loss is added: one pass's losses
        """
from collections import defaultdict
from torch import nn

class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        self.loss_dict = defaultdict(float)
        for head in self.heads:
            x = head(x)
            self.loss_dict["total"] += x.pow(2).mean()
        return self.loss_dict["total"]

model = Detector()
for x in loader:
    model(x).backward()
    optimizer.step()
""",
        # a term of the loss known to be a number holds no graph
        """
reg_total = 0.0
for x, y in loader:
    reg = 0.0
    loss = criterion(model(x), y) + reg
    reg_total += reg
    loss.backward()
    optimizer.step()
""",
    )
    invalid = (
        # the values of the same reduction keep the graph
        _KEPT_CODES.format(unpack="best, _", kept="best"),
        """
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss)
""",
        """
from torch import nn

class Trainer:
    def __init__(self, model: nn.Module, opt):
        self.model = model
        self.opt = opt
        self.hidden = None

    def train_step(self, x):
        out, self.hidden = self.model(x, self.hidden)
        loss = out.mean()
        loss.backward()
        self.opt.step()
""",
        """
running_loss = 0.0
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    running_loss += loss * x.size(0)
    if i % 100 == 99:
        print(running_loss / 100)
        running_loss = 0.0
""",
        # reset on the first step only: the total outlives every later step
        """
class Trainer:
    def train_step(self, step, x):
        if step == 0:
            self.total = 0.0
        loss = self.model(x).mean()
        self.total += loss
        loss.backward()
        self.opt.step()
""",
        # a term of the loss backpropagated carries its graph, whatever unseen criterion computed it
        """
class Trainer:
    def train(self):
        rain_total = 0
        for lr, hr in self.loader:
            derained, rain = self.model(lr)
            loss_b = self.loss(derained, hr)
            loss_r = self.loss(rain, lr - hr)
            loss = loss_b + 0.9 * loss_r
            rain_total = rain_total + loss_r
            loss.backward()
            self.optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        backpropagated = self._backpropagated(model)
        stores = _Stores(model)
        passed_on: set[int] = set()  # the calls reported for handing a helper what it accumulates
        terms = _loss_terms(model, backpropagated)
        for a in model.assigns:
            if not model.in_step(a.site) or model.under(a.site, "no_grad") or a.site.in_except:
                continue  # (an error path, or code past a `continue`, runs in no step)
            if model.value(a.value, a.site).graph is not True and not _accumulates_term(model, terms, a):
                continue
            for target in a.targets:
                if a.op is None and _chains_itself(model, a, target):
                    # truncated backpropagation through time needs `.detach()`: a consumed graph is
                    # backpropagated again next step, a retained one grows
                    fix = _detach_fix(model, a.value, target, a.site) if len(a.targets) == 1 else None
                    yield Finding(a.node, f"`{target}` is computed from its previous value with its autograd graph: every step's graph stays linked to the next", fix=fix)
            if len(a.targets) != 1 or a.targets[0] in backpropagated:
                continue
            target = a.targets[0]
            added = a.value if a.op == "AddAssign" else _added_to_itself(a.value, target) if a.op is None else None
            if added is not None and self._outlives_step(model, stores, a, target):
                callers = _passing_callers(model, a)
                spelled = f"{target} += ..." if a.op else f"{target} = {target} + ..."  # (RCDNet's `loss_B_all = loss_B_all + loss_B`)
                if callers is None:
                    yield Finding(a.node, f"`{spelled}` accumulates a tensor with its autograd graph: every step's graph stays alive", fix=_detach_fix(model, added, target, a.site))
                for call, passed in callers or ():
                    if id(call.node) not in passed_on:
                        passed_on.add(id(call.node))
                        yield _handed_to_accumulator(model, call, passed, a, spelled)
        for call in model.calls:
            if call.method != "append" or len(call.node.args) != 1 or not model.in_step(call.site) or model.under(call.site, "no_grad") or call.site.in_except:
                continue
            value = call.node.args[0].value
            if call.receiver_text and call.receiver_text not in backpropagated and self._outlives_step(model, stores, call, call.receiver_text):
                if model.value(value, call.site).graph is True:
                    yield Finding(call.node, f"`{call.receiver_text}.append(...)` keeps every step's tensor with its autograd graph", fix=_detach_fix(model, value, call.receiver_text, call.site))

    @staticmethod
    def _backpropagated(model: TrainingModel) -> set[str]:
        names = set()
        for call in model.calls:
            if model.is_backward(call):
                if call.receiver_text:
                    names.add(call.receiver_text)
                for arg in call.node.args:
                    names |= model.roots_of(arg.value, call.site.function)
        return names

    @staticmethod
    def _outlives_step(model: TrainingModel, stores: _Stores, fact: Assign | Call, target: str) -> bool:
        """The accumulator is not reset (ungated) inside the step loop or step function holding `fact`."""
        loops = [l for l in fact.site.loops if l.is_step]
        # the answer depends on `fact` only through its function and outermost step loop
        key = (target, id(fact.site.function), id(loops[0]) if loops else None)
        if key not in stores.answers:
            if target.startswith("self."):  # unless a method rebuilds it from nothing before, or every step
                fn = fact.site.function
                stores.answers[key] = not (fn is not None and fn.class_name and (
                    (isinstance(fact, Assign) and reset_before(model, fact, target)) or reset_earlier(model, fact, target)))
            else:
                stores.answers[key] = AutogradHistoryAccumulated._outlives(model, stores, fact, target, loops)
        return stores.answers[key]

    @staticmethod
    def _outlives(model: TrainingModel, stores: _Stores, fact: Assign | Call, target: str, loops: list[Loop]) -> bool:
        # a list drained in the same function is a queue (pipeline schedules), not a history
        if (target, id(fact.site.function)) in stores.drained:
            return False
        # `metrics[key] += v` is reset by rebinding `metrics`
        names = (target, target[:-2]) if target.endswith("[]") else (target,)
        for a in [a for name in names for a in stores.plain.get(name, ())]:
            if a.site.function is not fact.site.function or _added_to_itself(a.value, a.targets[0]) is not None:
                continue  # (`total = total + loss` adds, it does not reset)
            if loops and loops[0] in a.site.loops and (
                not a.site.gate_depths or model.every_step(a.site) or _on_step_branch(model, a)
            ):
                return False
            if not loops and a.site.function is not None and model.every_step(a.site):
                return False
        return bool(loops) or (fact.site.function is not None and target not in fact.site.function.params and not any(
            a.site.function is fact.site.function for a in stores.bound.get(target, ())))


class _Stores:
    """The module's assignments and queue drains by name, and `_outlives_step`'s answers, for one
    check: asked per finding, a scan of every assignment made n repeated `total += loss` cost n * n."""

    def __init__(self, model: TrainingModel) -> None:
        self.bound: dict[str, list[Assign]] = {}  # every assignment to a name
        self.plain: dict[str, list[Assign]] = {}  # `=` (not `+=`) assignments to a name
        for a in model.assigns:
            for target in dict.fromkeys(a.targets):
                self.bound.setdefault(target, []).append(a)
                if a.op is None:
                    self.plain.setdefault(target, []).append(a)
        self.drained = {
            (c.receiver_text, id(c.site.function)) for c in model.calls
            if c.receiver_text and c.method in ("pop", "popleft", "clear")
        }
        self.answers: dict[tuple[str, int, int | None], bool] = {}


def _passing_callers(model: TrainingModel, assign: Assign) -> list[tuple[Call, cst.BaseExpression]] | None:
    """A helper of this module accumulating only what it is given (`AverageMeter.update`'s
    `self.sum += val * n`) keeps the graphs its callers hand it: the calls in a step passing a tensor
    with its graph, each with that argument, are where the defect is (other callers pass numbers).
    None when the value is not the parameters' alone, or no call of this module passes them."""
    fn = assign.site.function
    if fn is None:
        return None
    params = fn.explicit_params
    roots = model.roots_of(assign.value, fn)
    if not roots or not roots <= {*params, "self", "cls"} or not roots & set(params):
        return None
    calls = [*model.calls_of(fn), *model.method_calls_of(fn)]
    if not calls:
        return None
    found = []
    for call in calls:
        if not model.in_step(call.site) or model.under(call.site, "no_grad"):
            continue
        for index, name in enumerate(params):
            passed = argument_for(call.node, f"{index} {name}") if name in roots else None
            if passed is not None and model.value(passed, call.site).graph is True:
                found.append((call, passed))
                break
    return found


def _handed_to_accumulator(model: TrainingModel, call: Call, passed: cst.BaseExpression, assign: Assign, spelled: str) -> Finding:
    """The call handing a helper what it accumulates; the fix detaches the argument (unsafe: the helper's
    total is no longer differentiable, should anything backpropagate it)."""
    code = model.module.code_for_node
    fn = assign.site.function
    fix = None
    if isinstance(passed, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
        fix = NodeFix(f"detach: `{code(passed)}.detach()`", (NodeEdit(passed, f"{code(passed)}.detach()"),), Applicability.UNSAFE)
    return Finding(
        call.node,
        f"`{shorten(code(call.node), 40)}` hands `{shorten(code(passed), 30)}`, a tensor with its autograd graph, to "
        f"`{fn.qualified if fn else '?'}`, which accumulates it (`{spelled}`): every step's graph stays alive",
        fix=fix,
    )


def _on_step_branch(model: TrainingModel, assign: Assign) -> bool:
    """A reset under the optimizer-step branch (`if (i + 1) % accum == 0: ...; opt.step(); total = 0`)
    runs once per optimizer step: the accumulator lives for one step. The step may sit deeper in that
    branch (`if not optimizer_in_backward: opt.step()`)."""
    gated = [d for d in assign.site.gate_depths if d >= 0]
    return any(
        model.is_optimizer_step(c) and c.site.function is assign.site.function
        and c.site.loops == assign.site.loops and [d for d in c.site.gate_depths if d >= 0][: len(gated)] == gated
        and c.site.gate_depths[: len(assign.site.gate_depths)] == assign.site.gate_depths
        for c in model.calls
    )


def _chains_itself(model: TrainingModel, assign: Assign, target: str) -> bool:
    """`self.hidden = model(x, self.hidden)` on `self`: each step's graph hangs on the previous one."""
    if not target.startswith("self.") or assign.site.function is None or not assign.site.function.class_name:
        return False
    return target in model.roots_of(assign.value, assign.site.function) and not reset_before(model, assign, target)


def _added_to_itself(value: cst.BaseExpression, target: str) -> cst.BaseExpression | None:
    """`total + loss` (or `loss + total`) assigned back to `total`: the term added, else None."""
    if not isinstance(value, cst.BinaryOperation) or not isinstance(value.operator, cst.Add):
        return None
    if dotted(value.left) == target:
        return value.right
    return value.left if dotted(value.right) == target else None


def _loss_terms(model: TrainingModel, backpropagated: set[str]) -> dict[int, set[str]]:
    """Per function, the names it adds into the loss it backpropagates (`loss = loss_b + loss_r`, then
    `loss.backward()`): each carries the graph, whatever computed it (a criterion of an unseen class)."""
    terms: dict[int, set[str]] = {}
    for a in model.assigns:
        if a.op is None and len(a.targets) == 1 and a.targets[0] in backpropagated and a.site.function is not None:
            terms.setdefault(id(a.site.function), set()).update(_addends(a.value))
    return terms


def _accumulates_term(model: TrainingModel, terms: dict[int, set[str]], assign: Assign) -> bool:
    """`total += term` or `total = total + term` of such a term, unless it is known to be no tensor."""
    if len(assign.targets) != 1 or id(assign.site.function) not in terms:
        return False
    added = assign.value if assign.op == "AddAssign" else _added_to_itself(assign.value, assign.targets[0]) if assign.op is None else None
    return isinstance(added, cst.Name) and added.value in terms[id(assign.site.function)] and model.value(added, assign.site).kind in (Kind.TENSOR, Kind.UNKNOWN)


def _addends(value: cst.BaseExpression) -> Iterator[str]:
    """The names a sum adds (`a + b + 0.1 * c` adds `a`, `b` and `c`)."""
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Add, cst.Multiply)):
        add = isinstance(value.operator, cst.Add)
        for term, other in ((value.left, value.right), (value.right, value.left)):
            if add or (isinstance(term, cst.Name) and isinstance(other, (cst.Integer, cst.Float))):
                yield from _addends(term)
    elif isinstance(value, cst.Name):
        yield value.value


def _detach_fix(model: TrainingModel, value: cst.BaseExpression, target: str, site: Site) -> NodeFix | None:
    """`value.detach()` where `value` is stored into `target` at `site`.

    Safe only when `value` is known to be a tensor (a term of the loss known only by its use may be a
    number, which has no `.detach()`) and nothing read from `target` afterwards may be differentiated
    (reach a backward call or be returned: `total = self.loss * 1.0; total.backward()`), else offered
    as unsafe.
    """
    if not isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
        return None
    text = model.module.code_for_node(value)
    known = model.value(value, site).kind is Kind.TENSOR
    applicability = Applicability.UNSAFE if not known or may_be_differentiated(model, target, site) else Applicability.SAFE
    return NodeFix(f"detach: `{text}.detach()`", (NodeEdit(value, f"{text}.detach()"),), applicability)
