"""The gradient norm a step's backward produced: measured where the script first touches the
gradients (a clip call, else the optimizer's step), before clipping, with any GradScaler's loss scale
taken out; and where and how the script clips. Imports torch; adds no host-device sync."""

from __future__ import annotations

import os
from collections import Counter
from types import FrameType
from typing import Any, Iterable

import torch

Report = dict[str, Any]


class GradNorms:
    """The true gradient norm per optimizer step, and the clip calls seen."""

    def __init__(self) -> None:
        self.squares: list[torch.Tensor] = []  # this step's, one per group of gradients measured
        self.measured: set[int] = set()  # ids of the parameters measured this step
        self.per_step: list[torch.Tensor | None] = []  # None: no gradient at that step
        self.device: torch.device | None = None
        self.scaler: Any = None  # the GradScaler whose scale the gradients carry, until unscale_()
        self.clips: dict[tuple[str, int, str], Counter[str]] = {}  # (path, line, kind) -> limits seen
        self.clip_limits: list[float | None] = []  # per step: the smallest max_norm applied, None if no clip
        self.step_limit: float | None = None

    def scaled_by(self, scaler: Any) -> None:
        """`scaler.scale(loss)` ran: the next gradients carry its scale until it unscales them."""
        if getattr(scaler, "_enabled", True) and isinstance(getattr(scaler, "_scale", None), torch.Tensor):
            self.scaler = scaler

    def unscaled(self) -> None:
        self.scaler = None

    def clip(self, kind: str, parameters: Any, limit: Any, frame: FrameType | None) -> Any:
        """A clip call at `frame` (the script's): measure the gradients before it changes them.

        Returns `parameters` again, as a list when the script passed a one-shot generator."""
        if isinstance(parameters, torch.Tensor):
            params: list[Any] = [parameters]
        else:
            params = list(parameters)
            parameters = params
        self.add(params)
        if frame is not None:
            key = (os.path.abspath(frame.f_code.co_filename), frame.f_lineno, kind)
            self.clips.setdefault(key, Counter())[repr(_number(limit))] += 1
        if kind == "norm" and isinstance(_number(limit), float):
            value = float(_number(limit))  # type: ignore[arg-type]
            self.step_limit = value if self.step_limit is None else min(self.step_limit, value)
        return parameters

    def add(self, params: Iterable[Any]) -> None:
        """Add the squared norms of the gradients of `params` not yet measured this step."""
        grads = []
        for param in params:
            grad = getattr(param, "grad", None)
            if grad is None or id(param) in self.measured:
                continue
            self.measured.add(id(param))
            grad = local(grad.detach())  # a shard's norm: the global one would need a collective of ours
            grads.append(grad.coalesce().values() if grad.is_sparse else grad)
        if not grads:
            return
        if self.device is None:
            self.device = grads[0].device
        # float64 gradients keep their precision; low-precision ones are summed in float32
        squares = [torch.linalg.vector_norm(g, dtype=_norm_dtype(g.dtype)).double().square().to(self.device) for g in grads]
        total = torch.stack(squares).sum()
        scale = getattr(self.scaler, "_scale", None)
        if isinstance(scale, torch.Tensor):
            total = total / scale.detach().double().to(self.device).square().reshape(())
        self.squares.append(total)

    def end_step(self) -> None:
        """The optimizer step is done: keep its norm, forget what was measured."""
        self.per_step.append(torch.stack(self.squares).sum().sqrt() if self.squares else None)
        self.clip_limits.append(self.step_limit)
        self.squares, self.measured, self.step_limit = [], set(), None

    def values(self) -> list[float | None]:
        return [None if t is None else float(t) for t in self.per_step]

    def clipping(self) -> Report | None:
        """Where the script clips, with the limit, and at how many steps the norm exceeded it."""
        if not self.clips:
            return None
        norms = self.values()
        over = [i + 1 for i, (n, limit) in enumerate(zip(norms, self.clip_limits)) if limit is not None and n is not None and n > limit]
        sites = [
            {"path": path, "line": line, "kind": kind, "limit": limits.most_common(1)[0][0], "count": sum(limits.values())}
            for (path, line, kind), limits in self.clips.items()
        ]
        return {"sites": sites, "steps_clipped": len(over), "first_clipped_step": over[0] if over else None}


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's shard of a sharded tensor (FSDP2's DTensor), the tensor itself otherwise: the
    instruments never start a collective of their own (one that another rank never joins would hang)."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _norm_dtype(dtype: torch.dtype) -> torch.dtype | None:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else None


def _number(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().cpu())
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value
