"""TL404 anomaly-detection-enabled."""

from __future__ import annotations

from typing import Iterator

from trainlint.diagnostics import Severity
from trainlint.model import TrainingModel
from trainlint.model.torchnames import LIGHTNING_TRAINERS, is_true
from trainlint.rules.rule import Finding, Rule


class AnomalyDetectionEnabled(Rule):
    code = "TL404"
    name = "anomaly-detection-enabled"
    severity = Severity.WARNING
    summary = "Autograd anomaly detection switched on in training code, not behind a debug flag."
    hint = "Enable it only while debugging: `torch.autograd.set_detect_anomaly(args.debug)`."
    requires = ("anomaly",)
    why = (
        "Anomaly mode records a traceback for every forward op and checks every backward output for NaN. "
        "The docs: \"This mode should be enabled only for debugging as the different tests will slow down "
        "your program execution\". Reported slowdowns: 1.5x-3x (Lightning #12344, #17359), ~50% "
        "(nerf-pytorch #42), \"thousands times slower\" (mbpo_pytorch #8)."
    )
    story = "Field report 004's trainer wrapped its training logic in `torch.autograd.set_detect_anomaly(...)` while chasing NaN gradients."
    example = """\
import torch

torch.autograd.set_detect_anomaly(True)
for x in loader:
    model(x).backward()
    optimizer.step()
"""
    fixed_example = """\
import torch

torch.autograd.set_detect_anomaly(args.debug_anomaly)
for x in loader:
    model(x).backward()
    optimizer.step()
"""
    not_flagged = "A non-literal switch (`set_detect_anomaly(args.debug)`), calls under a debug gate (`if args.debug:`), `set_detect_anomaly(False)`, modules that never backpropagate (a script that trains by calling a training loop of another project module, `trainer.train(n_epochs)` of the project's own `Trainer`, does), and test code (`tests/`, a `test_*.py` that defines a test: a `test_agent.py` that trains is no test module)."
    verification = "`trainlint verify run` checks `torch.is_anomaly_enabled()` at each optimizer step."
    valid = (
        """
import torch
if args.debug:
    torch.autograd.set_detect_anomaly(True)
torch.autograd.set_detect_anomaly(cfg.anomaly)
model(x).backward()
""",
    )
    invalid = (
        """
import torch
with torch.autograd.detect_anomaly():
    for x in loader:
        model(x).backward()
        optimizer.step()
""",
        """
from torch import autograd
autograd.set_detect_anomaly(True)
loss.backward()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        if model.is_test_code:  # a unit test that checks one step under anomaly detection on purpose
            return
        switches = [c for c in model.calls if (c.qualname or "") in ANOMALY_SWITCHES or (c.qualname or "") in LIGHTNING_TRAINERS]
        if not switches or not (model.has_training_step or any((c.qualname or "") in LIGHTNING_TRAINERS for c in switches) or _trains_elsewhere(model)):
            return
        for call in switches:
            if call.site.gate_depths and any(d >= 0 for d in call.site.gate_depths):
                continue
            qual = call.qualname or ""
            if qual == "torch.autograd.set_detect_anomaly" and is_true(call.arg(0, "mode")):
                yield Finding(call.node, "anomaly detection is on for the whole run: it records a traceback per op and checks every gradient, slowing training 1.5-3x or more")
            elif qual == "torch.autograd.detect_anomaly":
                yield Finding(call.node, "training under `detect_anomaly()` records a traceback per op and checks every gradient, slowing training 1.5-3x or more")
            elif qual in LIGHTNING_TRAINERS and is_true(call.kwarg("detect_anomaly")):
                yield Finding(call.node, "Lightning `detect_anomaly=True` slows training 1.5-3x; enable it only to debug")


ANOMALY_SWITCHES = frozenset({"torch.autograd.set_detect_anomaly", "torch.autograd.detect_anomaly"})


def _trains_elsewhere(model: TrainingModel) -> bool:
    """Whether the module trains through a function or method of another project module that runs a
    training loop (`trainer.train(n_epochs)` of the project's own `Trainer`): its switch holds there."""
    for call in model.calls:
        summary = model.project_call_summary(call) if call.qualname is None or not call.qualname.startswith("torch.") else None
        if summary is not None and summary.trains:
            return True
    return False
