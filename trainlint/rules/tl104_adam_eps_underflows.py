"""TL104 adam-eps-underflows."""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import TrainingModel
from trainlint.model.precision import master_weights_kept, parameter_casts, reaches
from trainlint.rules.rule import Finding, Rule

ADAM_FAMILY = {"Adam": 1e-8, "AdamW": 1e-8, "NAdam": 1e-8, "RAdam": 1e-8, "Adamax": 1e-8, "SparseAdam": 1e-8}
FP16_SMALLEST_SUBNORMAL = 2.0**-24  # 5.96e-08


class AdamEpsUnderflows(Rule):
    code = "TL104"
    name = "adam-eps-underflows"
    severity = Severity.ERROR
    summary = "An Adam-family optimizer whose `eps` rounds to 0 in fp16 (below ~6e-8; the default 1e-8 included) over fp16 parameters."
    hint = "Keep parameters and optimizer state in fp32 (autocast for compute); if they must be fp16, use `eps=1e-4` or larger."
    requires = ("half", "float16", "Adam")  # a cast may live in an imported builder

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        # an Adam of `torch.optim`, and an fp16 cast here or in a project module (a builder)
        if "Adam" not in source or "optim" not in source:
            return False
        return any(word in source for word in ("float16", "half", "fp16")) or imports_project()
    why = (
        "fp16's smallest subnormal is 2^-24 ~ 5.96e-8, so `eps=1e-8` (Adam's default) is exactly 0 in fp16. "
        "For any element whose gradient is 0 (an unused embedding row, a dead unit) the second moment is 0 "
        "too, and the update `m / (sqrt(v) + eps)` is 0/0 = NaN - after one step the parameter is NaN, and "
        "NaN spreads to everything it touches."
    )
    story = "pytorch/pytorch #147437 (fp16 parameters: all NaN after the first `optimizer.step()`); glide-finetune #5 (fixed with eps 1e-4); pykoi #69 (\"float16 will round any number smaller than 6e-8 to 0\")."
    example = """\
import torch

model = Net().half()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
"""
    fixed_example = """\
import torch

model = Net()                       # fp32 parameters and Adam state
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
"""
    not_flagged = "bf16 parameters (bf16 has fp32's range: 1e-8 is representable), fp32 parameters, `eps` of 6e-8 or more, non-Adam optimizers, and an optimizer handed to apex's `FP16_Optimizer`, which steps fp32 master copies with fp32 state."
    verification = (
        "`trainlint verify` shows `torch.tensor(eps, dtype=torch.float16) == 0` and a zero-gradient element "
        "turning NaN after one step. `trainlint verify run` reports non-finite parameters after the steps."
    )
    valid = (
        """
import torch
model = Net().half()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-4)
""",
        """
import torch
model = Net().bfloat16()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
""",
    )
    invalid = (
        """
import torch
model = Net().half()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
""",
        """
import torch
model = Net().to(torch.float16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-8)
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        casts = [c for c in parameter_casts(model) if c.dtype == "float16" and c.targets]
        if not casts:
            return
        for opt in model.calls:
            qual = opt.qualname or ""
            name = qual.rsplit(".", 1)[-1]
            if not qual.startswith("torch.optim.") or name not in ADAM_FAMILY or master_weights_kept(model, opt):
                continue
            eps_expr = opt.kwarg("eps")
            if eps_expr is None:
                eps = ADAM_FAMILY[name]
            elif isinstance(eps_expr, (cst.Float, cst.Integer)):
                eps = float(eps_expr.value)
            else:
                continue
            if eps >= FP16_SMALLEST_SUBNORMAL:
                continue
            params = opt.arg(0, "params")
            if params is None:
                continue
            roots = model.roots_of(params, opt.site.function)
            if any(reaches(c, opt, roots) for c in casts):
                where = eps_expr if eps_expr is not None else opt.node
                yield Finding(where, f"`eps={eps:g}` is 0 in fp16 (smallest subnormal ~6e-8): a zero-gradient element computes 0/0 and turns NaN after one step", facts={"optimizer": name, "eps": eps, "dtype": "float16"})
