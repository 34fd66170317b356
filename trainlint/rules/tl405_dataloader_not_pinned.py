"""TL405 dataloader-not-pinned."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import TrainingModel
from trainlint.model.torchnames import is_false
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
    not_flagged = "DataLoaders in modules that never use CUDA, and loaders given both settings (any non-literal value counts as set). Off by default: tiny in-memory datasets do not need workers."
    verification = "`trainlint verify run` measures the time each step waits in the DataLoader's `next()` and its share of the step (on CUDA)."
    valid = (
        """
from torch.utils.data import DataLoader
loader = DataLoader(ds, num_workers=args.workers, pin_memory=True)
x.cuda()
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
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        uses_cuda = any(c.method == "cuda" or (c.qualname or "").startswith("torch.cuda") for c in model.calls) or '"cuda"' in model.module.code or "'cuda'" in model.module.code
        if not uses_cuda:
            return
        for call in model.calls:
            if (call.qualname or "") not in ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"):
                continue
            pin = call.kwarg("pin_memory")
            workers = call.kwarg("num_workers")
            missing = []
            if pin is None or is_false(pin):
                missing.append("`pin_memory=True`")
            if workers is None or (isinstance(workers, cst.Integer) and workers.value == "0"):
                missing.append("worker processes (`num_workers` is 0)")
            if missing:
                yield Finding(call.node, f"DataLoader feeding a GPU without {' and '.join(missing)}: batches load and copy synchronously between steps")
