"""TL405 dataloader-not-pinned."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.names import dotted
from trainlint.model.torchnames import is_false, literal_string
from trainlint.rules.rule import Finding, Rule


class DataLoaderNotPinned(Rule):
    code = "TL405"
    name = "dataloader-not-pinned"
    severity = Severity.INFO
    default_enabled = False
    summary = "A DataLoader feeding a GPU training loop without `pin_memory=True` or with `num_workers=0`."
    hint = "`DataLoader(..., num_workers=4, pin_memory=True, persistent_workers=True)` and `.to(device, non_blocking=True)`."
    requires = ("DataLoader",)
    why = (
        "With `num_workers=0` (the default) loading and augmentation run in the training process, between "
        "steps, while the GPU waits. Without pinned memory each batch copy is a pageable, blocking transfer. "
        "The tuning guide recommends both; Gao et al. (ICSE'24) found 46% of low-GPU-utilisation issues "
        "in 400 jobs were data operations."
    )
    story = "Field report 004 lists `num_workers=2`, `persistent_workers=True`, `pin_memory=True` among its fixes."
    example = """\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=64, shuffle=True)
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    model(x).backward()
    optimizer.step()
"""
    fixed_example = """\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)
for x, y in loader:
    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
    model(x).backward()
    optimizer.step()
"""
    not_flagged = (
        "DataLoaders in modules that never use CUDA, loaders given both settings (any non-literal value counts as "
        "set), loaders built with a `**mapping` whose keys are not written in the function (what the callers pass "
        "is not known), and loaders only evaluation loops read. Off by default: tiny in-memory datasets do not need workers."
    )
    verification = "`trainlint verify run` measures the time each step waits in the DataLoader's `next()` and its share of the step (on CUDA)."
    valid = (
        """
from torch.utils.data import DataLoader
loader = DataLoader(ds, num_workers=args.workers, pin_memory=True)
x.cuda()
""",
        # the settings come through `**kwargs` from callers this module does not show
        """
from torch.utils.data import DataLoader
def make_loader(dataset, sampler, **kwargs):
    return DataLoader(dataset, sampler=sampler, **kwargs)
x.cuda()
""",
        # only the evaluation loop reads it
        """
import torch
from torch.utils.data import DataLoader
def train(model, optimizer, train_set, val_set):
    train_loader = DataLoader(train_set, num_workers=4, pin_memory=True)
    val_loader = DataLoader(val_set, batch_size=64)
    for x in train_loader:
        model(x.cuda()).backward()
        optimizer.step()
    with torch.no_grad():
        for x in val_loader:
            model(x.cuda())
""",
    )
    invalid = (
        """
from torch.utils.data import DataLoader
loader = DataLoader(ds, batch_size=32)
for x in loader:
    model(x.to("cuda")).backward()
    optimizer.step()
""",
        """
from torch.utils.data import DataLoader
settings = dict(batch_size=32, num_workers=4)
loader = DataLoader(ds, **settings)
for x in loader:
    model(x.to("cuda")).backward()
    optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        uses_cuda = any(c.method == "cuda" or (c.qualname or "").startswith("torch.cuda") for c in model.calls) or '"cuda"' in model.module.code or "'cuda'" in model.module.code
        if not uses_cuda:
            return
        for call in model.calls:
            if (call.qualname or "") not in ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"):
                continue
            passed = _unpacked_keywords(model, call)
            if passed is None:
                continue  # `DataLoader(ds, **kwargs)`: what the caller passes there is not known
            if _evaluation_only(model, call):
                continue
            pin = call.kwarg("pin_memory")
            workers = call.kwarg("num_workers")
            missing = []
            if (pin is None and "pin_memory" not in passed) or is_false(pin):
                missing.append("`pin_memory=True`")
            if workers is None and "num_workers" not in passed:
                missing.append("worker processes (`num_workers` left at its default, 0)")
            elif isinstance(workers, cst.Integer) and workers.value == "0":
                missing.append("worker processes (`num_workers=0`)")
            if missing:
                yield Finding(call.node, f"DataLoader feeding a GPU without {' and '.join(missing)}: batches load and copy synchronously between steps")


def _unpacked_keywords(model: TrainingModel, call: Call) -> set[str] | None:
    """The keywords a call's `**mapping` arguments pass, read from a dict written in this function
    (`**{"num_workers": 4}`, `kw = dict(pin_memory=True)` then `**kw`); None when one is not known."""
    out: set[str] = set()
    for arg in call.node.args:
        if arg.star == "*":
            return None
        if arg.star != "**":
            continue
        value = arg.value
        if isinstance(value, cst.Name):
            assigns = model.reaching(call.site.function, value.value, call.site)
            if len(assigns) != 1 or assigns[0].op is not None:
                return None
            value = assigns[0].value
        if isinstance(value, cst.Dict) and all(isinstance(e, cst.DictElement) for e in value.elements):
            keys = [literal_string(e.key) for e in value.elements]  # type: ignore[union-attr]
        elif isinstance(value, cst.Call) and dotted(value.func) == "dict" and all(a.keyword is not None for a in value.args):
            keys = [a.keyword.value for a in value.args]  # type: ignore[union-attr]
        else:
            return None
        if any(k is None for k in keys):
            return None
        out.update(k for k in keys if k is not None)
    return out


def _evaluation_only(model: TrainingModel, call: Call) -> bool:
    """A loader bound to a name that only loops that never train iterate (`val_loader`, read by the
    evaluation loop): it does not feed the training steps."""
    line = call.site.statement
    assign = next((s for s in line.body if isinstance(s, cst.Assign) and s.value is call.node), None) if line is not None else None
    if assign is None or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return False
    name = assign.targets[0].target.value
    reading = [loop for loop in model.loops if loop.function is call.site.function and _iterates(loop.node, name)]
    return bool(reading) and not any(loop.is_step or any(o.is_step for o in model.loops if o.parent is loop) for loop in reading)


def _iterates(node: cst.CSTNode, name: str) -> bool:
    """`for x in loader:` or `for i, x in enumerate(loader):`."""
    it = node.iter if isinstance(node, cst.For) else None
    while isinstance(it, cst.Call) and it.args and dotted(it.func) in ("enumerate", "tqdm", "tqdm.tqdm", "iter"):
        it = it.args[0].value
    return isinstance(it, cst.Name) and it.value == name
