"""TL103 scaler-with-bf16."""

from __future__ import annotations

from typing import Iterator

from trainlint.diagnostics import Severity
from trainlint.model import TrainingModel
from trainlint.model.precision import factory_scaler
from trainlint.model.torchnames import AUTOCAST, GRAD_SCALER, autocast_dtype, is_true
from trainlint.rules.rule import Finding, Rule, shorten


class ScalerWithBf16(Rule):
    code = "TL103"
    name = "scaler-with-bf16"
    severity = Severity.INFO
    summary = "A GradScaler in training whose autocast dtype is bfloat16, which needs no loss scaling."
    hint = "Drop the GradScaler with bf16 (`loss.backward(); optimizer.step()`), or build it with `enabled=(dtype == torch.float16)`."
    requires = ("GradScaler", "scaler")
    why = (
        "bfloat16 has float32's exponent range (down to ~1e-38), so gradients do not underflow and loss "
        "scaling buys nothing: stas00 on the HF PRs, bf16 \"has almost the same dynamic range as fp32, so no "
        "scaling is needed\". The scaler still costs a scale, an unscale and an inf/NaN check over all "
        "gradients per step, can silently skip steps, and with bf16 parameters raises "
        "`_amp_foreach_non_finite_check_and_unscale_cuda not implemented for 'BFloat16'`."
    )
    story = (
        "huggingface/accelerate #1036 and transformers #21428 made the scaler fp16-only; "
        "ecmwf/WeatherGenerator #874 found the GradScaler taking considerable time in a bf16 run."
    )
    example = """\
import torch

scaler = torch.amp.GradScaler("cuda")
for x in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
    fixed_example = """\
import torch

for x in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
    loss.backward()
    optimizer.step()
"""
    not_flagged = (
        "Scalers with `enabled=` an expression or False (nanoGPT's `enabled=(dtype == 'float16')`), and modules with any "
        "fp16 or unknown-dtype autocast (a dtype one of two by an option: `dtype16 = torch.float16` on one branch, `torch.bfloat16` on another). A scaler a project function builds and returns (`model, optimizer, scaler = "
        "init_opt(cfg)`) is reported at that call; one it may return as None (`GradScaler() if use_amp else None`) "
        "is like `enabled=use_amp`, the caller's choice, and is not."
    )
    verification = (
        "`trainlint verify` measures the fraction of the same gradients that underflow to 0 in bf16 and in "
        "fp16 without scaling: bf16 loses none, so the scaler has nothing to do."
    )
    valid = (
        """
import torch
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x)
scaler.scale(loss).backward()
""",
        """
import torch
scaler = torch.cuda.amp.GradScaler()
with torch.autocast("cuda", dtype=torch.float16):
    loss = model(x)
scaler.scale(loss).backward()
""",
        # the dtype is one of two, chosen by an option: fp16 needs the scaler
        """
import torch
if opt.fp16:
    dtype16 = torch.float16
elif opt.bf16:
    dtype16 = torch.bfloat16
scaler = torch.cuda.amp.GradScaler()
with torch.autocast("cuda", dtype=dtype16):
    loss = model(x)
scaler.scale(loss).backward()
""",
    )
    invalid = (
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for x in loader:
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = model(x)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        dtypes = [autocast_dtype(c.node, c.qualname, model.imports) for c in model.calls if c.qualname in AUTOCAST]
        if not dtypes or any(d != "bfloat16" for d in dtypes):
            return
        for call in model.calls:
            if call.qualname in GRAD_SCALER:
                enabled = call.kwarg("enabled")
                if enabled is None or is_true(enabled):
                    yield Finding(call.node, "GradScaler with bf16 autocast: bf16 has fp32's range, so loss scaling only adds a scale, unscale and inf check per step")
                continue
            # `model, optimizer, scaler = init_opt(cfg)`: the scaler a project function builds, always
            # (one it may return as None, `GradScaler() if use_amp else None`, is the caller's choice)
            scaler = factory_scaler(model, call)
            if scaler is not None and scaler.enabled is True:
                made = shorten(model.module.code_for_node(call.node.func), 30)
                yield Finding(call.node, f"GradScaler (from `{made}(...)`) with bf16 autocast: bf16 has fp32's range, so loss scaling only adds a scale, unscale and inf check per step")
