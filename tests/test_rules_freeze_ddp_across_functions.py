"""TL504 and TL510 across functions and attribute chains: a freeze written on a submodule reached through
attributes (of a class of another project module too), `requires_grad_` rebound on a receiver of unknown
class, the Parameter a `torch.nn` base layer creates; a DDP wrapper moved on its wrap line, in the step
loop, or through an attribute a trainer keeps in another method. Each shape beside its near miss."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers import lines
from trainlint.config import Settings
from trainlint.engine.lint import lint_paths


def project_lines(folder: Path, files: dict[str, str], path: str, rule: str) -> list[int]:
    """The lines where `rule` fires in `path` of a project written to `folder`, linted whole."""
    (folder / "pyproject.toml").write_text("")
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text))
    settings = Settings(select=(rule,), preview=True, root=folder)
    found = [d for r in lint_paths([(folder / path, settings)], jobs=1) for d in r.diagnostics if d.code == rule]
    return sorted(d.line for d in found)


# -- TL504: attribute chains into classes of other modules -------------------------------------------

PARTS = """\
    import torch.nn as nn


    class OutConv(nn.Module):
        def __init__(self, in_channels, out_channels):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)

        def forward(self, x):
            return self.conv(x)


    class Gate(nn.Module):
        # a flag of its own, read in forward: not a misspelled freeze
        def __init__(self, channels):
            super().__init__()
            self.proj = nn.Conv2d(channels, channels, kernel_size=1)
            self.requires_grad = True

        def forward(self, x):
            return self.proj(x) if self.requires_grad else self.proj(x).detach()
"""

MODEL = """\
    import torch.nn as nn
    from .parts import OutConv, Gate


    class UNet(nn.Module):
        def __init__(self, n_channels, n_classes):
            super().__init__()
            self.inc = nn.Conv2d(n_channels, 64, kernel_size=3, padding=1)
            self.gate = Gate(64)
            self.outc = OutConv(64, n_classes)

        def forward(self, x):
            return self.outc(self.gate(self.inc(x)))
"""

TRAIN = """\
    import torch
    from unet import UNet


    class Trainer:
        def __init__(self, config):
            self.config = config
            self.model = UNet(n_channels=3, n_classes=2)
            self.optimizer = torch.optim.RMSprop(self.model.parameters(), lr=1e-5)

        def freeze_head(self):
            self.model.outc.requires_grad = False
            self.model.inc.requires_grad = False
            self.model.outc.conv.weight.require_grad = False

        def near_misses(self):
            self.model.gate.requires_grad = False
            self.config.requires_grad = False
            for p in self.model.inc.parameters():
                p.requires_grad = False

        def fit(self, loader):
            self.freeze_head()
            for images, masks in loader:
                self.optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(self.model(images), masks)
                loss.backward()
                self.optimizer.step()
"""


@pytest.mark.parametrize("trains_here", [False, True], ids=["model-files-outlined", "model-files-with-training-code"])
def test_tl504_submodules_of_a_class_of_another_module_through_attributes(tmp_path: Path, trains_here: bool):
    # the model files read by their outline (no training code), or analysed in full (a module that
    # backpropagates somewhere gets a full summary): both say what the instances hold
    extra = "\n\ndef probe(model, x):\n    model(x).sum().backward()\n" if trains_here else ""
    files = {
        "unet/__init__.py": "from .model import UNet\n",
        "unet/parts.py": textwrap.dedent(PARTS) + extra,
        "unet/model.py": textwrap.dedent(MODEL) + extra,
        "train.py": TRAIN,
    }
    # the project class's head and the torch layer of the other module; the parameter of a torch layer
    # two modules away; not the class whose own flag `forward` reads, a config, or parameters
    assert project_lines(tmp_path, files, "train.py", "TL504") == [12, 13, 14]


def test_tl504_a_submodule_class_with_a_base_of_another_module_is_not_guessed(tmp_path: Path):
    files = {
        "base.py": """\
            import torch.nn as nn
            class Flagged(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.requires_grad = True
        """,
        "model.py": """\
            import torch.nn as nn
            from base import Flagged
            class Head(Flagged):
                def forward(self, x):
                    return x if self.requires_grad else x.detach()
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.head = Head()
        """,
        "train.py": """\
            from model import Net
            net = Net()
            net.head.requires_grad = False
        """,
    }
    assert project_lines(tmp_path, files, "train.py", "TL504") == []


# -- TL504: the method rebound, the Parameter a torch base layer creates --------------------------------


def test_tl504_requires_grad_method_rebound_on_receivers_of_unknown_class():
    code = """\
    def freeze(layer):
        layer.requires_grad_ = False

    def freeze_filters(conv):
        for filter in conv.weight:
            filter.requires_grad_ = False
    """
    assert lines(code, "TL504") == [2, 6]


def test_tl504_requires_grad_underscore_as_an_attribute_of_the_project_is_not_flagged():
    code = """\
    class Switch:
        def __init__(self):
            self.requires_grad_ = True

    def toggle(obj, args, opts):
        obj.requires_grad_ = False
        args.requires_grad_ = False
        opts.model.requires_grad_ = False
    """
    assert lines(code, "TL504") == []


def test_tl504_requires_grad_underscore_read_as_a_flag_is_not_flagged():
    code = """\
    def toggle(obj):
        obj.requires_grad_ = False
        if obj.requires_grad_:
            print("trainable")
    """
    assert lines(code, "TL504") == []


def test_tl504_a_numbers_or_collections_attribute_is_not_a_tensor():
    code = """\
    def setup(model):
        names = [n for n, _ in model.named_parameters()]
        names.requires_grad_ = False
    """
    assert lines(code, "TL504") == []


def test_tl504_misspelled_flag_on_the_weight_of_a_linear_subclass():
    code = """\
    import torch.nn as nn

    class FrozenLinear(nn.Linear):
        def freeze(self):
            self.weight.require_grad = False
            self.bias.requires_grad = False

    class LoRALinear(FrozenLinear):
        def __init__(self, n, m, rank=4):
            super().__init__(n, m)
            self.lora_a = nn.Parameter(torch.zeros(rank, n))
        def freeze_base(self):
            self.weight.requires_grads = False
            self.lora_a.requires_grad = True
    """
    assert lines(code, "TL504") == [5, 13]


def test_tl504_a_weight_the_subclass_sets_itself_is_its_own():
    code = """\
    import torch.nn as nn

    class Scaled(nn.Linear):
        def __init__(self, n, m):
            super().__init__(n, m)
            self.weight = WeightNorm(n, m)
        def freeze(self):
            self.weight.require_grad = False

    class Block(nn.Module):
        def freeze(self):
            self.weight.require_grad = False
    """
    assert lines(code, "TL504") == []


# -- TL510: the wrapper moved on its wrap line and in the step loop -----------------------------------


def test_tl510_wrapper_moved_on_the_line_that_wraps_it():
    code = """\
    import os
    import torch
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    def main(loader):
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device("cuda", local_rank)
        model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
        model = DDP(model).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
            optimizer.step()
    """
    assert lines(code, "TL510") == [10]


def test_tl510_wrap_line_move_to_where_the_model_already_is_is_not_flagged():
    code = """\
    import torch
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    def main(loader, device):
        model = nn.Linear(16, 4).to(device)
        model = DDP(model).to(device)
        for x, y in loader:
            nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
            optimizer.step()
    """
    assert lines(code, "TL510") == []


def test_tl510_wrapper_moved_inside_the_step_loop():
    code = """\
    import torch
    import torch.nn as nn
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(rank, world_size, loader):
        model = nn.Linear(16, 4)
        ddp_model = DDP(model)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
        for x, y in loader:
            ddp_model.to(rank)
            optimizer.zero_grad()
            nn.functional.mse_loss(ddp_model(x.to(rank)), y.to(rank)).backward()
            optimizer.step()

    def evaluate_on_host(rank, loader):
        model = nn.Linear(16, 4).to(rank)
        ddp_model = DDP(model, device_ids=[rank])
        for x, y in loader:
            ddp_model(x).sum().backward()
            optimizer.step()
            ddp_model.cpu()
            report(ddp_model)
            ddp_model.to(rank)

    if __name__ == "__main__":
        mp.spawn(train, args=(2, None), nprocs=2)
    """
    # the host round trip is one defect, reported where the model leaves the accelerator
    assert lines(code, "TL510") == [11, 22]


def test_tl510_moves_before_wrapping_batches_copies_and_same_dtype_are_not_flagged():
    code = """\
    import copy
    import torch
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    def run(rank, loader, dtype):
        model = nn.Linear(16, 4)
        model.to(rank)
        ddp = DDP(model, device_ids=[rank])
        ddp.to(torch.float32)
        ddp.to(dtype)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
        for x, y in loader:
            x, y = x.to(rank), y.to(rank)
            optimizer.zero_grad()
            nn.functional.mse_loss(ddp(x), y).backward()
            optimizer.step()
            snapshot = copy.deepcopy(ddp.module).cpu()
    """
    assert lines(code, "TL510") == []


def test_tl510_a_cast_to_another_dtype_with_to_is_a_move():
    code = """\
    import torch
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    def run(rank, loader):
        ddp = DDP(nn.Linear(16, 4).to(rank), device_ids=[rank])
        ddp.to(torch.bfloat16)
        for x, y in loader:
            ddp(x).sum().backward()
            optimizer.step()
    """
    assert lines(code, "TL510") == [7]


# -- TL510: the wrapper's module kept on `self`, moved in another method ------------------------------

TRAINER = """\
import copy
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

class Trainer:
    def __init__(self, model, loader, rank):
        self.rank = rank
        self.loader = loader
        self.ddp_model = DDP(model.to(rank), device_ids=[rank])
        self.model = self.ddp_model.module
        self.optimizer = torch.optim.Adam(self.ddp_model.parameters())

    def test_step(self, batch):
        {test}
        with torch.no_grad():
            out = self.model(batch)
        self.model.to(self.rank)
        return out

    def train(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                self.optimizer.zero_grad()
                loss = (self.ddp_model(x) - y).pow(2).mean()
                loss.backward()
                self.optimizer.step()
            {between}
        {after}
"""


def _trainer(test: str, between: str = "pass", after: str = "pass") -> str:
    return TRAINER.replace("{test}", test).replace("{between}", between).replace("{after}", after)


def test_tl510_module_kept_on_self_moved_in_a_test_step_of_the_epoch_loop():
    assert lines(_trainer("self.model.cpu()", between="self.test_step(x)"), "TL510") == [14]
    assert lines(_trainer("self.ddp_model.module.cpu()", between="self.test_step(x)"), "TL510") == [14]


@pytest.mark.parametrize(
    "test,between,after",
    [
        ("self.model.cpu()", "pass", "self.test_step(x)"),  # after the last epoch: nothing trains after
        ("eval_model = copy.deepcopy(self.model).cpu()", "self.test_step(x)", "pass"),  # a copy for evaluation
        ("self.model.cpu()\n        self.ddp_model = DDP(self.model)", "self.test_step(x)", "pass"),  # wrapped again
    ],
    ids=["after-training", "copy", "re-wrapped"],
)
def test_tl510_near_misses_of_the_kept_module(test: str, between: str, after: str):
    assert lines(_trainer(test, between, after), "TL510") == []
