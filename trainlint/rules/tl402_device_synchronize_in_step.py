"""TL402 device-synchronize-in-step."""

from __future__ import annotations

from typing import Iterator

from trainlint.diagnostics import Severity
from trainlint.model import TrainingModel
from trainlint.model.torchnames import CUDA_SYNC_OBJECTS
from trainlint.rules.rule import Finding, Rule

SYNCHRONIZE = frozenset({"torch.cuda.synchronize", "torch.xpu.synchronize", "torch.mps.synchronize", "torch.cpu.synchronize", "torch.accelerator.synchronize"})


class DeviceSynchronizeInStep(Rule):
    code = "TL402"
    name = "device-synchronize-in-step"
    severity = Severity.WARNING
    summary = "`torch.cuda.synchronize()` (or a stream's or event's `.synchronize()`) on every training step."
    hint = "Remove it; to time steps use CUDA events (`start.record(); ...; end.record()`) read at log steps, or the profiler."
    requires = ("synchronize", "backward", "step(", "optim", "scaler")  # the call may live in an imported helper
    per_step = True
    why = (
        "A device synchronize stops the host until every queued kernel has finished, so the GPU drains "
        "and idles while the host prepares the next step. Per step it serialises host and device work: "
        "KPConv-PyTorch #22 measured ~25% slower training."
    )
    story = "Field report 004: frequent `torch.cuda.synchronize()` calls among the causes of batches 2-5x slower after the first."
    example = """\
import torch

for x in loader:
    loss = model(x)
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
"""
    fixed_example = """\
import torch

for step, x in enumerate(loader):
    loss = model(x)
    loss.backward()
    optimizer.step()
    if step % log_every == 0:
        torch.cuda.synchronize()   # only when timing a log interval
"""
    not_flagged = (
        "Synchronisation under a gate, at epoch level, in benchmarks outside training steps: a loop that runs "
        "forward and backward, reads a clock around `torch.cuda.synchronize()` and updates no weight in its "
        "module (a model zoo's `compute_time_train`) measures the passes and trains nothing, as does a sweep over "
        "settings written in the code (`for channels in [1, 16, 30]:`) through a gradient check. A helper the step "
        "hands its work to is part of the step: `elapsed, loss = timer(train_step)`, where `timer(fn)` calls "
        "`fn()` between two `torch.cuda.synchronize()` calls, synchronises twice per step, and each is flagged "
        "in `timer` with the chain from the step loop; a helper that calls what it is given only on log steps "
        "(`if step % interval == 0: fn()`) is not."
    )
    verification = "`trainlint verify` times a step with and without `torch.cuda.synchronize()` on CUDA; `trainlint verify run` counts the calls per step by line."
    valid = (
        """
import torch
for step, x in enumerate(loader):
    model(x).backward()
    optimizer.step()
    if step % 100 == 0:
        torch.cuda.synchronize()
""",
    )
    invalid = (
        # the function held by an attribute (a profiler picking its accelerator's synchronize)
        """
import torch
class Profiler:
    def __init__(self):
        self.event, self.sync = (torch.cuda.Event, torch.cuda.synchronize) if torch.cuda.is_available() else (None, None)
    def on_step_end(self):
        self.sync()
profiler = Profiler()
for x in loader:
    model(x).backward()
    optimizer.step()
    profiler.on_step_end()
""",
        """
from torch.cuda import synchronize
for x in loader:
    model(x).backward()
    optimizer.step()
    synchronize()
""",
        """
import torch
def train_step(batch):
    model(batch).backward()
    optimizer.step()
    torch.cuda.current_stream().synchronize()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for call in model.calls:
            if not model.every_step(call.site):
                continue
            if call.qualname in SYNCHRONIZE:
                yield Finding(call.node, f"`{call.qualname}()` on every training step stalls the host until the device drains")
            elif held := [n for n in model.called_names(call) if n in SYNCHRONIZE]:
                # `self._synchronize()` after `self._event, self._synchronize = torch.cuda.Event, torch.cuda.synchronize`
                text = model.module.code_for_node(call.node.func)
                yield Finding(call.node, f"`{text}()` is `{held[0]}` here: on every training step it stalls the host until the device drains")
            elif (summary := model.project_call_summary(call)) is not None and summary.synchronizes and model.project_target(call) is None:
                text = model.module.code_for_node(call.node.func)
                yield Finding(call.node, f"`{text}()` calls `{summary.synchronizes[0]}` ({summary.where}) on every training step, stalling the host until the device drains")
            elif call.method == "synchronize" and not call.node.args and call.qualname is None and call.receiver is not None:
                # a CUDA stream or event, known by its value: `torch.cuda.current_stream().synchronize()`
                if model.value(call.receiver, call.site).origin in CUDA_SYNC_OBJECTS:
                    receiver = model.module.code_for_node(call.receiver)
                    yield Finding(call.node, f"`{receiver}.synchronize()` on every training step stalls the host until the device drains")
