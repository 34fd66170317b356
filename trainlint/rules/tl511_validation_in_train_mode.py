"""TL511 validation-in-train-mode."""

from __future__ import annotations

from typing import Callable, Iterator

from trainlint.diagnostics import Severity
from trainlint.model import TrainingModel
from trainlint.model.evaluation_calls import evaluated_elsewhere, evaluated_in_loops
from trainlint.model.mode_layers import ModeLayers
from trainlint.model.modes import ModeAnalysis, Training
from trainlint.rules.rule import Finding, Rule, shorten


class ValidationInTrainMode(Rule):
    code = "TL511"
    name = "validation-in-train-mode"
    severity = Severity.WARNING
    preview = True
    summary = "An evaluation loop under `no_grad` runs a model with dropout or batch norm that is still in training mode."
    hint = "Call `model.eval()` before the evaluation loop (and `model.train()` before training resumes)."
    # (or a function of another project module that evaluates under `no_grad`: `may_fire`)
    requires = ("no_grad", "inference_mode", "set_grad_enabled", "import")

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        return any(token in source for token in ("no_grad", "inference_mode", "set_grad_enabled")) or imports_project()

    why = (
        "`torch.no_grad()` turns off autograd, not training mode: only `model.eval()` switches dropout off and "
        "makes batch norm normalise with its running statistics (https://discuss.pytorch.org/t/model-eval-vs-with-torch-no-grad/19615). "
        "In training mode, evaluation drops activations at random, so metrics are noisy and pessimistic, and "
        "every evaluation batch moves each batch norm's running mean and variance 10% of the way towards "
        "that batch (default `momentum=0.1`): after 22 batches less than 10% of the statistics learnt from "
        "training data remain (0.9^22 = 0.098), so the evaluation data leaks into the model that is then "
        "trained further and saved (as in facebookresearch/schedule_free#60, where 50 batches replace 99% of "
        "the buffers). The mode belongs to the model, not to the code that evaluates it: an "
        "`evaluate(model, loader)` that runs the model under `no_grad` and never calls `.eval()` evaluates in "
        "whatever mode its caller left the model, so the analysis follows the model from the caller (where "
        "`model.train()`, or a function that calls it, left it in training mode, through "
        "`nn.SyncBatchNorm.convert_sync_batchnorm` and `DistributedDataParallel`) into the function, in this "
        "module or another: a function of another module is reported at the call, where the mode is."
    )
    story = (
        "udacity/deep-learning-v2-pytorch#3 (validation of a model with dropout without `model.eval()`, "
        "fixed by the course author), wolny/pytorch-3dunet#53, princeton-vl/pytorch_stacked_hourglass#44 "
        "(batch norm in training mode on the validation set: \"that could result in leakage\")."
    )
    example = """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.5))
        self.head = nn.Linear(64, 2)

    def forward(self, x):
        return self.head(self.body(x))

model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(10):
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    correct = 0
    with torch.no_grad():
        for x, y in val_loader:
            correct += (model(x).argmax(1) == y).sum().item()
"""
    fixed_example = example.replace("    correct = 0\n", "    model.eval()\n    correct = 0\n")
    not_flagged = (
        "A model not known to hold dropout with a probability above zero (a literal, or a parameter's literal "
        "default) or batch norm that tracks running statistics: a class of this module that builds them "
        "(through its methods, local base classes and the local classes and functions they call; of a class "
        "defined twice, as a notebook's later cell may redefine it, the definition before the model is built), a "
        "`torch.nn` container of them, a `torch.nn.Transformer*` layer, a torchvision classification or "
        "segmentation model; a class defined in another module, a timm model and a `from_pretrained` model "
        "(which loads in eval mode) prove nothing. A model whose mode the analysis cannot follow: "
        "one given to a function of another project module that may switch it (one that calls `.eval()` or "
        "passes the model where the analysis cannot follow; a function that only runs it or calls `.train()` "
        "is followed), one loaded from a checkpoint before the loop, one bound on several paths, a parameter "
        "whose callers in this module do not all follow, a `self` attribute that any method of the class (or "
        "code of the module, on an attribute of that name) switches to eval mode, since the order methods run "
        "in is not followed. Evaluation in a comprehension (`[model(x) for x in loader]`) is not followed. A `.eval()` (or "
        "`.train(False)`) on the model, on a module it is bound from, or in a function of this module it is "
        "passed to, anywhere before the loop or later in a loop around it. A `.train()` in code that only "
        "evaluates (Monte Carlo dropout, test-time adaptation: deliberate). Forward passes whose result "
        "is thrown away (`model(x)` as a statement: recomputing batch-norm statistics). Loops that "
        "backpropagate, step an optimizer or an environment (`env.step`: a rollout), loops of a training "
        "step, loops outside `no_grad`/`inference_mode` (TL303's case: a forward pass in eval mode that "
        "records a graph), a library's evaluation hooks (Lightning's `validation_step`, run in eval mode), and "
        "pytest files. Where the model was switched to eval mode and never back, TL503 reports the `.eval()`; "
        "this rule needs the opposite, no `.eval()` on the path, so the two never report the same loop."
    )
    verification = "`trainlint verify` runs two validation forwards under `no_grad` in training mode: they differ and BatchNorm's running statistics change (`verify run`'s determinism check)."
    valid = (
        # the evaluation function switches the model itself
        """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(8, 2)
    def forward(self, x):
        return self.fc(self.drop(x))

def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        return [model(x) for x in loader]

def evaluate_loop(model, loader):
    model.eval()
    total = 0
    with torch.no_grad():
        for x, y in loader:
            total += (model(x).argmax(1) == y).sum().item()
    return total

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    model.train()
    for x, y in train_loader:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    evaluate_loop(model, val_loader)
""",
        # the caller switched it before the call
        """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(8)
        self.fc = nn.Linear(8, 2)
    def forward(self, x):
        return self.fc(self.bn(x))

def test(net, loader):
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (net(x).argmax(1) == y).sum().item()
    return correct

net = Net()
opt = torch.optim.Adam(net.parameters())
for epoch in range(3):
    net.train()
    for x, y in train_loader:
        opt.zero_grad()
        net(x).sum().backward()
        opt.step()
    net.eval()
    test(net, val_loader)
""",
        # a helper switches the model to eval mode before the evaluation function runs it
        """
import torch
from torch import nn

def set_eval(model):
    model.eval()

model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for x, y in train_loader:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    set_eval(model)
    with torch.no_grad():
        for x, y in val_loader:
            acc = (model(x).argmax(1) == y).float().mean()
""",
        # no dropout, no batch norm: training mode changes nothing
        """
import torch
from torch import nn

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for x, y in train_loader:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    with torch.no_grad():
        for x, y in val_loader:
            acc = (model(x).argmax(1) == y).float().mean()
""",
        # dropout probability from a config: not proven above zero
        """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.drop = nn.Dropout(cfg.dropout)
        self.fc = nn.Linear(8, 2)
    def forward(self, x):
        return self.fc(self.drop(x))

model = Net(cfg)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for x, y in train_loader:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    with torch.no_grad():
        for x, y in val_loader:
            acc = (model(x).argmax(1) == y).float().mean()
""",
        # recomputing batch-norm statistics: the forward's result is thrown away
        """
import torch
import torchvision

model = torchvision.models.resnet18()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in train_loader:
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
model.train()
with torch.no_grad():
    for x, _ in calib_loader:
        model(x)
""",
        # an RL rollout: acting in an environment is not evaluation
        """
import torch
from torch import nn

policy = nn.Sequential(nn.Linear(4, 64), nn.Dropout(0.1), nn.Linear(64, 2))
opt = torch.optim.Adam(policy.parameters())
for update in range(100):
    obs = env.reset()
    for t in range(128):
        with torch.no_grad():
            logits = policy(obs)
        obs, reward, done, info = env.step(logits.argmax().item())
    loss = policy(batch).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
        # switched to eval mode later in the epoch loop: the next epoch's evaluation runs in eval mode
        # (the first epoch's does not; TL503's territory is the `.eval()` left on)
        """
import torch
from torch import nn

model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    with torch.no_grad():
        for x, y in val_loader:
            acc = (model(x).argmax(1) == y).float().mean()
    model.train()
    for x, y in train_loader:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    model.eval()
""",
        # `.train()` in a function that only evaluates: Monte Carlo dropout, deliberate
        """
import torch
from torch import nn

model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.2), nn.Linear(16, 2))

def mc_predict(model, loader):
    model.train()
    with torch.no_grad():
        for x in loader:
            samples = torch.stack([model(x) for _ in range(20)])
""",
        # loaded with from_pretrained: HF models load in eval mode
        """
import torch
from transformers import AutoModelForSequenceClassification

model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
with torch.no_grad():
    for batch in val_loader:
        logits = model(**batch).logits
""",
        # given to a function of another module before the loop: its mode is not known
        """
import torch
import torchvision
from engine import train_one_epoch

model = torchvision.models.resnet50()
for epoch in range(3):
    train_one_epoch(model, train_loader)
    with torch.no_grad():
        for x, y in val_loader:
            acc = (model(x).argmax(1) == y).float().mean()
""",
    )
    invalid = (
        # the page example's shape, dropout through `F.dropout(x, p, self.training)` positional
        """
import torch
import torch.nn.functional as F
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 2)
    def forward(self, x):
        return self.fc2(F.dropout(F.relu(self.fc1(x)), 0.5, self.training))

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for x, y in train_loader:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        for x, y in val_loader:
            acc = (model(x).argmax(1) == y).float().mean()
""",
        # an evaluation function that does not switch, called after training, across calls
        """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, p=0.25):
        super().__init__()
        self.bn = nn.BatchNorm2d(3)
        self.drop = nn.Dropout(p)
        self.fc = nn.Linear(12, 2)
    def forward(self, x):
        return self.fc(self.drop(self.bn(x).flatten(1)))

def train(model, loader, opt):
    model.train()
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

@torch.no_grad()
def test(model, loader):
    correct = 0
    for x, y in loader:
        correct += (model(x).argmax(1) == y).sum().item()
    return correct

def main():
    model = Net().to("cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(5):
        train(model, train_loader, opt)
        test(model, test_loader)

main()
""",
        # a torchvision model, evaluated with inference_mode in a driver that trains
        """
import torch
from torchvision import models

def fit(train_loader, val_loader):
    net = models.resnet18(num_classes=10)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(3):
        for x, y in train_loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
        with torch.inference_mode():
            for x, y in val_loader:
                val_loss = torch.nn.functional.cross_entropy(net(x), y)
""",
        # a DDP model with SyncBatchNorm, put in training mode and given to an evaluation function that never
        # switches it (a `test()` method on `self.model`, or a function of another module, alike)
        """
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

def evaluate(model, loader):
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct

def main(rank):
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 2)).cuda(rank)
    model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(model), device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        model.train()
        for x, y in train_loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        acc = evaluate(model, val_loader)
""",
        # a method evaluating `self.model`, called by the training method of the same class
        """
import torch
from torch import nn

class Trainer:
    def __init__(self):
        self.model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 2))
        self.opt = torch.optim.Adam(self.model.parameters())

    def validate(self, loader):
        with torch.no_grad():
            for x, y in loader:
                out = self.model(x)

    def fit(self, train_loader, val_loader):
        for epoch in range(3):
            self.model.train()
            for x, y in train_loader:
                self.opt.zero_grad()
                self.model(x).sum().backward()
                self.opt.step()
            self.validate(val_loader)
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        if model.is_test_code:
            return
        modes, layers = ModeAnalysis(model), ModeLayers(model)
        for call, target, training, layer in evaluated_in_loops(model, modes, layers):
            yield Finding(call.node, _message(model, target, training, layer, "in this evaluation loop"), facts={"module": target})
        # a function of another module that evaluates it: reported at the call, where the mode is
        for call, target, training, layer, summary in evaluated_elsewhere(model, modes, layers):
            callee = shorten(model.module.code_for_node(call.node.func), 40)
            where = f" ({summary.where})" if summary.where else ""
            when = f"when `{callee}(...)`{where} evaluates it under `no_grad` without `.eval()`"
            yield Finding(call.node, _message(model, target, training, layer, when), facts={"module": target})


def _message(model: TrainingModel, target: str, training: Training, layer: str, where: str) -> str:
    cause = shorten(model.module.code_for_node(training.cause), 50)
    via = f", then passed on by `{shorten(model.module.code_for_node(training.through[-1].node), 40)}`" if training.through else ""
    effects = []
    if "ropout" in layer or "torchvision" in layer or "Transformer" in layer:
        effects.append("dropout stays on")
    if "Norm" in layer or "torchvision" in layer:
        effects.append("batch norm normalises with batch statistics and updates its running statistics with evaluation data")
    return (
        f"`{target}` is in training mode {where} ({training.how}: `{cause}`{via}; no `.eval()` since) "
        f"and holds {layer}: {' and '.join(effects)} (a missing `.eval()`: not TL503's `.eval()` left on, "
        "nor TL303's recorded graph)"
    )
