"""A registry of builder functions (DINO's `@MODULE_BUILD_FUNCS.registe_with_name(module_name='dino')
def build_dino(args)`, looked up as `build_func = MODULE_BUILD_FUNCS.get(args.modelname)`): what the
looked-up function returns is what one of the registered functions returns, so the criterion it
builds, handed on through a factory of the script (`model, criterion, pp = build_model_main(args)`)
to another module's training loop, runs its `forward` every step there. A registry of many builders,
or a factory handing on something else, says nothing."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

REGISTRY = """\
class Registry:
    def __init__(self, name):
        self._module_dict = {}

    def get(self, key):
        return self._module_dict.get(key, None)

    def register_with_name(self, module_name=None):
        def wrap(fn):
            self._module_dict[module_name] = fn
            return fn
        return wrap


MODULE_BUILD_FUNCS = Registry("builders")
"""

DETECTOR = """\
import torch
from torch import nn
from models.registry import MODULE_BUILD_FUNCS


class SetCriterion(nn.Module):
    def forward(self, outputs, targets):
        idx = torch.arange(len(targets)).long().cuda()
        return (outputs[idx] - 1).pow(2).mean()


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        return self.head(x)


@MODULE_BUILD_FUNCS.register_with_name(module_name="NAME")
def build_NAME(args):
    model = Detector()
    criterion = SetCriterion()
    return model, criterion, {}
"""

MAIN = """\
import torch
from engine import train_one_epoch


def build_model_main(args):
    from models.registry import MODULE_BUILD_FUNCS
    build_func = MODULE_BUILD_FUNCS.get(args.modelname)
    model, criterion, postprocessors = build_func(args)
    return model, criterion, postprocessors


def main(args):
    model, criterion, postprocessors = build_model_main(args)
    model.cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    for epoch in range(10):
        train_one_epoch(model, criterion, args.loader, optimizer)
"""

ENGINE = """\
def train_one_epoch(model, criterion, loader, optimizer):
    for x, y in loader:
        loss = criterion(model(x.cuda()), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def _lint(tmp_path: Path, names: tuple[str, ...] = ("dino",), main: str = MAIN) -> list[str]:
    files = {"pyproject.toml": "", "models/registry.py": REGISTRY, "main.py": main, "engine.py": ENGINE}
    files["models/__init__.py"] = "".join(f"from .{n} import build_{n}\n" for n in names)
    for name in names:
        files[f"models/{name}.py"] = DETECTOR.replace("NAME", name)
    (tmp_path / "models").mkdir(exist_ok=True)
    return lint_project(tmp_path, files, "TL406")


def test_a_criterion_a_registered_builder_returns_runs_every_step_where_it_is_handed(tmp_path: Path) -> None:
    assert _lint(tmp_path) == ["dino.py:8:TL406"]


def test_a_registry_of_many_builders_says_nothing(tmp_path: Path) -> None:
    assert _lint(tmp_path, names=("dino", "detr", "dab", "dn")) == []


def test_a_factory_handing_on_another_call_says_nothing(tmp_path: Path) -> None:
    main = MAIN.replace("    return model, criterion, postprocessors\n", "    return model, torch.nn.MSELoss(), postprocessors\n", 1)
    assert _lint(tmp_path, main=main) == []
