"""TL403 memory-stats-in-step."""

from __future__ import annotations

from typing import Iterator

from trainlint.diagnostics import Severity
from trainlint.model import TrainingModel
from trainlint.rules.rule import Finding, Rule

# each builds the whole of `memory_stats()` to return one of its entries (torch/cuda/memory.py)
COUNTERS = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_cached", "max_memory_cached")
MEMORY_STATS = frozenset(
    f"torch.cuda.{prefix}{name}"
    for prefix in ("", "memory.")
    for name in (
        "reset_peak_memory_stats",
        "reset_max_memory_allocated",
        "reset_max_memory_cached",
        "reset_accumulated_memory_stats",
        "memory_summary",
        "memory_stats",
        "memory_snapshot",
        *COUNTERS,
    )
)


class MemoryStatsInStep(Rule):
    code = "TL403"
    name = "memory-stats-in-step"
    severity = Severity.INFO
    summary = "CUDA memory statistics reset or collected on every training step."
    hint = "Reset or read memory statistics at epoch boundaries or under a debug/log flag."
    requires = ("memory_stats", "memory_summary", "memory_snapshot", "reset_peak", "reset_max", "reset_accumulated", "memory_allocated", "memory_reserved", "memory_cached")
    per_step = True
    why = (
        "`reset_peak_memory_stats()` every step makes the peak-memory figure describe one step only and "
        "hides the growth you are trying to see; `memory_summary()`, `memory_stats()` and "
        "`memory_snapshot()` walk the allocator's state under its lock and build large Python objects, "
        "and so do `max_memory_allocated()`, `memory_reserved()` and the other counters, each of which builds "
        "the whole of `memory_stats()` to return one entry of it. "
        "In a hot loop they are instrumentation overhead that belongs at epoch boundaries or behind a "
        "debug flag."
    )
    story = (
        "Field report 004: `torch.cuda.reset_peak_memory_stats()` was called per step in a trainer whose "
        "batches slowed 2-5x after the first; the fix moved it to epoch boundaries (`if epoch_boundary or DEBUG_MEMORY:`)."
    )
    example = """\
import torch

for batch in loader:
    torch.cuda.reset_peak_memory_stats()
    loss = model(batch).mean()
    loss.backward()
    optimizer.step()
"""
    fixed_example = """\
import torch

for epoch in range(epochs):
    torch.cuda.reset_peak_memory_stats()       # once per epoch
    for batch in loader:
        loss = model(batch).mean()
        loss.backward()
        optimizer.step()
    print(torch.cuda.max_memory_allocated())
"""
    not_flagged = "Calls at epoch level, under a gate (`if step % n == 0`, `if debug_memory:`), or outside training steps."
    verification = "`trainlint verify run` counts the calls per step by line (they run only with CUDA)."
    valid = (
        """
import torch
for epoch in range(3):
    torch.cuda.reset_peak_memory_stats()
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
""",
        """
import torch
for step, x in enumerate(loader):
    model(x).sum().backward()
    optimizer.step()
    if step % 100 == 0:
        logger.log(mem=torch.cuda.max_memory_allocated() / 2**30)
""",
    )
    invalid = (
        """
import torch
for x in loader:
    torch.cuda.reset_peak_memory_stats()
    model(x).sum().backward()
    optimizer.step()
""",
        """
import torch
for x in loader:
    model(x).sum().backward()
    optimizer.step()
    logger.log(mem=torch.cuda.max_memory_allocated() / 2**30)
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for call in model.calls:
            if call.qualname in MEMORY_STATS and model.every_step(call.site):
                fn = call.qualname.rsplit(".", 1)[-1]
                whole = " (which builds the whole of `memory_stats()`)" if fn in COUNTERS else ""
                yield Finding(call.node, f"`torch.cuda.{fn}()`{whole} runs on every training step")
