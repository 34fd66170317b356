"""TL511 and TL508 where the two halves of the mistake are in different functions (and modules): a model
in training mode given to an evaluation function of another module; a shuffling DistributedSampler
whose loader goes to a function that runs the epochs, or that a helper builds. Each shape with the
near misses that must stay silent, as projects on disk linted whole."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.helpers import lint
from trainlint.config import Settings
from trainlint.engine.lint import lint_paths


def write(folder: Path, files: dict[str, str]) -> None:
    (folder / "pyproject.toml").write_text("")  # the project's root
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))


def found(folder: Path, select: str) -> dict[str, str]:
    """{"file:line": message} for every module of the project, linted together."""
    settings = Settings(select=(select,), root=folder, preview=True)
    out: dict[str, str] = {}
    for result in lint_paths([(p, settings) for p in sorted(folder.glob("*.py"))], jobs=1):
        for d in result.diagnostics:
            assert d.code == select, d.message
            out[f"{Path(d.path).name}:{d.line}"] = d.message
    return out


# -- TL511: the mode is the caller's, the forward the callee's ----------------------------------------

ENGINE = """\
    import torch


    def train_one_epoch(model, loader, optimizer):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


    @torch.no_grad()
    def evaluate(model, loader):
        correct = 0
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
        return correct


    def evaluate_in_eval_mode(model, loader):
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in loader:
                correct += (model(x).argmax(1) == y).sum().item()
        return correct


    def set_eval(model):
        model.eval()
    """

NET = """\
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from engine import evaluate, evaluate_in_eval_mode, set_eval, train_one_epoch


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU())
            self.head = nn.Linear(64, 2)

        def forward(self, x):
            return self.head(self.body(x))


    def main(rank, train_loader, val_loader):
        model = Net().cuda(rank)
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        model = DDP(model, device_ids=[rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(10):
            train_one_epoch(model, train_loader, optimizer)
            BEFORE
            acc = EVALUATE(model, val_loader)
    """


def _driver(before: str = "pass", evaluate: str = "evaluate", layers: str = "nn.BatchNorm1d(64)") -> str:
    return NET.replace("BEFORE", before).replace("EVALUATE", evaluate).replace("nn.BatchNorm1d(64)", layers)


def test_a_ddp_model_in_training_mode_given_to_another_modules_evaluation_function(tmp_path: Path) -> None:
    write(tmp_path, {"engine.py": ENGINE, "train.py": _driver()})
    got = found(tmp_path, "TL511")
    assert list(got) == ["train.py:26"]  # the call, where the mode is; nothing in engine.py
    message = got["train.py:26"]
    assert "`evaluate` in engine.py" in message and "train_one_epoch(model, train_loader, optimizer)" in message
    assert "nn.BatchNorm1d(64)" in message


def test_a_model_never_switched_at_all_is_in_training_mode(tmp_path: Path) -> None:
    engine = ENGINE.replace("        model.train()\n", "")  # the epoch function leaves the mode alone
    write(tmp_path, {"engine.py": engine, "train.py": _driver()})
    assert list(found(tmp_path, "TL511")) == ["train.py:26"]


def test_near_misses_of_the_evaluation_function_in_another_module(tmp_path: Path) -> None:
    write(tmp_path, {
        "engine.py": ENGINE,
        # the evaluation function switches the model itself
        "itself.py": _driver(evaluate="evaluate_in_eval_mode"),
        # the caller switches it before the call
        "caller.py": _driver(before="model.eval()"),
        # a helper of another module switches it
        "helper.py": _driver(before="set_eval(model)"),
        # no batch norm, no dropout: training mode changes nothing
        "plain.py": _driver(layers="nn.Tanh()"),
    })
    assert found(tmp_path, "TL511") == {}


def test_a_test_method_evaluating_a_model_the_class_built_in_training_mode() -> None:
    code = textwrap.dedent("""\
        import torch
        from torch import nn

        class Trainer:
            def __init__(self):
                self.model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 2))
                self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

            @torch.no_grad()
            def test(self, loader):
                outputs = []
                for x, y in loader:
                    outputs.append(self.model(x))
                return outputs

            def fit(self, train_loader, val_loader):
                for epoch in range(10):
                    for x, y in train_loader:
                        self.opt.zero_grad()
                        self.model(x).sum().backward()
                        self.opt.step()
                    self.PREPARE
                    self.test(val_loader)
        """)
    assert [d.line for d in lint(code.replace("self.PREPARE", "pass"), "TL511")] == [13]
    # a method of the class that switches it, run before the evaluation (any method that switches it
    # makes its mode in the other methods unknown: the order the methods run in is not followed)
    helper = "\n    def set_eval(self):\n        self.model.eval()\n"
    assert lint(code.replace("self.PREPARE", "self.set_eval()") + helper, "TL511") == []
    # switched to eval mode from outside the class: not followed, silent
    outside = code.replace("self.PREPARE", "pass") + "trainer = Trainer()\ntrainer.model.eval()\n"
    assert lint(outside, "TL511") == []


# -- TL508: the epochs in the callee, the sampler in a helper ---------------------------------------

EPOCHS = """\
    import torch


    def train_one_epoch(model, loader, optimizer):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


    def fit(model, loader, optimizer, epochs):
        for epoch in range(epochs):
            train_one_epoch(model, loader, optimizer)


    def fit_once(model, loader, optimizer):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    """

EPOCHS_WITH_SET_EPOCH = """\
    import torch


    def fit(model, loader, optimizer, epochs):
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
    """


def _caller(module: str, call: str) -> str:
    return f"""\
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    from {module} import {call.split("(")[0]}


    def main(model, train_set):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        sampler = DistributedSampler(train_set)
        loader = DataLoader(train_set, batch_size=32, sampler=sampler)
        {call}
    """


def test_a_shuffling_sampler_whose_loader_goes_to_a_function_of_another_module_that_runs_the_epochs(tmp_path: Path) -> None:
    write(tmp_path, {
        "engine.py": EPOCHS,
        "settled.py": EPOCHS_WITH_SET_EPOCH,
        "train.py": _caller("engine", "fit(model, loader, optimizer, 10)"),
        # near misses: the callee sets the epoch through `loader.sampler`; the callee runs one epoch
        "train_settled.py": _caller("settled", "fit(model, loader, optimizer, 10)"),
        "train_once.py": _caller("engine", "fit_once(model, loader, optimizer)"),
    })
    got = found(tmp_path, "TL508")
    assert list(got) == ["train.py:9"]
    assert "`fit` in engine.py" in got["train.py:9"] and "runs the epochs over its loader" in got["train.py:9"]


DATA = """\
    from torch.utils.data import DataLoader, DistributedSampler


    def make_loader(dataset, batch_size, shuffle):
        sampler = DistributedSampler(dataset, shuffle=shuffle)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=4)


    def build_train_loader(dataset):
        loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
        return loader
    """

UTILS = """\
    def sampler_set_epoch(loader, epoch):
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
    """


def _epochs(build: str, top: str = "pass") -> str:
    return f"""\
    import torch

    from data import build_train_loader, make_loader
    from utils import sampler_set_epoch


    def main(model, train_set):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_loader = {build}
        for epoch in range(10):
            {top}
            for x, y in train_loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
    """


def test_a_loader_a_helper_builds_with_a_shuffling_sampler(tmp_path: Path) -> None:
    write(tmp_path, {
        "data.py": DATA,
        "utils.py": UTILS,
        "shuffled.py": _epochs("make_loader(train_set, 32, shuffle=True)"),
        "built.py": _epochs("build_train_loader(train_set)"),
        # near misses: `shuffle=False`; the epoch set through a helper of another module
        "ordered.py": _epochs("make_loader(train_set, 32, shuffle=False)"),
        "helped.py": _epochs("build_train_loader(train_set)", "sampler_set_epoch(train_loader, epoch)"),
    })
    got = found(tmp_path, "TL508")
    assert sorted(got) == ["built.py:9", "shuffled.py:9"]
    assert "`make_loader` in data.py" in got["shuffled.py:9"]
    settings = Settings(select=("TL508",), root=tmp_path, preview=True)
    (result,) = lint_paths([(tmp_path / "shuffled.py", settings)], jobs=1)
    fix = result.diagnostics[0].fix
    assert fix is not None and "train_loader.sampler.set_epoch(epoch)" in fix.description


def test_shuffle_through_a_helpers_parameter_in_the_same_module() -> None:
    code = """\
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        def make_loader(dataset, shuffle=True):
            return DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset, shuffle=shuffle))

        train_loader = make_loader(train_set)
        val_loader = make_loader(val_set, shuffle=False)
        for epoch in range(10):
            for x, y in train_loader:
                optimizer.zero_grad()
                model(x).sum().backward()
                optimizer.step()
            for x, y in val_loader:
                optimizer.zero_grad()
                model(x).sum().backward()
                optimizer.step()
        """
    got = lint(code, "TL508")
    assert [d.line for d in got] == [7]  # the default shuffles; `shuffle=False` does not
    assert got[0].fix is not None and "train_loader.sampler.set_epoch(epoch)" in got[0].fix.description


def test_a_sampler_built_where_the_loader_is_built_is_fixed_through_the_loader() -> None:
    code = """\
        from torch.utils.data import DataLoader, DistributedSampler

        train_loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
        for epoch in range(10):
            for x in train_loader:
                model(x).sum().backward()
                optimizer.step()
        """
    got = lint(code, "TL508")
    assert [d.line for d in got] == [3]
    assert got[0].fix is not None and got[0].fix.description == "call `train_loader.sampler.set_epoch(epoch)` at the start of each epoch"
    fixed = code.replace("    for x in train_loader:", "    train_loader.sampler.set_epoch(epoch)\n            for x in train_loader:")
    assert lint(fixed, "TL508") == []


def test_a_test_method_no_method_of_the_class_calls_is_not_followed() -> None:
    """Run from another module, perhaps after `trainer.model.eval()`: the mode there is unknown."""
    code = """\
        import torch
        from torch import nn

        class Trainer:
            def __init__(self):
                self.model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 2))

            @torch.no_grad()
            def test(self, loader):
                outputs = []
                for x, y in loader:
                    outputs.append(self.model(x))
                return outputs
        """
    assert lint(code, "TL511") == []


def test_a_val_method_of_a_class_of_another_module(tmp_path: Path) -> None:
    evaluator = """\
        import torch


        class Evaluator:
            def __init__(self, loader):
                self.loader = loader

            @torch.no_grad()
            def val(self, model):
                SWITCH
                total = 0
                for x, y in self.loader:
                    total += (model(x).argmax(1) == y).sum().item()
                return total
        """
    driver = """\
        import torch
        import torchvision

        from evaluator import Evaluator


        def main(train_loader, val_loader):
            model = torchvision.models.resnet18(num_classes=10)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            evaluator = Evaluator(val_loader)
            for epoch in range(5):
                model.train()
                for x, y in train_loader:
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    opt.step()
                evaluator.val(model)
        """
    write(tmp_path, {"evaluator.py": evaluator.replace("SWITCH", "pass"), "train.py": driver})
    got = found(tmp_path, "TL511")
    assert list(got) == ["train.py:17"] and "`Evaluator.val` in evaluator.py" in got["train.py:17"]
    write(tmp_path, {"evaluator.py": evaluator.replace("SWITCH", "model.eval()"), "train.py": driver})
    assert found(tmp_path, "TL511") == {}  # the method switches the model itself
