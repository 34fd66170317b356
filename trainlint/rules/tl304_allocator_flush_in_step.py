"""TL304 allocator-flush-in-step."""

from __future__ import annotations

from typing import Iterator

from trainlint.diagnostics import Severity
from trainlint.model import TrainingModel
from trainlint.rules.rule import Finding, Rule

FLUSHES = {"torch.cuda.empty_cache": "torch.cuda.empty_cache()", "torch.cuda.memory.empty_cache": "torch.cuda.empty_cache()", "gc.collect": "gc.collect()"}


class AllocatorFlushInStep(Rule):
    code = "TL304"
    name = "allocator-flush-in-step"
    severity = Severity.WARNING
    summary = "`torch.cuda.empty_cache()` or `gc.collect()` on every training step."
    hint = "Remove it from the step; if fragmentation is real, set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` or flush every N steps."
    requires = ("empty_cache", "gc.collect", "collect(")
    per_step = True
    why = (
        "`empty_cache()` returns cached blocks to the driver; the next step must `cudaMalloc` them again, "
        "which synchronises and is slow, and it \"doesn't increase the amount of GPU memory available for "
        "PyTorch\" (the docs). A full `gc.collect()` walks every Python object each step. Neither frees "
        "memory still referenced - the real cause of an OOM (a kept graph, a tensor on `self`)."
    )
    story = (
        "Field report 004 recommended running cleanup every 2 steps instead of 8 to fight an OOM caused by "
        "retained graphs. transformers #31372: per-step `empty_cache` slowed the Trainer (removed in #31530); "
        "peft #2894: dropping per-step `gc.collect()` took 250 steps from 108 s to 65 s at the same peak memory."
    )
    example = """\
import torch

for x in loader:
    loss = model(x)
    loss.backward()
    optimizer.step()
    torch.cuda.empty_cache()
"""
    fixed_example = """\
import torch

for x in loader:
    loss = model(x)
    loss.backward()
    optimizer.step()
"""
    not_flagged = "Flushes under a gate (`if step % 100 == 0`), at epoch level, in `except` handlers (an OOM handler), and outside training steps. Scheduled GC (`gc.disable()` plus a gated collect) is fine."
    verification = "`trainlint verify` times a step with and without the flush on CUDA; `trainlint verify run` counts the calls per step by line."
    valid = (
        """
import gc, torch
for step, x in enumerate(loader):
    try:
        model(x).backward()
        optimizer.step()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
    if step % 1000 == 0:
        gc.collect()
""",
    )
    invalid = (
        """
import gc
def train_step(batch):
    model(batch).backward()
    optimizer.step()
    gc.collect()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for call in model.calls:
            if call.qualname in FLUSHES and model.every_step(call.site):
                yield Finding(call.node, f"`{FLUSHES[call.qualname]}` on every training step slows each step and frees nothing still referenced")
