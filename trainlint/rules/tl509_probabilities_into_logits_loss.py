"""TL509 probabilities-into-logits-loss."""

from __future__ import annotations

from typing import Callable, Iterator

from trainlint.diagnostics import Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.activations import activation_of
from trainlint.model.lattice import Kind
from trainlint.rules.rule import Finding, Rule, shorten

# the losses that apply the activation themselves, and the activation each one applies
LOSS_FUNCTIONS = {
    "torch.nn.functional.cross_entropy": "softmax",
    "torch.nn.functional.binary_cross_entropy_with_logits": "sigmoid",
    "torch.binary_cross_entropy_with_logits": "sigmoid",
}
LOSS_MODULES = {"CrossEntropyLoss": "softmax", "BCEWithLogitsLoss": "sigmoid"}
LOSS_TOKENS = ("cross_entropy", "CrossEntropyLoss", "with_logits", "WithLogits")
ACTIVATION_TOKENS = ("softmax", "sigmoid", "Softmax", "Sigmoid", "expit")


class ProbabilitiesIntoLogitsLoss(Rule):
    code = "TL509"
    name = "probabilities-into-logits-loss"
    severity = Severity.ERROR
    preview = True
    summary = "The output of `softmax` passed to `CrossEntropyLoss`/`F.cross_entropy`, or of `sigmoid` to `BCEWithLogitsLoss`/`binary_cross_entropy_with_logits`."
    hint = "Pass the raw logits to the loss (it applies log-softmax / log-sigmoid itself); apply softmax or sigmoid only for predictions."
    requires = ("softmax", "sigmoid", "Softmax", "Sigmoid", *LOSS_TOKENS)
    # the loss may come in as an argument (`train_one_epoch(model, criterion, ...)`), the model too
    handed_in = True

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        # the loss named here; the activation here too, or in a project module (a model's `forward`)
        if not any(token in source for token in LOSS_TOKENS):
            return False
        return any(token in source for token in ACTIVATION_TOKENS) or imports_project()

    why = (
        "`CrossEntropyLoss` expects \"the unnormalized logits for each class\" and applies log-softmax itself "
        "(`BCEWithLogitsLoss` applies log-sigmoid). Given probabilities, it computes the loss of softmax(softmax(z)): "
        "its inputs lie in [0, 1], so the loss can never fall far below log(C) - 1 (for 10 classes, about 1.46 "
        "instead of 0) and the gradients reaching the logits shrink, so training converges slower or to a worse "
        "model without any error. shaoxiongji/federated-learning#9: removing the softmax raised an MLP's MNIST "
        "accuracy from 90% to 95%; bowang-lab/Transformer-GCN-QA#32 and mlelarge/graph_neural_net#37 removed the "
        "same extra softmax. The softmax is often far from the loss: at the end of a model's `forward` in "
        "`models.py`, while `train_one_epoch(model, criterion, loader, opt)` in another module computes "
        "`criterion(model(x), y)` with the `nn.CrossEntropyLoss()` the training script passes in. A function's "
        "summary says when every `return` gives a softmax's (or sigmoid's) output, for a class's `forward` or "
        "`__call__` and for plain functions (`probabilities(model, x)`), and a torch loss handed to another "
        "module's function is known there as what it is."
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
        "one path and to logits on another, so a `forward` that applies softmax only `if not self.training:` "
        "(eval-only probabilities); a model whose other method (`predict`) returns probabilities while the loss "
        "gets `model(x)`, or the logits given to the loss and their softmax used for metrics; `nn.BCELoss` after "
        "`sigmoid` (the pair made for each other); a `forward` of a project class that returns probabilities on "
        "some paths only, through a layer the analysis cannot see, or through a project class that itself ends in "
        "a softmax when its module applies no activation of its own; a loss handed in whose class is not known, "
        "or differs between the calls that pass it."
    )
    verification = '`trainlint verify` compares the gradient reaching the logits through `cross_entropy(logits)` and `cross_entropy(softmax(logits))`: it shrinks, and the loss cannot fall below log(1 + (C-1)/e).'
    valid = (
        # the softmax for the metrics, the logits for the loss handed in
        """
import torch.nn as nn
import torch.nn.functional as F
def train_one_epoch(model, criterion, loader, opt):
    for x, y in loader:
        opt.zero_grad()
        logits = model(x)
        probs = F.softmax(logits, dim=1)
        loss = criterion(logits, y)
        loss.backward()
        opt.step()
        correct = (probs.argmax(1) == y).sum()
train_one_epoch(model, criterion=nn.CrossEntropyLoss(), loader=loader, opt=opt)
""",
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
        # a function returning probabilities, and the loss handed to the epoch function
        """
import torch.nn as nn
import torch.nn.functional as F
def probabilities(model, x):
    return F.softmax(model(x), dim=1)
def train_one_epoch(model, criterion, loader, opt):
    for x, y in loader:
        opt.zero_grad()
        loss = criterion(probabilities(model, x), y)
        loss.backward()
        opt.step()
train_one_epoch(model, criterion=nn.CrossEntropyLoss(), loader=loader, opt=opt)
""",
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
            if activation_of(model, given, call.site, call.site.function, expected, 0):
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

