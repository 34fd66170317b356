"""TL508 sampler-epoch-not-set."""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from trainlint.diagnostics import Applicability, Severity
from trainlint.model import Assign, Call, Loop, TrainingModel
from trainlint.model.names import dotted
from trainlint.model.parameter_facts import EPOCHS, arguments, shuffled_loader
from trainlint.model.parameter_uses import (
    DISTRIBUTED_SAMPLERS, FRAMEWORK_METHODS, chosen_target, element_target, fed_by, loop_trains, names_in, runs_step_over, sampler_shuffle,
    sets_epoch_anywhere, single_target,
)
from trainlint.model.walk import iter_nodes
from trainlint.rules.rule import Finding, NodeEdit, NodeFix, Rule, shorten


# a helper returning two loaders, the training one fed by a shuffling sampler (the examples' `unpack`)
_TWO_LOADERS = """
from torch.utils.data import DataLoader, DistributedSampler, SequentialSampler

def get_loader(trainset, testset):
    train_loader = DataLoader(trainset, batch_size=32, sampler=DistributedSampler(trainset))
    test_loader = DataLoader(testset, batch_size=32, sampler=SequentialSampler(testset))
    return train_loader, test_loader

{unpack} = get_loader(trainset, testset)
for epoch in range(10):
    for x, y in train_loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
"""


def _loop_targets(loop: Loop) -> set[str]:
    node = loop.node
    return names_in(node.target) if isinstance(node, cst.For) else set()



class SamplerEpochNotSet(Rule):
    code = "TL508"
    name = "sampler-epoch-not-set"
    severity = Severity.WARNING
    summary = "A shuffling `DistributedSampler` feeds an epoch loop that never calls `sampler.set_epoch(epoch)`."
    hint = "Call `sampler.set_epoch(epoch)` at the start of every epoch, before iterating the loader."
    requires = ("Sampler", "import")  # (see `may_fire`)
    why = (
        "A `DistributedSampler` shuffles with a generator seeded by `seed + epoch`, and its epoch only changes "
        "when `set_epoch` is called. Without it every epoch draws the same permutation: each rank sees its "
        "shard in the same order every epoch, as if `shuffle=False` had been chosen once at random. The "
        "PyTorch docs (torch.utils.data.distributed.DistributedSampler): \"In distributed mode, calling the "
        "set_epoch() method at the beginning of each epoch before creating the DataLoader iterator is "
        "necessary to make shuffling work properly across multiple epochs. Otherwise, the same ordering will "
        "be always used.\" The sampler, the loader and the epochs are often in different functions: a "
        "`make_loader(dataset, shuffle)` helper that builds both (called with `shuffle=True`, or relying on "
        "the sampler's default `shuffle=True`), a `fit(model, loader, ...)` of another module that runs the "
        "epochs. The analysis follows the loader through them, in this module or another; for a sampler the "
        "caller cannot name, the fix is `train_loader.sampler.set_epoch(epoch)`."
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
        "dataset), or call a function of another project module that calls it on what it is given "
        "(`sampler_set_epoch(loader, epoch)`); `shuffle=False`, or a `shuffle=` the analysis cannot read as a "
        "literal (through a helper's parameter: a literal `True` passed, or the parameter's default `True`); samplers of classes "
        "without a `set_epoch` method (a custom sampler shuffles as it likes); a sampler re-created in the "
        "epoch loop with a `seed=` that reads the epoch loop's variables; loaders handed to a framework "
        "(`accelerator.prepare(...)`, `fabric.setup_dataloaders(...)`, a `fit(...)` or `train(...)` call), "
        "which iterates them and sets the epoch itself; loaders no epoch loop iterates again (one pass, "
        "evaluation loops that do not train, a function of another module that runs one epoch over it), and "
        "loaders given to a function of another module whose module calls `set_epoch` anywhere (it may set "
        "it through `loader.sampler`). A helper's loader returned in a tuple is followed through the name it is "
        "unpacked into (`train_loader, test_loader = get_loader(args)`), and one a class keeps on `self` in one method to the epochs its other methods run over it (`self._train_loader = DataLoader(...)` in `_init_state`); one fed through `batch_sampler=`, or "
        "returned on several paths, is not followed."
    )
    evidence = (
        "44 of 44 reviewed findings right in eighteen public repositories of the real-code set "
        "(`benchmarks/realworld/labels/`; it left preview on 27 of them in twelve): BERT-style fine-tuning "
        "scripts (about 17 of them copies of one `run_classifier` template, whose sampler is chosen in a "
        "one-line conditional, `RandomSampler(d) if args.local_rank == -1 else DistributedSampler(d)`), "
        "DeepSpeed examples, code-model training, a distributed-training guide, a flow vocoder (waveglow, "
        "found on a sealed split), a ViT fine-tuning script and a MobileNetV3 trainer whose helpers return their "
        "loaders in a tuple; FixRes' trainer, which keeps its loader on `self`, is found too. It misses 13 in the whole "
        "set: samplers built inside generators, helpers of other modules and trainer classes it does not follow."
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
        # a helper returns two loaders; the epochs iterate the one whose sampler does not shuffle
        _TWO_LOADERS.format(unpack="eval_loader, train_loader"),
        # a helper's `shuffle` parameter given False: the order is meant to stay
        """
from torch.utils.data import DataLoader, DistributedSampler

def make_loader(dataset, shuffle):
    return DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset, shuffle=shuffle))

loader = make_loader(dataset, shuffle=False)
for epoch in range(10):
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
        # chosen in a conditional expression, its epoch set where the run is distributed
        """
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler
train_sampler = RandomSampler(dataset) if args.local_rank == -1 else DistributedSampler(dataset)
train_loader = DataLoader(dataset, sampler=train_sampler, batch_size=32)
for epoch in range(int(args.num_train_epochs)):
    if args.local_rank != -1:
        train_sampler.set_epoch(epoch)
    for batch in train_loader:
        model(**batch)[0].backward()
        optimizer.step()
""",
        # the distributed branch does not shuffle
        """
from torch.utils.data import DataLoader, DistributedSampler, SequentialSampler
sampler = SequentialSampler(dataset) if args.local_rank == -1 else DistributedSampler(dataset, shuffle=False)
loader = DataLoader(dataset, sampler=sampler)
for epoch in range(10):
    for batch in loader:
        model(**batch)[0].backward()
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
        # chosen in a conditional expression: the distributed run shuffles the same way every epoch
        """
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler
train_sampler = RandomSampler(dataset) if args.local_rank == -1 else DistributedSampler(dataset)
train_loader = DataLoader(dataset, sampler=train_sampler, batch_size=32)
for _ in range(int(args.num_train_epochs)):
    for batch in train_loader:
        model(**batch)[0].backward()
        optimizer.step()
""",
        # a helper builds the loader and its sampler; `shuffle` through its parameter (default True)
        """
import torch
from torch.utils.data import DataLoader, DistributedSampler

def make_loader(dataset, shuffle=True):
    sampler = DistributedSampler(dataset, shuffle=shuffle)
    return DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=4)

train_loader = make_loader(train_set)
val_loader = make_loader(val_set, shuffle=False)
for epoch in range(10):
    for x, y in train_loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
""",
        # a helper returns the training loader first in a tuple, unpacked by the caller
        _TWO_LOADERS.format(unpack="train_loader, test_loader"),
        # the sampler built where the loader is built: the fix reaches it as `train_loader.sampler`
        """
from torch.utils.data import DataLoader, DistributedSampler
train_loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
for epoch in range(10):
    for x in train_loader:
        model(x).sum().backward()
        optimizer.step()
""",
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

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        # the sampler, or the epochs, may be in a function of another project module
        return "Sampler" in source or imports_project()

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        if sets_epoch_anywhere(model):
            return
        for call in model.calls:
            if sampler_shuffle(model, call) is not True:
                continue
            holder = chosen_target(model, call)
            sampler_names = {holder.targets[0]} if holder is not None else set()
            loaders = [c for c in model.calls if fed_by(model, c, call, sampler_names)]
            for loader in loaders:
                epoch = self._epoch_loop(model, loader, call)
                if epoch is None:
                    continue
                yield Finding(call.node, _message("this sampler shuffles every epoch with the same seed", model, epoch), fix=self._fix(model, holder, loader, epoch, call))
                break
        # a loader that a function (of this module or another) builds and feeds a shuffling sampler
        for call in model.calls:
            callee = model.callee(call)
            summary = model.summarizer.function(callee) if callee is not None else model.project_call_summary(call)
            element = shuffled_loader(summary, call.node)
            if element is None:
                continue
            epoch = self._epoch_loop(model, call, call, element)
            if epoch is not None:
                where = f" ({summary.where})" if summary is not None and summary.where else ""
                which = "" if element < 0 else f" as its {_ORDINALS[element]} value" if element < len(_ORDINALS) else f" as value {element + 1}"
                first = f"the loader `{shorten(model.module.code_for_node(call.node), 40)}` returns{which} is fed by a `DistributedSampler` that shuffles{where}"
                yield Finding(call.node, _message(first, model, epoch), fix=self._fix(model, None, call, epoch, call))

    def _epoch_loop(self, model: TrainingModel, loader: Call, sampler: Call, element: int = -1) -> Loop | Call | None:
        """The loop that iterates the loader again every time round: around a training loop over it (one
        that holds a step), or around a call of a function of this module that runs one; or a call that
        gives the loader to a function that runs the epochs itself (its summary's `epochs` fact, in this
        module or another). None when the loader goes to a framework. `element`: the loader is that
        element of the tuple the call returns, followed through the name it is unpacked into."""
        fn = loader.site.function
        holder = single_target(model, loader) if element < 0 else element_target(model, loader, element)
        if holder is None and element >= 0:
            return None
        inline = holder is None
        name = holder.targets[0] if holder is not None else None
        if name is not None and any(
            c.method in FRAMEWORK_METHODS and any(name in names_in(a.value) for a in c.node.args) for c in model.calls
        ):
            return None
        # a loader kept on `self` (`self._train_loader = DataLoader(...)` in `_init_state`) is iterated by the class's other methods
        kept = name is not None and name.startswith("self.") and fn is not None and fn.class_name is not None
        for loop in model.loops:
            if not (loop.function is fn or kept and loop.function is not None and loop.function.class_name == fn.class_name):  # type: ignore[union-attr]
                continue
            if not loop_trains(model, loop) or loop.parent is None or not isinstance(loop.node, cst.For):
                continue
            iterates = (loop.node.iter is loader.node or any(n is loader.node for n in iter_nodes(loop.node.iter))) if inline else (
                name in model.roots_of(loop.node.iter, loop.function)
            )
            if iterates:
                epoch = self._outer(loop, sampler)
                if epoch is not None:
                    return epoch
        if name is None:
            return None
        for call in model.calls:
            if call.site.function is not fn:
                continue
            callee = model.callee(call)
            if call.site.loops and callee is not None and runs_step_over(model, callee, call, name):
                epoch = self._outer_of_call(call, sampler)
                if epoch is not None:
                    return epoch
            summary = model.summarizer.function(callee) if callee is not None else model.project_call_summary(call)
            if call.site.order > loader.site.order and any(dotted(a) == name for a in arguments(summary, EPOCHS, call.node)):
                return call
        return None

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
        return seed is None or not (names_in(seed) & (_loop_targets(loop) | {"epoch", "self.epoch"}))

    @staticmethod
    def _fix(model: TrainingModel, holder: Assign | None, loader: Call, epoch: Loop | Call, sampler: Call) -> NodeFix | None:
        """Insert `sampler.set_epoch(epoch)` at the top of the epoch loop, for a named sampler built before it,
        or `loader.sampler.set_epoch(epoch)` for a named loader whose sampler it is given (`sampler=`)."""
        if isinstance(epoch, Call):
            return None  # (the epochs run in another function: the call goes there)
        node = epoch.node
        if epoch in sampler.site.loops or not isinstance(node, cst.For) or not isinstance(node.target, cst.Name):
            return None
        if not isinstance(node.body, cst.IndentedBlock) or not node.body.body:
            return None
        if holder is not None:
            if holder.value is not sampler.node:
                return None  # (chosen in an expression: the other branch's sampler may have no `set_epoch`)
            name = holder.targets[0]
        else:
            loader_holder = single_target(model, loader)
            if loader_holder is None or epoch in loader.site.loops or (loader is not sampler and loader.kwarg("sampler") is not sampler.node):
                return None
            holder, name = loader_holder, f"{loader_holder.targets[0]}.sampler"
        if "." in holder.targets[0]:
            return None
        if len(model.bindings(holder.site.function, holder.targets[0])) > 1:
            return None  # `sampler = None` / a RandomSampler on another branch: an unguarded call would fail there
        call = f"{name}.set_epoch({node.target.value})"
        return NodeFix(f"call `{call}` at the start of each epoch", (NodeEdit(node.body.body[0], call, "line_before"),), Applicability.UNSAFE)


_ORDINALS = ("first", "second", "third", "fourth")


def _message(first: str, model: TrainingModel, epoch: Loop | Call) -> str:
    """The finding's sentence: what shuffles, and where the epochs run without `set_epoch`."""
    if isinstance(epoch, Call):
        callee = shorten(model.module.code_for_node(epoch.node.func), 40)
        summary = model.project_call_summary(epoch)
        where = f" ({summary.where})" if summary is not None and summary.where else ""
        return (f"{first}: `{callee}(...)`{where} runs the epochs over its loader and nothing calls `set_epoch(epoch)`, "
                "so each rank sees its shard in the same order every epoch")
    return f"{first}: nothing calls `set_epoch(epoch)`, so each rank sees its shard in the same order every epoch"
