"""The modules a container holds (DESIGN.md, "The whole program"): a model's `forward` that runs
each block of an `nn.ModuleList` (`for block in self.blocks: x = block(x)`), a layer picked from one
(`self.layers[i](x)`), an `nn.Sequential` of project modules called as one; and a model of a project
class on one path and of unknown class on another (a checkpoint `torch.load` restores)."""

from __future__ import annotations

from pathlib import Path

from tests.test_whole_program import findings, write

BLOCKS = """
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, h, mask=None):
            if mask is not None and mask.any().item():
                h = h.masked_fill(mask, 0)
            return self.proj(h)


    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, h):
            pad = torch.zeros(h.shape[0], 4).to(h.device)
            return self.proj(h) + pad
"""

# the containers, built the three usual ways
NET = """
    from torch import nn

    from models.blocks import Block, Stage


    class Net(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.blocks = nn.ModuleList([Block() for _ in range(n)])
            self.extra = nn.ModuleList()
            for _ in range(n):
                self.extra.append(Block())
            stages = []
            for _ in range(n):
                stages.append(Stage())
            self.body = nn.Sequential(*stages)

        def forward(self, x, mask):
            for i, block in enumerate(self.blocks):
                x = block(x, mask)
            x = self.extra[0](x)
            return self.body(x).sum()
"""

TRAIN = """
    import argparse

    import torch

    from models.net import Net

    args = argparse.ArgumentParser().parse_args()
    if args.resume:
        with open(args.resume, "rb") as f:
            model = torch.load(f)
        model = model.float()
    else:
        model = Net(4)
    model = model.cuda()
    optimizer = torch.optim.Adam(model.parameters())
    for x, mask in loader:
        loss = model(x.cuda(), mask.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""

# the same model, only evaluated: its blocks run in no step
EVALUATE = """
    import torch

    from models.net import Net

    model = Net(4).cuda().eval()
    with torch.no_grad():
        for x, mask in loader:
            print(model(x.cuda(), mask.cuda()))
"""


def _project(tmp_path: Path, script: str) -> dict[str, list]:
    write(tmp_path, {"models/__init__.py": "", "models/blocks.py": BLOCKS, "models/net.py": NET, "train.py": script})
    return findings(tmp_path, ["train.py", "models/net.py", "models/blocks.py"], "TL40")


def test_blocks_of_a_module_list_and_stages_of_a_sequential_run_every_step(tmp_path: Path) -> None:
    found = _project(tmp_path, TRAIN)
    # Block.forward, reached through the ModuleList's iteration, its appended copy and its index
    assert "models/blocks.py:12:TL401" in found
    # Stage.forward, reached through calling the Sequential built from a list of stages
    assert "models/blocks.py:23:TL406" in found
    chains = found["models/blocks.py:23:TL406"]
    assert any(("net.py", 23) in chain for chain in chains)


def test_a_model_restored_from_a_checkpoint_on_another_path_still_runs_the_project_forward(tmp_path: Path) -> None:
    # `model` is a `torch.load` of unknown class when resuming, a `Net` otherwise: Net's forward may run
    found = _project(tmp_path, TRAIN)
    assert any(("train.py", 18) in chain for chain in found["models/blocks.py:12:TL401"])


def test_blocks_of_a_model_that_is_only_evaluated_run_in_no_step(tmp_path: Path) -> None:
    found = _project(tmp_path, EVALUATE)
    assert not any(key.startswith("models/blocks.py") for key in found)


def test_a_model_of_unknown_class_on_every_path_reaches_no_project_forward(tmp_path: Path) -> None:
    # a checkpoint restored on every path: nothing says which class it is
    script = TRAIN.replace("    else:\n        model = Net(4)\n", "    else:\n        model = torch.load(args.init)\n")
    found = _project(tmp_path, script)
    assert not any(key.startswith("models/blocks.py") for key in found)


# a list of every layer kind a configuration may name, indexed by position: more classes than the
# value model follows, so none of them is taken to run (the last one built is not singled out)
LAYER_KINDS = """
    import torch
    from torch import nn


    class Conv(nn.Module):
        def forward(self, x):
            return x


    class Pool(nn.Module):
        def forward(self, x):
            return x


    class Route(nn.Module):
        def forward(self, x):
            return x


    class Shortcut(nn.Module):
        def forward(self, x):
            return x


    class Upsample(nn.Module):
        def forward(self, x):
            return x


    class Reorg(nn.Module):
        def forward(self, x):
            return x


    class Dropout(nn.Module):
        def forward(self, x):
            return x


    class Yolo(nn.Module):
        def forward(self, x):
            return x


    class Region(nn.Module):
        def forward(self, x):
            if x.sum().item() > 0:
                return x
            return -x


    def create(blocks):
        models = nn.ModuleList()
        for kind in blocks:
            if kind == "conv":
                models.append(Conv())
            elif kind == "pool":
                models.append(Pool())
            elif kind == "route":
                models.append(Route())
            elif kind == "shortcut":
                models.append(Shortcut())
            elif kind == "upsample":
                models.append(Upsample())
            elif kind == "reorg":
                models.append(Reorg())
            elif kind == "dropout":
                models.append(Dropout())
            elif kind == "yolo":
                models.append(Yolo())
            else:
                models.append(Region())
        return models


    class Darknet(nn.Module):
        def __init__(self, blocks):
            super().__init__()
            self.blocks = blocks
            self.models = create(blocks)

        def forward(self, x):
            for i, kind in enumerate(self.blocks):
                if kind != "region":
                    x = self.models[i](x)
            return x.sum()
"""


def test_a_layer_picked_from_a_list_of_many_kinds_is_none_of_them(tmp_path: Path) -> None:
    script = TRAIN.replace("from models.net import Net", "from models.darknet import Darknet").replace("Net(4)", "Darknet(cfg)")
    write(tmp_path, {"models/__init__.py": "", "models/darknet.py": LAYER_KINDS, "train.py": script})
    found = findings(tmp_path, ["train.py", "models/darknet.py"], "TL40")
    assert not any(key.startswith("models/darknet.py") for key in found)
