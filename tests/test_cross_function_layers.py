"""TL507 and TL509 across functions and modules (issue 43): the layer replaced by a method or helper
called after the optimizer was built by another function, and probabilities from a model whose
`forward` is defined in another module going into a loss handed in as a parameter. Each shape has a
near miss beside it that stays silent. The model modules here have no training code of their own, so
their summaries are outlines (Python's own parser); the helpers with training code are analysed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers import lint
from tests.test_whole_program import write
from trainlint.config import Settings
from trainlint.engine.lint import lint_paths


def findings(folder: Path, paths: list[str], code: str) -> list[str]:
    """"path:line:code" of rule `code` (in preview) for the named files of a project, linted together."""
    settings = Settings(select=(code,), preview=True, root=folder)
    return sorted(
        f"{Path(d.path).relative_to(folder).as_posix()}:{d.line}:{d.code}"
        for result in lint_paths([(folder / p, settings) for p in paths], jobs=1) for d in result.diagnostics
    )

# -- TL507 layer-replaced-after-optimizer -----------------------------------------------------------

MODELS = """
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Linear(32, 512)
            self.act = nn.ReLU()
            self.head = nn.Linear(512, 1000)

        def forward(self, x):
            return self.head(self.act(self.backbone(x)))

        def reset_classifier(self, num_classes):
            self.head = nn.Linear(512, num_classes)

        def maybe_reset(self, num_classes):
            if num_classes > 0:
                self.head = nn.Linear(512, num_classes)

        def swap_activation(self):
            self.act = nn.GELU()
"""
HEADS = """
    from torch import nn


    def setup_head(model, num_classes=10):
        model.fc = nn.Linear(model.fc.in_features, num_classes)


    def relu_head(model):
        model.act = nn.ReLU()
"""
OPTIM = """
    import torch


    def build_optimizer(model, lr=0.1):
        decay, no_decay = [], []
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                no_decay.append(p)
            else:
                decay.append(p)
        optimizer = torch.optim.SGD([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], lr=lr, momentum=0.9)
        return optimizer
"""
TRAIN = """
    import torch
    import torch.nn.functional as F
    from models import Net
    from heads import setup_head, relu_head
    from optim import build_optimizer


    def main(loader):
        model = Net()
    {body}
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
"""


def _train(body: str) -> str:
    return TRAIN.replace("    {body}\n", textwrap.indent(body, "    "))


def _tl507(tmp_path: Path, body: str) -> list[int]:
    write(tmp_path, {"models.py": MODELS, "heads.py": HEADS, "optim.py": OPTIM, "train.py": _train(body)})
    found = findings(tmp_path, ["train.py"], "TL507")
    return sorted(int(k.split(":")[1]) for k in found)


@pytest.mark.parametrize("body", [
    # a method of the project's class, defined in another module, replaces `self.head`
    "    optimizer = build_optimizer(model)\n    model.reset_classifier(10)\n",
    # a helper replaces `model.fc` of the model it is given
    "    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)\n    setup_head(model)\n",
    "    optimizer = build_optimizer(model, lr=0.01)\n    setup_head(model, num_classes=5)\n",
])
def test_a_layer_replaced_by_a_call_after_the_optimizer_was_built(tmp_path: Path, body: str) -> None:
    assert _tl507(tmp_path, body) == [12]


@pytest.mark.parametrize("body", [
    # the replacement before the optimizer is built
    "    model.reset_classifier(10)\n    optimizer = build_optimizer(model)\n",
    # the helper called on another model
    "    teacher = Net()\n    optimizer = build_optimizer(model)\n    setup_head(teacher)\n",
    # the optimizer built again after the replacement
    "    optimizer = build_optimizer(model)\n    setup_head(model)\n    optimizer = build_optimizer(model)\n",
    # a layer without parameters swapped in: the optimizer misses nothing
    "    optimizer = build_optimizer(model)\n    relu_head(model)\n    model.swap_activation()\n",
    # a replacement on one path of the method only is no fact of the call
    "    optimizer = build_optimizer(model)\n    model.maybe_reset(10)\n",
    # the optimizer holds only the backbone's parameters
    "    optimizer = build_optimizer(model.backbone)\n    model.reset_classifier(10)\n",
])
def test_near_misses_of_a_layer_replaced_by_a_call_stay_silent(tmp_path: Path, body: str) -> None:
    assert _tl507(tmp_path, body) == []


def test_the_analysed_module_of_a_helper_says_the_same_as_its_outline(tmp_path: Path) -> None:
    """A helper module with training code is analysed (libcst), not outlined: the same facts."""
    heads = textwrap.dedent(HEADS) + "\n\ndef freeze(model):\n    for p in model.parameters():\n        p.requires_grad = False\n    model.train()\n"
    write(tmp_path, {"models.py": MODELS, "heads.py": heads, "optim.py": OPTIM,
                     "train.py": _train("    optimizer = build_optimizer(model)\n    setup_head(model)\n    relu_head(model)\n")})
    assert findings(tmp_path, ["train.py"], "TL507") == ["train.py:12:TL507"]


def test_a_replacing_method_and_an_optimizer_factory_of_the_same_module() -> None:
    code = """
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.head = nn.Linear(512, 1000)
            def reset_classifier(self, n):
                self.head = nn.Linear(512, n)
            def drop_classifier(self):
                self.head = nn.Identity()

        def make_optimizer(net):
            return torch.optim.SGD(net.parameters(), lr=0.1)

        model = Net()
        optimizer = make_optimizer(model)
        model.drop_classifier()
        model.reset_classifier(10)
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
    """
    found = lint(code, "TL507")
    assert [d.line for d in found] == [20]
    assert "`model.head` (by `Net.reset_classifier` in train.py)" in found[0].message


def test_a_trainer_whose_method_delegates_the_replacement() -> None:
    """The optimizer and the model on `self`; the class's method replaces the head through another method."""
    code = """
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.head = nn.Linear(512, 1000)
            def _make_head(self, n):
                self.head = nn.Linear(512, n)
            def reset_classifier(self, n):
                self._make_head(n)
            def reset_if_needed(self, n):
                if n != 1000:
                    self._make_head(n)

        def build_optimizer(model):
            return torch.optim.AdamW(model.parameters(), lr=1e-3)

        class Trainer:
            def __init__(self, num_classes):
                self.model = Net()
                self.optimizer = build_optimizer(self.model)
                self.model.reset_if_needed(num_classes)
                self.model.reset_classifier(num_classes)
    """
    assert [d.line for d in lint(code, "TL507")] == [25]


# -- TL509 probabilities-into-logits-loss -----------------------------------------------------------

PROB_MODELS = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class SoftmaxNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 4)

        def forward(self, x):
            x = self.fc(x)
            x = F.softmax(x, dim=1)
            return x


    class HeadNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.out = nn.Sequential(nn.Linear(16, 4), nn.Softmax(dim=-1))

        def forward(self, x):
            return self.out(x)


    class LogSoftmaxNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 4)

        def forward(self, x):
            return F.log_softmax(self.fc(x), dim=1)


    class EvalSoftmaxNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 4)

        def forward(self, x):
            x = self.fc(x)
            if not self.training:
                x = F.softmax(x, dim=1)
            return x


    class LogitNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 4)

        def forward(self, x):
            return self.fc(x)

        def predict(self, x):
            return torch.softmax(self.forward(x), dim=-1)


    class SigmoidNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 1)

        def forward(self, x):
            return torch.sigmoid(self.fc(x)).squeeze(1)


    def probabilities(model, x):
        return F.softmax(model(x), dim=1)
"""
ENGINE = """
    from models import probabilities


    def train_one_epoch(model, criterion, loader, opt):
        for x, y in loader:
            opt.zero_grad()
            loss = criterion({given}, y)
            loss.backward()
            opt.step()
"""
PROB_TRAIN = """
    import torch
    import torch.nn as nn
    from models import {model}
    from engine import train_one_epoch

    model = {model}()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        train_one_epoch(model, criterion=nn.{loss}(), loader=loader, opt=opt)
"""


def _tl509(tmp_path: Path, model: str, loss: str, given: str = "model(x)") -> list[str]:
    write(tmp_path, {
        "models.py": PROB_MODELS,
        "engine.py": ENGINE.replace("{given}", given),
        "train.py": PROB_TRAIN.replace("{model}", model).replace("{loss}", loss),
    })
    return findings(tmp_path, ["engine.py", "train.py"], "TL509")


@pytest.mark.parametrize("model, given", [
    ("SoftmaxNet", "model(x)"),  # `forward` ends in F.softmax, through a name bound in order
    ("HeadNet", "model(x)"),  # `forward` returns an `nn.Sequential` ending in `nn.Softmax`
    ("LogitNet", "probabilities(model, x)"),  # a project function returning probabilities
])
def test_probabilities_from_another_module_into_a_loss_handed_in(tmp_path: Path, model: str, given: str) -> None:
    assert _tl509(tmp_path, model, "CrossEntropyLoss", given) == ["engine.py:8:TL509"]
    # the module that computes the loss names no loss and no activation: linted alone, the same finding
    assert findings(tmp_path, ["engine.py"], "TL509") == ["engine.py:8:TL509"]


@pytest.mark.parametrize("model, loss, given", [
    ("LogSoftmaxNet", "NLLLoss", "model(x)"),  # log-probabilities into the loss made for them
    ("LogSoftmaxNet", "CrossEntropyLoss", "model(x)"),  # log-softmax is idempotent: the same loss
    ("EvalSoftmaxNet", "CrossEntropyLoss", "model(x)"),  # probabilities in eval mode only
    ("LogitNet", "CrossEntropyLoss", "model(x)"),  # `predict` gives probabilities, the loss gets logits
    ("SigmoidNet", "BCELoss", "model(x)"),  # probabilities into the loss made for them
    ("SoftmaxNet", "NLLLoss", "model(x)"),  # not a loss that applies softmax (another mistake, not this one)
])
def test_near_misses_of_probabilities_from_another_module_stay_silent(tmp_path: Path, model: str, loss: str, given: str) -> None:
    assert _tl509(tmp_path, model, loss, given) == []


def test_a_trainer_holding_a_model_of_another_module_and_a_loss_it_is_given(tmp_path: Path) -> None:
    """SciTSR's shape: the trainer keeps the model and the criterion it is constructed with."""
    trainer = """
        import torch
        from models import {model}


        class Trainer:
            def __init__(self, model, criterion, optimizer):
                self.model = model
                self.criterion = criterion
                self.optimizer = optimizer

            def train_epoch(self, loader):
                for x, y in loader:
                    outputs = self.model(x)
                    loss = self.criterion(outputs, y)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()


        model = {model}()
        trainer = Trainer(model, torch.nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()))
    """
    write(tmp_path, {"models.py": PROB_MODELS, "train.py": trainer.replace("{model}", "SoftmaxNet")})
    assert findings(tmp_path, ["train.py"], "TL509") == ["train.py:15:TL509"]
    write(tmp_path, {"models.py": PROB_MODELS, "train.py": trainer.replace("{model}", "EvalSoftmaxNet")})
    assert findings(tmp_path, ["train.py"], "TL509") == []
