"""Order-of-events rules: a layer replaced after the optimizer (TL507), a sampler never told the epoch
(TL508), a DDP model moved after wrapping (TL510). Real-shaped positives, the near misses, and the
TL508 fix run with torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import lines, lint

# -- TL507 layer-replaced-after-optimizer -----------------------------------------------------------

TRANSFER = """\
import torch
import torch.nn as nn
import torchvision

def main(args):
    model = torchvision.models.resnet50(weights="IMAGENET1K_V2")
    for p in model.parameters():
        p.requires_grad = False
    optimizer = torch.optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=args.lr)
    {between}
    model = model.to(args.device)
    for epoch in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
"""


def test_tl507_head_replaced_after_optimizer_in_transfer_learning():
    code = TRANSFER.replace("{between}", "model.fc = nn.Linear(model.fc.in_features, args.num_classes)")
    found = lint(code, "TL507")
    assert [d.line for d in found] == [10]
    assert "`model.fc` is replaced after `optimizer` was built" in found[0].message


def test_tl507_sequential_item_and_named_parameter_list():
    code = """\
        import torch
        from torch import nn
        def finetune(model, loader, classes):
            params = []
            for name, p in model.named_parameters():
                if "bn" not in name:
                    params.append(p)
            opt = torch.optim.Adam(params, lr=1e-4)
            model.classifier[-1] = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))
            for x, y in loader:
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
        """
    assert lines(code, "TL507") == [9]


@pytest.mark.parametrize(
    "between",
    [
        # a parameterless head: nothing is left untrained
        "model.fc = nn.Identity()",
        # a value of a class the analysis cannot see: a name must not make a finding
        "model.fc = make_head(args.num_classes)",
        # the optimizer rebuilt from the new parameters
        "model.fc = nn.Linear(2048, 10)\n    optimizer = torch.optim.SGD(model.fc.parameters(), lr=args.lr)",
        # the new layer handed to the optimizer
        "model.fc = nn.Linear(2048, 10)\n    optimizer.add_param_group({'params': model.fc.parameters()})",
        # another object's attribute
        "other.fc = nn.Linear(2048, 10)",
    ],
)
def test_tl507_near_misses(between: str):
    assert lint(TRANSFER.replace("{between}", between), "TL507") == []


def test_tl507_head_replaced_before_the_optimizer_is_not_flagged():
    code = TRANSFER.replace("    optimizer = torch.optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=args.lr)\n", "")
    code = code.replace("{between}", "model.fc = nn.Linear(2048, 10)\n    optimizer = torch.optim.SGD(model.fc.parameters(), lr=args.lr)")
    assert lint(code, "TL507") == []


def test_tl507_optimizer_not_used_after_the_replacement_is_not_flagged():
    code = """\
        import torch
        from torch import nn
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        print(optimizer)
        model.fc = nn.Linear(512, 10)
        """
    assert lint(code, "TL507") == []


def test_tl507_is_a_preview_rule():
    code = TRANSFER.replace("{between}", "model.fc = nn.Linear(2048, 10)")
    assert lint(code, "TL507", preview=False) == []


# -- TL508 sampler-epoch-not-set --------------------------------------------------------------------

DDP_SCRIPT = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

def main(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    train_sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank{shuffle})
    train_loader = DataLoader(train_set, batch_size=32, sampler=train_sampler, pin_memory=True)
    for epoch in range(args.epochs):
        {top}
        model.train()
        for step, (x, y) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
        evaluate(model, val_loader)
"""


def _ddp(shuffle: str = "", top: str = "pass") -> str:
    return DDP_SCRIPT.replace("{shuffle}", shuffle).replace("{top}", top)


def test_tl508_flags_the_sampler_of_an_epoch_loop_without_set_epoch():
    found = lint(_ddp(), "TL508")
    assert [d.line for d in found] == [8]
    assert found[0].fix is not None and found[0].fix.edits[0].content == "        train_sampler.set_epoch(epoch)\n"


@pytest.mark.parametrize(
    "shuffle,top",
    [
        ("", "train_sampler.set_epoch(epoch)"),
        ("", "train_loader.sampler.set_epoch(epoch)"),
        (", shuffle=False", "pass"),
        (", shuffle=args.shuffle", "pass"),  # not a literal: unknown, not guessed
    ],
)
def test_tl508_near_misses(shuffle: str, top: str):
    assert lint(_ddp(shuffle, top), "TL508") == []


def test_tl508_evaluation_loop_is_not_an_epoch_of_training():
    code = """\
        from torch.utils.data import DataLoader, DistributedSampler
        val_loader = DataLoader(val_set, sampler=DistributedSampler(val_set))
        for epoch in range(10):
            train_one_epoch(model, optimizer)
            with torch.no_grad():
                for x, y in val_loader:
                    metric.update(model(x), y)
        """
    assert lint(code, "TL508") == []


TRAINER_CLASS = """\
    import torch
    from torch.utils.data import DataLoader, DistributedSampler


    class Trainer:
        def _init_state(self):
            train_sampler = DistributedSampler(self.train_set, num_replicas=self.world_size, rank=self.rank)
            self._train_loader = DataLoader(self.train_set, batch_size=32, sampler=train_sampler)
            self._test_loader = DataLoader(self.test_set, batch_size=32)

        def _train(self):
            for epoch in range(self.epochs):
                {top}
                for x, y in self._train_loader:
                    self.optimizer.zero_grad()
                    self.criterion(self.model(x.cuda()), y.cuda()).backward()
                    self.optimizer.step()
    """


def test_tl508_a_loader_a_trainer_keeps_on_self_is_followed_to_its_epochs():
    """FixRes' trainer: `_init_state` keeps the loader of a shuffling sampler on `self`, `_train` runs the
    epochs over it. Near miss: `self._train_loader.sampler.set_epoch(epoch)` in the epoch loop."""
    assert [d.line for d in lint(TRAINER_CLASS.replace("{top}", "pass"), "TL508")] == [7]
    assert lint(TRAINER_CLASS.replace("{top}", "self._train_loader.sampler.set_epoch(epoch)"), "TL508") == []


def test_tl508_custom_sampler_with_set_epoch_is_flagged_and_one_without_is_not():
    with_epoch = """\
        import torch
        from torch.utils.data import DataLoader, Sampler
        class RepeatSampler(Sampler):
            def __init__(self, n, seed=0):
                self.n, self.seed, self.epoch = n, seed, 0
            def set_epoch(self, epoch):
                self.epoch = epoch
            def __iter__(self):
                g = torch.Generator().manual_seed(self.seed + self.epoch)
                return iter(torch.randperm(self.n, generator=g).tolist())
        loader = DataLoader(dataset, sampler=RepeatSampler(len(dataset)))
        for epoch in range(10):
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
        """
    assert lines(with_epoch, "TL508") == [11]
    without = with_epoch.replace("            def set_epoch(self, epoch):\n                self.epoch = epoch\n", "")
    assert lint(without, "TL508") == []


def test_tl508_loader_handed_to_lightning_is_not_flagged():
    code = """\
        import lightning as L
        from torch.utils.data import DataLoader, DistributedSampler
        loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
        trainer = L.Trainer(max_epochs=10)
        trainer.fit(model, loader)
        """
    assert lint(code, "TL508") == []


def test_tl508_sampler_recreated_each_epoch_with_the_same_seed():
    code = """\
        from torch.utils.data import DataLoader, DistributedSampler
        for epoch in range(start, epochs):
            sampler = DistributedSampler(dataset, rank=rank, num_replicas=world)
            loader = DataLoader(dataset, sampler=sampler, batch_size=8)
            for x in loader:
                optimizer.zero_grad()
                model(x).mean().backward()
                optimizer.step()
        """
    found = lint(code, "TL508")
    assert [d.line for d in found] == [3] and found[0].fix is None  # set_epoch on a new sampler: no fix offered
    assert lint(code.replace("num_replicas=world)", "num_replicas=world, seed=epoch)"), "TL508") == []


SAMPLER_RUN = """\
import json
import torch
from torch.utils.data import DataLoader, DistributedSampler

torch.manual_seed(0)
dataset = torch.arange(32, dtype=torch.float32).unsqueeze(1)
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
sampler = DistributedSampler(dataset, num_replicas=2, rank=0)
loader = DataLoader(dataset, batch_size=4, sampler=sampler)
orders = []
for epoch in range(3):
    seen = []
    for x in loader:
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
        seen += x.squeeze(1).int().tolist()
    orders.append(seen)
print(json.dumps(orders))
"""


def _orders(path: Path) -> list[list[int]]:
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_tl508_fix_makes_each_epoch_shuffle_differently(tmp_path: Path):
    pytest.importorskip("torch")
    path = tmp_path / "train.py"
    path.write_text(SAMPLER_RUN)
    before = _orders(path)
    assert before[0] == before[1] == before[2], "without set_epoch every epoch repeats the order"
    fix = subprocess.run(
        [sys.executable, "-m", "trainlint", str(path), "--preview", "--select", "TL508", "--fix", "--unsafe-fixes"],
        capture_output=True, text=True, timeout=300,
    )
    fixed = path.read_text()
    assert "    sampler.set_epoch(epoch)\n    seen = []" in fixed, fix.stderr
    after = _orders(path)
    assert after[0] == before[0], "epoch 0 keeps its permutation"
    assert after[0] != after[1] and after[1] != after[2] and after[0] != after[2]
    assert len(after[1]) == len(after[0]) == 16, "each epoch still draws this rank's half of the data"
    assert lint(fixed, "TL508") == []


# -- TL510 ddp-model-moved-after-wrap ---------------------------------------------------------------

DDP_TRAIN = """\
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(16, 4)
    def forward(self, x):
        return self.body(x)

def run(rank, loader):
    model = Net(){before}
    ddp_model = DDP(model{ids})
    {after}
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(ddp_model(x), y).backward()
        optimizer.step()
    {end}
"""


def _wrap(before: str = "", ids: str = "", after: str = "pass", end: str = "pass") -> str:
    return DDP_TRAIN.replace("{before}", before).replace("{ids}", ids).replace("{after}", after).replace("{end}", end)


@pytest.mark.parametrize(
    "before,ids,after",
    [
        ("", "", "ddp_model.half()"),  # a float32 CPU model cast to fp16 after wrapping
        ("", "", "ddp_model.cuda(rank)"),  # a CPU DDP model moved to the GPU
        (".cuda(rank)", ", device_ids=[rank]", "ddp_model.module.cpu()"),  # the module moved to the host
        (".to(rank)", ", device_ids=[rank]", "model.to(torch.float64)"),  # the wrapped module itself cast
        ("", "", "ddp_model = ddp_model.to(torch.device('cuda', rank))"),
    ],
)
def test_tl510_moves_after_wrapping_are_flagged(before: str, ids: str, after: str):
    found = lint(_wrap(before, ids, after), "TL510")
    assert [d.line for d in found] == [15], found


@pytest.mark.parametrize(
    "before,ids,after,end",
    [
        (".cuda(rank)", ", device_ids=[rank]", "ddp_model.cuda(rank)", "pass"),  # to where it already is
        ("", "", "ddp_model.cpu()", "pass"),  # a CPU model stays on the CPU
        ("", "", "ddp_model.float()", "pass"),  # float32 stays float32
        (".half()", "", "ddp_model.half()", "pass"),  # fp16 stays fp16
        (".to(device)", ", device_ids=[rank]", "ddp_model.to(device)", "pass"),
        (".cuda(rank)", ", device_ids=[rank]", "pass", "torch.save(ddp_model.module.cpu().state_dict(), 'last.pt')"),
        ("", "", "helper.cuda()", "pass"),  # not the wrapped model
    ],
)
def test_tl510_near_misses(before: str, ids: str, after: str, end: str):
    assert lint(_wrap(before, ids, after, end), "TL510") == []


def test_tl510_model_of_unknown_dtype_cast_after_wrapping_is_not_guessed():
    code = """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = load_model(path)
        model = DDP(model)
        model.half()
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
        """
    assert lint(code, "TL510") == []


def test_tl510_offload_round_trip_in_the_epoch_loop():
    code = """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        def train(rank, model, loader, optimizer, epochs):
            model = DDP(model.cuda(rank), device_ids=[rank])
            for epoch in range(epochs):
                for x in loader:
                    optimizer.zero_grad()
                    model(x).sum().backward()
                    optimizer.step()
                model.cpu()
                index = build_faiss_index(features)
                model.cuda(rank)
        """
    assert lines(code, "TL510") == [10]


def test_tl510_rewrapped_after_the_move_is_not_flagged():
    code = """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        def stages(rank, model, loader):
            for stage in range(3):
                model.cuda(rank)
                ddp = DDP(model, device_ids=[rank])
                for x in loader:
                    ddp(x).sum().backward()
                    optimizer.step()
                ddp.module.cpu()
        """
    assert lint(code, "TL510") == []


def test_tl508_evaluation_function_calling_a_per_step_helper_is_not_training():
    code = """\
        from torch.utils.data import DataLoader, DistributedSampler
        def logps(model, batch):
            return model(**batch).logits.log_softmax(-1)
        def main():
            eval_loader = DataLoader(eval_set, sampler=DistributedSampler(eval_set))
            def evaluation(model, loader):
                for batch in loader:
                    with torch.no_grad():
                        metric.update(logps(model, batch))
            for epoch in range(epochs):
                for batch in train_loader:
                    logps(model, batch).mean().backward()
                    optimizer.step()
                evaluation(model, eval_loader)
        """
    assert lint(code, "TL508") == []
