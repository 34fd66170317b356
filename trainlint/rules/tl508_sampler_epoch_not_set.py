"""TL508 sampler-epoch-not-set."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from trainlint.diagnostics import Applicability, Severity
from trainlint.model import Assign, Call, Function, Loop, TrainingModel
from trainlint.model.modes import loop_ancestors
from trainlint.model.walk import iter_nodes
from trainlint.model.lattice import Kind
from trainlint.model.names import dotted
from trainlint.model.torchnames import is_true
from trainlint.rules.rule import Finding, NodeEdit, NodeFix, Rule

DISTRIBUTED_SAMPLERS = frozenset({"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"})
# calls that hand a loader to a framework, which then iterates it and sets the epoch itself
FRAMEWORK_METHODS = frozenset({"prepare", "prepare_data_loader", "setup_dataloaders", "fit", "train"})


def _names_in(node: cst.CSTNode) -> set[str]:
    """The dotted names an expression reads (`loader`, `self.loader`, `tqdm`)."""
    return {text for n in iter_nodes(node) if isinstance(n, (cst.Name, cst.Attribute)) for text in (dotted(n),) if text}


def _single_target(model: TrainingModel, call: Call) -> Assign | None:
    for a in model.assigns_in(call.site.statement):
        if a.value is call.node and len(a.targets) == 1 and a.op is None and not a.unpacked:
            return a
    return None


def _loop_targets(loop: Loop) -> set[str]:
    node = loop.node
    return _names_in(node.target) if isinstance(node, cst.For) else set()


class SamplerEpochNotSet(Rule):
    code = "TL508"
    name = "sampler-epoch-not-set"
    severity = Severity.WARNING
    preview = True
    summary = "A shuffling `DistributedSampler` feeds an epoch loop that never calls `sampler.set_epoch(epoch)`."
    hint = "Call `sampler.set_epoch(epoch)` at the start of every epoch, before iterating the loader."
    requires = ("Sampler",)
    why = (
        "A `DistributedSampler` shuffles with a generator seeded by `seed + epoch`, and its epoch only changes "
        "when `set_epoch` is called. Without it every epoch draws the same permutation: each rank sees its "
        "shard in the same order every epoch, as if `shuffle=False` had been chosen once at random. The "
        "PyTorch docs (torch.utils.data.distributed.DistributedSampler): \"In distributed mode, calling the "
        "set_epoch() method at the beginning of each epoch before creating the DataLoader iterator is "
        "necessary to make shuffling work properly across multiple epochs. Otherwise, the same ordering will "
        "be always used.\""
    )
    story = (
        "pytorch/pytorch#31771 (\"each epoch samples the data in the same order\"), lucidrains/DALLE-pytorch#230 and "
        "kan-bayashi/ParallelWaveGAN#177 (both fixed by calling `set_epoch` every epoch); the DeepSpeed-Chat "
        "training scripts (microsoft/DeepSpeedExamples) build a `DistributedSampler` and never set its epoch."
    )
    example = """\
import torch
from torch.utils.data import DataLoader, DistributedSampler

sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=32, sampler=sampler)
for epoch in range(epochs):
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
"""
    fixed_example = """\
import torch
from torch.utils.data import DataLoader, DistributedSampler

sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=32, sampler=sampler)
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
"""
    not_flagged = (
        "Modules that call `set_epoch` anywhere (on the sampler, `loader.sampler`, a batch sampler or a "
        "dataset); `shuffle=False`, or a `shuffle=` the analysis cannot read as a literal; samplers of classes "
        "without a `set_epoch` method (a custom sampler shuffles as it likes); a sampler re-created in the "
        "epoch loop with a `seed=` that reads the epoch loop's variables; loaders handed to a framework "
        "(`accelerator.prepare(...)`, `fabric.setup_dataloaders(...)`, a `fit(...)` or `train(...)` call), "
        "which iterates them and sets the epoch itself; loaders no epoch loop iterates again (one pass, "
        "evaluation loops that do not train), and loaders iterated by a function of another module (whose "
        "code may set the epoch)."
    )
    verification = '`trainlint verify` iterates a shuffling `DistributedSampler` (rank 0 of 2) for three epochs: the same order each time, until `set_epoch` is called.'
    valid = (
        """
from torch.utils.data import DataLoader, DistributedSampler
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, sampler=sampler)
for epoch in range(10):
    loader.sampler.set_epoch(epoch)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
""",
        # shuffle=False: the order is meant to stay
        """
from torch.utils.data import DataLoader, DistributedSampler
loader = DataLoader(dataset, sampler=DistributedSampler(dataset, shuffle=False))
for epoch in range(10):
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
""",
        # a custom sampler without set_epoch
        """
from torch.utils.data import DataLoader, Sampler
class ChunkSampler(Sampler):
    def __init__(self, n):
        self.n = n
    def __iter__(self):
        return iter(torch.randperm(self.n).tolist())
loader = DataLoader(dataset, sampler=ChunkSampler(len(dataset)))
for epoch in range(10):
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
""",
        # Accelerate's prepared loader sets the epoch itself
        """
from accelerate import Accelerator
from torch.utils.data import DataLoader, DistributedSampler
accelerator = Accelerator()
loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for epoch in range(10):
    for x in loader:
        accelerator.backward(model(x).sum())
        optimizer.step()
""",
        # no epoch loop: the loader is iterated once
        """
from torch.utils.data import DataLoader, DistributedSampler
loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
for x in loader:
    model(x).sum().backward()
    optimizer.step()
""",
        # re-created every epoch with a seed that changes
        """
from torch.utils.data import DataLoader, DistributedSampler
for epoch in range(10):
    sampler = DistributedSampler(dataset, seed=base_seed + epoch)
    for x in DataLoader(dataset, sampler=sampler):
        model(x).sum().backward()
        optimizer.step()
""",
    )
    invalid = (
        # the loader iterated by a function of this module, called every epoch
        """
import torch.utils.data.distributed
from torch.utils.data import DataLoader

def train(loader, model, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()

def main():
    train_sampler = torch.utils.data.distributed.DistributedSampler(train_set)
    train_loader = DataLoader(train_set, batch_size=64, sampler=train_sampler, num_workers=4)
    for epoch in range(args.epochs):
        train(train_loader, model, optimizer)
        validate(val_loader, model)
""",
        # re-created every epoch with the same seed: the same order each time
        """
from torch.utils.data import DataLoader, DistributedSampler
for epoch in range(10):
    sampler = DistributedSampler(dataset, seed=42)
    for x in DataLoader(dataset, sampler=sampler):
        model(x).sum().backward()
        optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        if any(c.method == "set_epoch" for c in model.calls):
            return
        for call in model.calls:
            if not self._shuffling_sampler(model, call):
                continue
            holder = _single_target(model, call)
            sampler_names = {holder.targets[0]} if holder is not None else set()
            loaders = [c for c in model.calls if self._fed_by(model, c, call, sampler_names)]
            for loader in loaders:
                epoch = self._epoch_loop(model, loader, call)
                if epoch is None:
                    continue
                yield Finding(
                    call.node,
                    "this sampler shuffles every epoch with the same seed: nothing calls `set_epoch(epoch)`, "
                    "so each rank sees its shard in the same order every epoch",
                    fix=self._fix(model, holder, epoch, call),
                )
                break

    @staticmethod
    def _shuffling_sampler(model: TrainingModel, call: Call) -> bool:
        """A `DistributedSampler` (or a local class with `set_epoch`) that shuffles."""
        if call.qualname in DISTRIBUTED_SAMPLERS:
            shuffle = call.arg(3, "shuffle")
        else:
            cls = model.local_class(call.name) if call.name else None
            if cls is None or "set_epoch" not in cls.methods:
                return False
            shuffle = call.kwarg("shuffle")
        return shuffle is None or is_true(shuffle)

    @staticmethod
    def _fed_by(model: TrainingModel, loader: Call, sampler: Call, names: set[str]) -> bool:
        """A `DataLoader(..., sampler=...)` (or `batch_sampler=BatchSampler(sampler, ...)`) fed by `sampler`."""
        if loader.site.function is not sampler.site.function or model.value(loader.node, loader.site).kind is not Kind.DATALOADER:
            return False
        given = loader.kwarg("sampler") or loader.kwarg("batch_sampler")
        if given is None:
            return False
        if given is sampler.node or any(n is sampler.node for n in iter_nodes(given)):
            return True
        # one of the bindings that reach the loader is the sampler (`RandomSampler` on one branch, the
        # distributed one on the other: the finding is about the distributed run)
        return any(
            a.value is sampler.node for name in names & _names_in(given) for a in model.reaching(loader.site.function, name, loader.site)
        )

    def _epoch_loop(self, model: TrainingModel, loader: Call, sampler: Call) -> Loop | None:
        """The loop that iterates the loader again every time round: around a training loop over it (one
        that holds a step), or around a call of a function of this module that runs one. None when the loader goes to a framework."""
        fn = loader.site.function
        holder = _single_target(model, loader)
        inline = holder is None
        name = holder.targets[0] if holder is not None else None
        if name is not None and any(
            c.method in FRAMEWORK_METHODS and any(name in _names_in(a.value) for a in c.node.args) for c in model.calls
        ):
            return None
        for loop in model.loops:
            if loop.function is not fn or not _trains(model, loop) or loop.parent is None or not isinstance(loop.node, cst.For):
                continue
            iterates = (loop.node.iter is loader.node or any(n is loader.node for n in iter_nodes(loop.node.iter))) if inline else (
                name in model.roots_of(loop.node.iter, fn)
            )
            if iterates:
                epoch = self._outer(loop, sampler)
                if epoch is not None:
                    return epoch
        if name is None:
            return None
        for call in model.calls:
            if call.site.function is not fn or not call.site.loops:
                continue
            callee = model.callee(call)
            if callee is None or not self._runs_step_over(model, callee, call, name):
                continue
            epoch = self._outer_of_call(call, sampler)
            if epoch is not None:
                return epoch
        return None

    @staticmethod
    def _runs_step_over(model: TrainingModel, callee: Function, call: Call, name: str) -> bool:
        """Whether `callee(..., loader, ...)` runs a step loop over the parameter that receives the loader."""
        params = [p for p in callee.params if p not in ("self", "cls")]
        received: str | None = None
        positional = [a for a in call.node.args if a.keyword is None and not a.star]
        for i, a in enumerate(positional):
            if dotted(a.value) == name and i < len(params):
                received = params[i]
        for a in call.node.args:
            if a.keyword is not None and dotted(a.value) == name:
                received = a.keyword.value
        if received is None:
            return False
        return any(
            loop.function is callee and _trains(model, loop) and isinstance(loop.node, cst.For)
            and received in model.roots_of(loop.node.iter, callee)
            for loop in model.loops
        )

    def _outer(self, step_loop: Loop, sampler: Call) -> Loop | None:
        parent = step_loop.parent
        while parent is not None:
            if self._repeats_same_order(parent, sampler):
                return parent
            parent = parent.parent
        return None

    def _outer_of_call(self, call: Call, sampler: Call) -> Loop | None:
        for loop in reversed(call.site.loops):
            if self._repeats_same_order(loop, sampler):
                return loop
        return None

    @staticmethod
    def _repeats_same_order(loop: Loop, sampler: Call) -> bool:
        """Every round of `loop` draws the sampler's permutation for the same epoch: the sampler is built
        outside it, or inside it with a seed that reads none of the names the loop changes."""
        if loop not in sampler.site.loops:
            return True
        seed = sampler.arg(4, "seed") if sampler.qualname in DISTRIBUTED_SAMPLERS else sampler.kwarg("seed")
        return seed is None or not (_names_in(seed) & (_loop_targets(loop) | {"epoch", "self.epoch"}))

    @staticmethod
    def _fix(model: TrainingModel, holder: Assign | None, epoch: Loop, sampler: Call) -> NodeFix | None:
        """Insert `sampler.set_epoch(epoch)` at the top of the epoch loop, for a named sampler built before it."""
        node = epoch.node
        if holder is None or epoch in sampler.site.loops or not isinstance(node, cst.For) or not isinstance(node.target, cst.Name):
            return None
        if "." in holder.targets[0] or not isinstance(node.body, cst.IndentedBlock) or not node.body.body:
            return None
        if len(model.bindings(holder.site.function, holder.targets[0])) > 1:
            return None  # `sampler = None` / a RandomSampler on another branch: an unguarded call would fail there
        call = f"{holder.targets[0]}.set_epoch({node.target.value})"
        return NodeFix(f"call `{call}` at the start of each epoch", (NodeEdit(node.body.body[0], call, "line_before"),), Applicability.UNSAFE)


def _trains(model: TrainingModel, loop: Loop) -> bool:
    """A loop that trains: a step loop, one around a step loop, or one calling a function of this module
    that runs a step loop (a function that is merely called every step, a forward helper, is not enough)."""
    stepping = [l for l in model.loops if l.is_step]
    if loop.is_step or any(loop in loop_ancestors(l) for l in stepping):
        return True
    callees = {model.callee(c) for c in loop.direct_calls} - {None}
    return any(l.function in callees for l in stepping)


