"""TL509 probabilities-into-logits-loss."""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import Call, Site, TrainingModel
from trainlint.model.facts import Function
from trainlint.model.lattice import Kind
from trainlint.model.names import dotted
from trainlint.rules.rule import Finding, Rule, shorten

# the losses that apply the activation themselves, and the activation each one applies
LOSS_FUNCTIONS = {
    "torch.nn.functional.cross_entropy": "softmax",
    "torch.nn.functional.binary_cross_entropy_with_logits": "sigmoid",
    "torch.binary_cross_entropy_with_logits": "sigmoid",
}
LOSS_MODULES = {"CrossEntropyLoss": "softmax", "BCEWithLogitsLoss": "sigmoid"}
ACTIVATION_FUNCTIONS = {
    "torch.softmax": "softmax",
    "torch.nn.functional.softmax": "softmax",
    "torch.special.softmax": "softmax",
    "torch.sigmoid": "sigmoid",
    "torch.nn.functional.sigmoid": "sigmoid",
    "torch.special.expit": "sigmoid",
}
ACTIVATION_MODULES = {"Softmax": "softmax", "Sigmoid": "sigmoid"}
# tensor methods that reshape or convert values without changing them: probabilities stay probabilities
VALUE_PRESERVING = frozenset(
    {"view", "reshape", "squeeze", "unsqueeze", "permute", "transpose", "contiguous", "flatten", "float", "double", "to", "view_as", "reshape_as", "clone"}
)
MAX_DEPTH = 6


class ProbabilitiesIntoLogitsLoss(Rule):
    code = "TL509"
    name = "probabilities-into-logits-loss"
    severity = Severity.ERROR
    preview = True
    summary = "The output of `softmax` passed to `CrossEntropyLoss`/`F.cross_entropy`, or of `sigmoid` to `BCEWithLogitsLoss`/`binary_cross_entropy_with_logits`."
    hint = "Pass the raw logits to the loss (it applies log-softmax / log-sigmoid itself); apply softmax or sigmoid only for predictions."
    requires = ("softmax", "sigmoid", "Softmax", "Sigmoid")

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        return "cross_entropy" in source or "CrossEntropyLoss" in source or "with_logits" in source or "WithLogits" in source

    why = (
        "`CrossEntropyLoss` expects \"the unnormalized logits for each class\" and applies log-softmax itself "
        "(`BCEWithLogitsLoss` applies log-sigmoid). Given probabilities, it computes the loss of softmax(softmax(z)): "
        "its inputs lie in [0, 1], so the loss can never fall far below log(C) - 1 (for 10 classes, about 1.46 "
        "instead of 0) and the gradients reaching the logits shrink, so training converges slower or to a worse "
        "model without any error. shaoxiongji/federated-learning#9: removing the softmax raised an MLP's MNIST "
        "accuracy from 90% to 95%; bowang-lab/Transformer-GCN-QA#32 and mlelarge/graph_neural_net#37 removed the "
        "same extra softmax."
    )
    story = "shaoxiongji/federated-learning#9 (\"you apply CrossEntropy function after softmax activation\"; 90% -> 95% once removed)."
    example = """\
import torch
import torch.nn.functional as F

criterion = torch.nn.CrossEntropyLoss()
for x, y in loader:
    probs = F.softmax(model(x), dim=1)
    loss = criterion(probs, y)
    loss.backward()
    optimizer.step()
"""
    fixed_example = """\
import torch
import torch.nn.functional as F

criterion = torch.nn.CrossEntropyLoss()
for x, y in loader:
    logits = model(x)
    loss = criterion(logits, y)
    loss.backward()
    optimizer.step()
"""
    not_flagged = (
        "`log_softmax` (or `torch.log(softmax(...))`) into `CrossEntropyLoss`: log-softmax is idempotent, so the "
        "loss is the same; `log_softmax` into `NLLLoss`; softmax outputs passed as the *target* (soft labels, "
        "distillation); `nn.BCELoss` on raw logits (it raises, so it is not silent); a name bound to a softmax on "
        "one path and to logits on another; a model whose `forward` is defined in another module (only classes "
        "of the same module, `nn.Sequential(..., nn.Softmax())` and `nn.Softmax`/`nn.Sigmoid` modules are followed)."
    )
    verification = '`trainlint verify` compares the gradient reaching the logits through `cross_entropy(logits)` and `cross_entropy(softmax(logits))`: it shrinks, and the loss cannot fall below log(1 + (C-1)/e).'
    valid = (
        """
import torch.nn.functional as F
for x, y in loader:
    logp = F.log_softmax(model(x), dim=1)
    loss = F.cross_entropy(logp, y)
    loss.backward()
""",
        """
import torch
import torch.nn.functional as F
criterion = torch.nn.NLLLoss()
for x, y in loader:
    loss = criterion(F.log_softmax(model(x), dim=1), y)
    loss.backward()
""",
        # distillation: the teacher's probabilities are the target, not the input
        """
import torch.nn.functional as F
for x, y in loader:
    soft = F.softmax(teacher(x) / 4.0, dim=-1)
    loss = F.cross_entropy(student(x), soft)
    loss.backward()
""",
        # softmax only in eval mode: the training path returns logits
        """
import torch
import torch.nn as nn
import torch.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
    def forward(self, x):
        if self.training:
            return self.fc(x)
        return F.softmax(self.fc(x), dim=1)
model = Net()
criterion = nn.CrossEntropyLoss()
for x, y in loader:
    criterion(model(x), y).backward()
""",
        """
import torch
criterion = torch.nn.BCEWithLogitsLoss()
for x, y in loader:
    logits = model(x)
    probs = torch.sigmoid(logits)
    loss = criterion(logits, y)
    loss.backward()
""",
    )
    invalid = (
        """
import torch
import torch.nn as nn
import torch.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
    def forward(self, x):
        return F.softmax(self.fc(x), dim=1)
model = Net()
criterion = nn.CrossEntropyLoss()
for x, y in loader:
    out = model(x)
    loss = criterion(out, y)
    loss.backward()
""",
        """
import torch.nn as nn
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), nn.Softmax(dim=1))
loss_fn = nn.CrossEntropyLoss()
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
""",
        """
import torch
import torch.nn.functional as F
for x, y in loader:
    pred = torch.sigmoid(model(x))
    loss = F.binary_cross_entropy_with_logits(pred.squeeze(1), y)
    loss.backward()
""",
        """
import torch.nn as nn
import torch.nn.functional as F
class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.softmax = nn.Softmax(dim=-1)
        self.criterion = nn.CrossEntropyLoss()
    def forward(self, x, y):
        logits = self.softmax(self.fc(x))
        return self.criterion(logits.view(-1, 3), y.view(-1))
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for call in model.calls:
            expected = self._loss_activation(model, call)
            if expected is None:
                continue
            given = call.kwarg("input") or call.positional(0)
            if given is None:
                continue
            if _activation_of(model, given, call.site, call.site.function, expected, 0):
                loss = shorten(model.module.code_for_node(call.node.func), 40)
                shown = shorten(model.module.code_for_node(given), 40)
                yield Finding(
                    given,
                    f"`{shown}` is the output of {expected}, and `{loss}` applies {expected} again: the loss sees "
                    f"squashed inputs, so its gradients shrink and training converges slower or worse",
                    facts={"activation": expected},
                )

    @staticmethod
    def _loss_activation(model: TrainingModel, call: Call) -> str | None:
        if call.qualname in LOSS_FUNCTIONS:
            return LOSS_FUNCTIONS[call.qualname]
        if call.qualname is not None and call.qualname.split(".", 1)[0] == "torch":
            return None
        callee = model.value(call.node.func, call.site)
        if callee.kind is Kind.MODULE and (callee.origin or "").startswith("torch.nn."):
            return LOSS_MODULES.get(callee.origin.rsplit(".", 1)[-1])  # type: ignore[union-attr]
        return None


def _activation_of(model: TrainingModel, expr: cst.BaseExpression, site: Site | None, fn: Function | None, activation: str, depth: int) -> bool:
    """Whether `expr` certainly holds the output of `activation` ("softmax" or "sigmoid"): the call
    itself, a reshape of it, a name every reaching binding of which is one, or the output of a module
    whose every `forward` return is one."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(expr, cst.Subscript):
        return _activation_of(model, expr.value, site, fn, activation, depth + 1)
    if isinstance(expr, cst.Name):
        assigns = model.reaching(fn, expr.value, site)
        if not assigns or any(a.op is not None or len(a.targets) != 1 or a.unpacked for a in assigns):
            return False
        return all(_activation_of(model, a.value, a.site, a.site.function, activation, depth + 1) for a in assigns)
    if not isinstance(expr, cst.Call):
        return False
    qual = model.imports.resolve(expr.func)
    if qual is not None and qual.split(".", 1)[0] == "torch":
        return ACTIVATION_FUNCTIONS.get(qual) == activation
    if isinstance(expr.func, cst.Attribute):
        method = expr.func.attr.value
        if method in VALUE_PRESERVING:  # proven below only when the receiver holds the activation's output
            return _activation_of(model, expr.func.value, site, fn, activation, depth + 1)
        if method == activation and _tensor_method_call(model, expr, site, fn):
            return True
    return _module_output(model, expr.func, site, fn, activation, depth + 1)


def _tensor_method_call(model: TrainingModel, call: cst.Call, site: Site | None, fn: Function | None) -> bool:
    """`x.softmax(-1)`, `x.softmax(dim=1)`, `x.sigmoid()`: a tensor method (called with at most the
    dimension, on a receiver that is a tensor or unknown, never `self` or a module's attribute holding a layer)."""
    receiver = call.func.value  # type: ignore[attr-defined]
    if isinstance(receiver, cst.Name) and receiver.value in ("self", "cls"):
        return False
    if model.values.of(receiver, fn, site).kind not in (Kind.TENSOR, Kind.UNKNOWN):
        return False
    for arg in call.args:
        value = arg.value
        if isinstance(value, cst.UnaryOperation):
            value = value.expression
        if arg.star or not (isinstance(value, cst.Integer) or (arg.keyword is not None and arg.keyword.value in ("dim", "dtype"))):
            return False
    return True


def _module_output(model: TrainingModel, callee: cst.BaseExpression, site: Site | None, fn: Function | None, activation: str, depth: int) -> bool:
    """Calling `callee` returns the activation's output: an `nn.Softmax`, an `nn.Sequential` ending in
    one, or an instance of a class of this module whose `forward` always returns one."""
    value = model.values.of(callee, fn, site)
    if value.kind is not Kind.MODULE or not value.origin or "|" in value.origin:
        return False
    last = value.origin.rsplit(".", 1)[-1]
    if value.origin.startswith("torch.nn."):
        if last in ACTIVATION_MODULES:
            return ACTIVATION_MODULES[last] == activation
        if last == "Sequential":
            built = _constructions(model, callee, site, fn)
            return bool(built) and all(_sequential_ends_with(model, c, activation) for c in built)
        return False
    info = model.local_class(value.origin)
    forward = info.methods.get("forward") if info is not None else None
    if forward is None or not forward.return_facts:
        return False
    return all(_activation_of(model, r.value, r.site, forward, activation, depth + 1) for r in forward.return_facts)


def _constructions(model: TrainingModel, callee: cst.BaseExpression, site: Site | None, fn: Function | None) -> list[cst.Call]:
    """The constructor calls a name or `self.attribute` is bound to (empty when one binding is not a call)."""
    text = dotted(callee)
    if text is None:
        return [callee] if isinstance(callee, cst.Call) else []
    if "." not in text:
        values = [a.value for a in model.reaching(fn, text, site)] or [a.value for a in model.reaching(None, text, None)]
    elif text.startswith("self.") and text.count(".") == 1 and fn is not None:
        values = [a.value for a in model.attribute_assigns(fn.class_name, text)]
    else:
        return []
    return [v for v in values if isinstance(v, cst.Call)] if all(isinstance(v, cst.Call) for v in values) else []


def _sequential_ends_with(model: TrainingModel, built: cst.Call, activation: str) -> bool:
    layers = [a.value for a in built.args if a.keyword is None and not a.star]
    if not layers or not isinstance(layers[-1], cst.Call):
        return False
    qual = model.imports.resolve(layers[-1].func) or ""
    return qual.startswith("torch.nn.") and ACTIVATION_MODULES.get(qual.rsplit(".", 1)[-1]) == activation
