"""TL511 validation-in-train-mode: evaluation loops under no_grad that run a model still in training mode."""

from __future__ import annotations

import textwrap

from tests.helpers import lint, lines

NET = """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x):
        return self.fc2(self.bn(self.fc1(x)))

"""


def _lines(body: str) -> list[int]:
    return lines(NET + textwrap.dedent(body), "TL511")


def test_driver_evaluating_between_epochs_is_flagged_at_the_forward():
    code = NET + textwrap.dedent(
        """\
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            model.train()
            for x, y in train_loader:
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
            with torch.no_grad():
                for x, y in val_loader:
                    out = model(x)
        """
    )
    found = lint(code, "TL511")
    assert [d.line for d in found] == [24]
    assert "`model.train()`" in found[0].message and "nn.BatchNorm1d(16)" in found[0].message
    assert "TL503" in found[0].message and "TL303" in found[0].message


def test_eval_before_the_loop_or_inside_the_called_function_is_not_flagged():
    switched_here = """\
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            model.train()
            for x, y in train_loader:
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
            model.eval()
            with torch.no_grad():
                for x, y in val_loader:
                    out = model(x)
        """
    assert _lines(switched_here) == []
    assert _lines(switched_here.replace("model.eval()", "model.train(False)")) == []
    # through an alias: `net = model.module` style bindings count as the same module
    aliased = switched_here.replace("model.eval()", "net = model\n            net.eval()")
    assert _lines(aliased) == []
    # a helper of this module that switches it
    helper = "        def prepare_eval(m):\n            m.eval()\n\n" + switched_here.replace("model.eval()", "prepare_eval(model)")
    assert _lines(helper) == []


def test_across_calls_the_callers_mode_decides():
    template = """\
        @torch.no_grad()
        def test(net, loader):
            return [net(x).argmax(1) for x in loader]

        def score(net, loader):
            total = 0
            with torch.no_grad():
                for x, y in loader:
                    total += (net(x).argmax(1) == y).sum().item()
            return total

        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            for x, y in train_loader:
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
            {switch}score(model, val_loader)
        """
    assert _lines(template.format(switch="")) == [22]
    assert _lines(template.format(switch="model.eval()\n    ")) == []


def test_a_model_without_dropout_or_batch_norm_is_not_flagged():
    code = """\
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.0), nn.LayerNorm(16), nn.Linear(16, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            for x, y in train_loader:
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
            with torch.no_grad():
                for x, y in val_loader:
                    out = model(x)
        """
    assert _lines(code) == []
    # the same loop with a dropout of 0.2 is flagged
    assert _lines(code.replace("nn.Dropout(0.0)", "nn.Dropout(0.2)")) == [23]
    # batch norm without running statistics behaves the same in both modes
    assert _lines(code.replace("nn.Dropout(0.0)", "nn.BatchNorm1d(16, track_running_stats=False)")) == []


def test_a_class_defined_twice_is_the_one_defined_before_the_model_is_built():
    # a notebook's first cells define `Classifier` without dropout and train it; a later cell defines
    # it again with dropout (udacity's "Inference and Validation"): the first loop's model has none
    template = """\
        class Classifier(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 2)

        {first}

        class Classifier(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 2)
                self.drop = nn.Dropout(0.2)

        {second}
        """
    loop = """model = Classifier()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            for x, y in train_loader:
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
            with torch.no_grad():
                for x, y in val_loader:
                    out = model(x)"""
    assert _lines(template.format(first=loop, second="")) == []
    assert _lines(template.format(first="", second=loop)) == [36]


def test_dropout_through_functional_call_tied_to_training_flag():
    code = """\
        import torch.nn.functional as F

        class Small(nn.Module):
            def __init__(self, p=0.3):
                super().__init__()
                self.fc = nn.Linear(8, 2)
                self.p = p
            def forward(self, x):
                return self.fc(F.dropout(x, p=0.3, training={flag}))

        model = Small()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in train_loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        with torch.no_grad():
            for x, y in val_loader:
                out = model(x)
        """
    assert _lines(code.format(flag="self.training")) == [32]
    # `training=True` drops in both modes: the mode changes nothing (TL505's concern, not this rule's)
    assert _lines(code.format(flag="True")) == []


def test_not_evaluation_loops():
    # a loop that backpropagates (meta-learning, adversarial evaluation) is not evaluation
    backprop = """\
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in train_loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        for x, y in val_loader:
            x.requires_grad_(True)
            with torch.no_grad():
                ref = model(x)
            model(x).sum().backward()
        """
    assert _lines(backprop) == []
    # an EMA update loop runs no forward pass
    ema = """\
        model = Net()
        ema = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in train_loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            with torch.no_grad():
                for pe, p in zip(ema.parameters(), model.parameters()):
                    pe.mul_(0.99).add_(p, alpha=0.01)
        """
    assert _lines(ema) == []


def test_mode_unknown_after_a_project_call_or_a_checkpoint_load():
    code = """\
        from engine import fit

        model = Net()
        fit(model)
        with torch.no_grad():
            for x, y in val_loader:
                out = model(x)
        """
    assert _lines(code) == []
    loaded = """\
        model = torch.load("model.pt")
        with torch.no_grad():
            for x, y in val_loader:
                out = model(x)
        """
    assert _lines(loaded) == []


def test_class_in_another_module_proves_nothing():
    code = """\
        import torch
        from models import Net

        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in train_loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        with torch.no_grad():
            for x, y in val_loader:
                out = model(x)
        """
    assert lines(textwrap.dedent(code), "TL511") == []


def test_pytest_files_are_not_checked():
    code = NET + textwrap.dedent(
        """\
        def test_forward():
            model = Net()
            with torch.no_grad():
                for x in [torch.randn(4, 8)]:
                    out = model(x)
        """
    )
    assert [d for d in lint(code, "TL511", name="tests/test_net.py")] == []
