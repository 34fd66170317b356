"""The run's evidence for the invariants "updates happen" and "learning happens", kept for
`recorder.Recorder`: for each optimizer step, per parameter group, whether the step changed the
parameters it holds and by how much (the update-to-weight ratio), whether they had gradients, the
learning rate, where the optimizer was built and where gradients were cleared; GradScaler steps
skipped for inf/NaN gradients; and the class count of the classification loss (for chance level).

The update is measured on a strided sample of at most SAMPLE elements per tensor, copied before the
step and compared after it, so the memory cost is a few KiB per tensor (far under one copy of the
trained parameters) and no value leaves the device until the report is built. Imports torch.
"""

from __future__ import annotations

import sys
import weakref
from collections import Counter
from types import FrameType
from typing import Any

import torch
import torch.nn.functional as F

from trainlint.verify.grad_norms import local
from trainlint.verify.live_objects import user_frames
from trainlint.verify.run_invariants import _site
from trainlint.verify.update_health import SETTLING_SKIPS

Report = dict[str, Any]
SAMPLE = 1024  # elements per tensor compared across each step
MAX_GROUPS = 32  # parameter groups followed (a per-parameter group set-up has hundreds)
CLASSIFICATION_LOSSES = {F.cross_entropy: "cross_entropy", F.nll_loss: "nll_loss"}


class _Group:
    """One parameter group's measurements, step by step (device tensors until the report)."""

    __slots__ = ("optimizer", "index", "params", "segments", "counts", "graded", "before", "ratios", "changed", "no_grad_steps", "lrs", "steps", "dtype", "first_no_grad")

    def __init__(self, optimizer: str, index: int, params: list[torch.Tensor]) -> None:
        self.optimizer, self.index, self.params = optimizer, index, params
        self.segments: torch.Tensor | None = None  # the tensor each sampled element belongs to
        self.counts: tuple[int, ...] = ()
        self.graded: torch.Tensor | None = None  # tensors with a gradient at this step
        self.before: torch.Tensor | None = None
        self.ratios: list[torch.Tensor] = []  # per step: ||delta|| / ||weight|| of each tensor's sample
        self.changed: list[torch.Tensor] = []  # per step: sampled elements the step changed
        self.no_grad_steps = 0
        self.first_no_grad: int | None = None
        self.lrs: list[float | None] = []
        self.steps = 0
        self.dtype = Counter(str(p.dtype).removeprefix("torch.") for p in params).most_common(1)[0][0] if params else "float32"


class UpdateWatch:
    """Per-step updates of every optimizer's parameter groups, and what explains a missing one."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.backwards = 0
        self.backwards_at_step = 0  # backward calls before the latest optimizer step
        self.last_clear: tuple[Report, int] | None = None  # the latest zero_grad: its site, backwards before it
        self.clear_between: dict[tuple[int, int], Report] = {}  # group -> zero_grad site that ran after backward
        self.built: dict[int, Report] = {}  # id(optimizer) -> where the script built it
        self.groups: dict[tuple[int, int], _Group] = {}
        self.refs: dict[int, weakref.ref[torch.optim.Optimizer]] = {}
        self.scaler = {"steps": 0, "skipped": 0, "skipped_after_settling": 0, "first_skipped": None, "site": None}
        self.skips: Counter[int] = Counter()  # id(optimizer) -> its steps a GradScaler skipped
        self.classes: Counter[int] = Counter()
        self.loss_functions: Counter[str] = Counter()

    # -- hooks -------------------------------------------------------------------------------
    def install(self) -> None:
        """Where optimizers are built, where gradients are cleared, which GradScaler steps skip."""
        guarded = self.recorder.guarded
        built = guarded(self._built)
        original_init = torch.optim.Optimizer.__init__

        def init(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
            original_init(optimizer, *args, **kwargs)
            built(optimizer, sys._getframe(1))

        torch.optim.Optimizer.__init__ = init  # type: ignore[method-assign]
        cleared = guarded(self._cleared)
        for owner in (torch.optim.Optimizer, torch.nn.Module):
            original = owner.zero_grad

            def zero_grad(obj: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                cleared(sys._getframe(1))
                return _original(obj, *args, **kwargs)

            zero_grad.__wrapped__ = original  # type: ignore[attr-defined]
            owner.zero_grad = zero_grad  # type: ignore[method-assign]
        scaler_step = torch.amp.GradScaler.step
        stepped = guarded(self._scaler_stepped)

        def step(scaler: Any, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            before = self.recorder.optimizer_steps[id(optimizer)]
            result = scaler_step(scaler, optimizer, *args, **kwargs)
            stepped(scaler, optimizer, before, sys._getframe(1))
            return result

        step.__wrapped__ = scaler_step  # type: ignore[attr-defined]
        torch.amp.GradScaler.step = step  # type: ignore[method-assign]

    def _built(self, optimizer: torch.optim.Optimizer, frame: FrameType | None) -> None:
        site = next(user_frames(frame), None)
        if site is not None and id(optimizer) not in self.built:
            self.built[id(optimizer)] = _site(site)

    def _cleared(self, frame: FrameType | None) -> None:
        site = next(user_frames(frame), None)
        if site is not None:
            self.last_clear = (_site(site), self.backwards)

    def _scaler_stepped(self, scaler: Any, optimizer: torch.optim.Optimizer, before: int, frame: FrameType | None) -> None:
        if not getattr(scaler, "_enabled", True):
            return
        self.scaler["steps"] += 1
        if self.recorder.optimizer_steps[id(optimizer)] != before:
            return
        # inf/NaN gradients: optimizer.step() skipped, and no step hook ran
        self.scaler["skipped"] += 1
        self.scaler["skipped_after_settling"] += self.scaler["steps"] > SETTLING_SKIPS
        self.scaler["first_skipped"] = self.scaler["first_skipped"] or self.scaler["steps"]
        self.skips[id(optimizer)] += 1
        site = next(user_frames(frame), None)
        if site is not None and self.scaler["site"] is None:
            self.scaler["site"] = _site(site)
        self.recorder.iteration_skipped(self.skipped_iterations())

    def skipped_iterations(self) -> int:
        """Iterations whose optimizer step a GradScaler skipped (of the optimizer that skipped most)."""
        return max(self.skips.values(), default=0)

    def backward(self) -> None:
        """The script called backward."""
        self.backwards += 1

    def loss_function(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A classification loss: its class count (dimension 1 of the input, or 0 for one sample)."""
        logits = args[0] if args else kwargs.get("input")
        if isinstance(logits, torch.Tensor) and logits.dim() >= 1:
            self.classes[int(logits.shape[1] if logits.dim() >= 2 else logits.shape[0])] += 1
            self.loss_functions[CLASSIFICATION_LOSSES[func]] += 1

    # -- each step -----------------------------------------------------------------------------
    def before_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Sample each group's parameters before the step, and note groups without gradients."""
        self.refs.setdefault(id(optimizer), weakref.ref(optimizer))
        ran_backward = self.backwards > self.backwards_at_step
        for index, group in enumerate(optimizer.param_groups):
            key = (id(optimizer), index)
            entry = self.groups.get(key)
            params = [p for p in group["params"] if p.numel()]
            if entry is None or len(entry.params) != len(params) or any(a is not b for a, b in zip(entry.params, params)):
                if entry is None and len(self.groups) >= MAX_GROUPS:
                    continue
                entry = self.groups[key] = _Group(type(optimizer).__name__, index, params)
            if not params:
                continue
            entry.steps += 1
            entry.lrs.append(_number(group.get("lr")))
            if all(p.grad is None for p in params):
                entry.no_grad_steps += 1
                entry.first_no_grad = entry.first_no_grad or entry.steps
                # a zero_grad after this step's backward: the gradients were cleared before the step
                if ran_backward and self.last_clear is not None and self.last_clear[1] == self.backwards:
                    self.clear_between.setdefault(key, self.last_clear[0])
            samples = [_sample(p) for p in params]
            counts = tuple(x.numel() for x in samples)  # a shard's local part under FSDP
            if counts != entry.counts:
                entry.counts = counts
                entry.segments = torch.repeat_interleave(torch.arange(len(params)), torch.tensor(counts)).to(samples[0].device)
            # frozen tensors (no gradient) in a group are not the step's to move: left out of the ratio
            entry.graded = torch.tensor([p.grad is not None for p in params], device=samples[0].device)
            entry.before = torch.cat([x.to(torch.float32, copy=True) for x in samples])

    def after_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Compare each group's sample with its copy from before the step."""
        for index in range(len(optimizer.param_groups)):
            entry = self.groups.get((id(optimizer), index))
            if entry is None or entry.before is None or entry.segments is None or entry.graded is None:
                continue
            after = torch.cat([_sample(p).to(torch.float32) for p in entry.params])
            delta = after - entry.before
            n = len(entry.params)
            moved = torch.zeros(n, device=after.device).index_add_(0, entry.segments, delta * delta).sqrt()
            size = torch.zeros(n, device=after.device).index_add_(0, entry.segments, entry.before * entry.before).sqrt()
            # a tensor at zero (a bias, a LoRA B matrix at its start) has no ratio: NaN, left out
            entry.ratios.append(torch.where((size > 0) & entry.graded, moved / size, torch.full_like(size, float("nan"))))
            entry.changed.append((delta != 0).sum())
            entry.before = None
        self.backwards_at_step = self.backwards

    # -- the report ----------------------------------------------------------------------------
    def report(self, name: Any) -> Report:
        """"updates" (per parameter group) and "learning" (the classification loss's classes)."""
        groups = []
        for (opt_id, _), entry in self.groups.items():
            if not entry.steps:
                continue
            ratios = torch.stack(entry.ratios).cpu() if entry.ratios else torch.empty(0, len(entry.params))
            per_step = [_median(row) for row in ratios]
            finite = ratios[torch.isfinite(ratios)]
            site = self.clear_between.get((opt_id, entry.index))
            groups.append({
                "optimizer": entry.optimizer, "group": entry.index, "built_at": self.built.get(opt_id),
                "tensors": len(entry.params), "elements": sum(p.numel() for p in entry.params), "dtype": entry.dtype,
                "names": [name(p) for p in entry.params[:3]], "steps": entry.steps,
                "lr_first": entry.lrs[0] if entry.lrs else None, "lr_last": entry.lrs[-1] if entry.lrs else None,
                "lr_max": max((v for v in entry.lrs if v is not None), default=None),
                "steps_without_gradients": entry.no_grad_steps, "first_step_without_gradients": entry.first_no_grad,
                "cleared_at": site,
                "steps_unchanged": sum(1 for c in entry.changed if int(c) == 0),
                "ratio_per_step": per_step,
                "ratio_median": float(finite.median()) if finite.numel() else None,
                "ratio_min": float(finite.min()) if finite.numel() else None,
                "ratio_max": float(finite.max()) if finite.numel() else None,
            })
        classes = self.classes.most_common(1)[0][0] if self.classes else None
        return {
            "updates": {"groups": groups, "scaler": dict(self.scaler), "sample_per_tensor": SAMPLE},
            "learning": {"classes": classes, "loss_function": self.loss_functions.most_common(1)[0][0] if self.loss_functions else None},
        }


def _sample(param: torch.Tensor) -> torch.Tensor:
    """At most SAMPLE elements spread over the tensor (a view when it is contiguous)."""
    flat = local(param.detach()).reshape(-1)
    return flat[:: max(1, flat.numel() // SAMPLE)][:SAMPLE]


def _number(value: Any) -> float | None:
    if isinstance(value, torch.Tensor):
        return float(value) if value.numel() == 1 and value.device.type == "cpu" else None
    return float(value) if isinstance(value, (int, float)) else None


def _median(row: torch.Tensor) -> float | None:
    finite = row[torch.isfinite(row)]
    return float(finite.median()) if finite.numel() else None
