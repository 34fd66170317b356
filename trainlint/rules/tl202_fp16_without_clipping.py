"""TL202 fp16-without-clipping."""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.torchnames import (
    GRAD_SCALER,
    LIGHTNING_TRAINERS,
    autocast_dtype,
    is_clip_name,
    AUTOCAST,
    is_false,
    literal_string,
)
from trainlint.model.precision import factory_scaler, on_training_path, parameter_casts
from trainlint.rules.rule import Finding, Rule, shorten

FP16_PRECISIONS = frozenset({"16", "16-mixed", "16-true", "fp16"})

# apex's training step after its set-up (the examples' `setup` and `clip` lines)
_APEX_STEP = """
import torch
from apex import amp
{setup}
for x, y in loader:
    loss = criterion(model(x), y)
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
{clip}    optimizer.step()
    optimizer.zero_grad()
"""


def is_zero(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, (cst.Integer, cst.Float)) and float(expr.value) == 0.0


def _precision_text(precision: cst.BaseExpression | None) -> str | None:
    return literal_string(precision) or (precision.value if isinstance(precision, cst.Integer) else None)


def fp16_enabling(model: TrainingModel, call: Call) -> str | None:
    """What about this call turns on fp16 mixed precision, or None."""
    qual = call.qualname or ""
    if qual in GRAD_SCALER or qual.endswith("ShardedGradScaler"):
        if is_false(call.arg(4 if qual.startswith("torch.cuda") else 5, "enabled")):
            return None
        if model.value(call.node, call.site).enabled is False:
            return None
        return "a GradScaler (fp16 loss scaling)"
    scaler = factory_scaler(model, call)
    if scaler is not None and scaler.enabled is not False:
        # `model, optimizer, scaler = init_opt(cfg)`: a scaler built by a project function, maybe only
        # when a flag asks for one (`GradScaler() if use_amp else None`), as `GradScaler(enabled=use_amp)`
        return f"a GradScaler (fp16 loss scaling) from `{shorten(model.module.code_for_node(call.node.func), 30)}(...)`"
    if qual in AUTOCAST and autocast_dtype(call.node, qual, model.imports) == "float16":
        return "fp16 autocast"
    if qual == "apex.amp.initialize":  # NVIDIA apex's mixed precision: opt_level "O1" when not given, "O0" is fp32
        given = call.kwarg("opt_level")
        level = "O1" if given is None else literal_string(given)
        if level == "O0":
            return None
        return f"apex `amp.initialize` ({f'opt_level {level!r}' if level else 'its opt_level'}, fp16 with loss scaling)"
    if qual.endswith("accelerate.Accelerator") and literal_string(call.kwarg("mixed_precision")) == "fp16":
        return '`Accelerator(mixed_precision="fp16")`'
    return None


# keyword arguments that ask a framework, an optimizer (LAMB's `max_grad_norm`) or a loss-scaler
# helper (`loss_scaler(loss, opt, clip_grad=...)`) to clip
CLIP_KEYWORDS = ("gradient_clip_val", "max_grad_norm", "clip_grad", "clip_grad_norm", "grad_clip", "gradient_clipping", "clip_value", "max_norm")


def clips_gradients(model: TrainingModel) -> bool:
    """Whether the module clips gradients anywhere: manually, through a helper of this module or of the
    project, or through a framework or optimizer setting."""
    for call in model.calls:
        last = (call.qualname or call.method or call.name or "").rsplit(".", 1)[-1]
        if is_clip_name(last):
            return True
        for key in CLIP_KEYWORDS:
            clip = call.kwarg(key)
            if clip is not None and not is_zero(clip) and not (isinstance(clip, cst.Name) and clip.value in ("None", "False")):
                return True
        summary = model.call_summary(call)
        if summary is not None and summary.clips:
            return True
    return False


def unscales_for_others(model: TrainingModel) -> bool:
    """`scaler.unscale_(optimizer)` in a module that never reads a gradient itself: the gradients are
    unscaled for code elsewhere (callbacks or algorithms the trainer runs before its step, as
    Composer's `GradientClipping`), which may clip them. What that code does is unknown: no finding."""
    return not model.reads_grads and any(c.method == "unscale_" for c in model.calls)


def trains_here(model: TrainingModel, call: Call) -> bool:
    """Whether a call belongs to training code: a module with a step loop or step hooks, outside test
    code and framework internals (a precision plugin that owns no loop)."""
    if model.is_test_code or model.framework_internal(call.site):
        return False
    return any(loop.is_step for loop in model.loops) or bool(model.step_functions)


def superseded_before_backward(model: TrainingModel, call: Call) -> bool:
    """Whether `acc = Accelerator(...)` is replaced before any `acc.backward` in its function uses it.

    Test scripts build an fp16 Accelerator only to check wrapping, then train with another one.
    """
    assign = next((a for a in model.assigns if a.value is call.node and len(a.targets) == 1), None)
    if assign is None:
        return False
    name = assign.targets[0]
    uses = [
        c for c in model.calls
        if c.method == "backward" and c.receiver_text == name and c.site.function is call.site.function
    ]
    return bool(uses) and not any(assign in model.reaching(call.site.function, name, c.site) for c in uses)


class Fp16WithoutClipping(Rule):
    code = "TL202"
    name = "fp16-without-clipping"
    severity = Severity.WARNING
    summary = "fp16 mixed-precision training with no gradient clipping."
    hint = "After `scaler.unscale_(optimizer)`, clip: `torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)`."
    requires = ("GradScaler", "autocast", "mixed_precision", "precision", "scaler", "amp.initialize")

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        # a Lightning `Trainer(precision=...)`, or fp16 where this module backpropagates (itself, or
        # through a project helper)
        return ("Trainer" in source and "precision" in source) or "backward" in source or imports_project()
    why = (
        "fp16's largest finite value is 65504. A gradient norm of a few hundred squares past it in Adam's "
        "second moment, and an exploding step turns weights into inf/NaN. The GradScaler skips steps whose "
        "gradients overflow, but it cannot stop finite, huge updates; clipping the (unscaled) gradient norm "
        "bounds every update. Without it, fp16 runs diverge where fp32 runs merely wobble."
    )
    story = (
        "Field report 003: a CIFAR-10 CNN trained with DeepSpeed fp16 and no `gradient_clipping`: average "
        "gradient norm inf, loss 17-20, accuracy 10% (random). Field report 004: NaN gradients in a GRU "
        "under AMP with no clipping before `scaler.scale(loss).backward()`; the fix added clipping at 0.1."
    )
    example = """\
import torch

scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
    fixed_example = """\
import torch

scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(optimizer)
    scaler.update()
"""
    not_flagged = (
        "bf16 autocast (no loss scaling, fp32-like range), modules that clip anywhere "
        "(`clip_grad_norm_`, `clip_grad_value_`, `accelerator.clip_grad_norm_`, Lightning's "
        "`gradient_clip_val`), GradScalers built with `enabled=False`, modules that never backpropagate "
        "(a scaler handed to a trainer elsewhere), and modules that unscale the gradients "
        "(`scaler.unscale_(optimizer)`) without reading any themselves: they are unscaled for callbacks or "
        "algorithms elsewhere, which may clip them. A GradScaler a project function builds and returns "
        "(`model, optimizer, scaler = init_opt(cfg)`) enables fp16 where it is called and is reported there, also "
        "when the function may return None instead (`GradScaler() if use_amp else None`): as with "
        "`GradScaler(enabled=use_amp)`, the runs that ask for fp16 need the clipping. NVIDIA apex's "
        "`amp.initialize(model, optimizer, opt_level=...)` enables fp16 with loss scaling as a GradScaler "
        "does (opt_level O1 when not given, and O2, O3, or one the run chooses), except with `opt_level=\"O0\"` "
        "(fp32); clipping `amp.master_params(optimizer)` clips."
    )
    verification = (
        "`trainlint verify` reruns the flagged code's own set-up: its optimizer and literal lr (else SGD with "
        "momentum, lr 0.1, said to be assumed), with fp16 weights (`.half()`, `precision=\"16-true\"`) or fp32 "
        "weights under fp16 autocast with or without a GradScaler. fp16 weights get two finite gradient spikes "
        "(they turn non-finite unclipped); fp32 weights get one outlier batch, retried while the scaler skips it "
        "for inf/NaN (it skips nothing finite): confirmed when the weights turn non-finite, when it moves them "
        "5x further than clipped at 1.0 and the ordinary loss more than doubles (SGD), or when the next steps "
        "shrink below half their size while clipped ones do not (Adam keeps the spike in its second moment). "
        "`trainlint verify run` reports non-finite losses, gradient norms and parameters, and how often the "
        "GradScaler lowered its scale."
    )
    valid = (
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        """
import torch
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
        # apex's fp16 clipped through the master parameters it keeps
        _APEX_STEP.format(
            setup='model, optimizer = amp.initialize(model, optimizer, opt_level="O2")',
            clip="    torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)\n",
        ),
        # apex at opt_level O0: fp32
        _APEX_STEP.format(setup='model, optimizer = amp.initialize(model, optimizer, opt_level="O0")', clip=""),
        # the gradients are unscaled for the callbacks that run before the step; one of them may clip
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    callbacks.run_event("after_backward")
    scaler.step(optimizer)
    scaler.update()
""",
    )
    invalid = (
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
for batch in loader:
    loss = model(**batch).loss
    accelerator.backward(loss)
    optimizer.step()
""",
        """
import lightning as L
trainer = L.Trainer(precision="16-mixed", max_epochs=10)
trainer.fit(model, loader)
""",
        # apex's fp16 under a flag of the run, its opt_level from the command line
        _APEX_STEP.format(setup="if args.amp:\n    model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level)", clip=""),
        # unscaled only to log the gradient norm: nothing clips
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = sum(p.grad.norm() ** 2 for p in model.parameters() if p.grad is not None) ** 0.5
    scaler.step(optimizer)
    scaler.update()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        # what enables fp16 is cheap to find and rare; whether anything clips asks about every call
        enabling = [(what, call) for call in model.calls if (what := fp16_enabling(model, call))]
        lightning = next(
            ((call, text) for call in model.calls if (call.qualname or "") in LIGHTNING_TRAINERS
             if (text := _precision_text(call.kwarg("precision"))) in FP16_PRECISIONS),
            None,
        )
        if (not enabling and lightning is None) or clips_gradients(model) or unscales_for_others(model):
            return
        if lightning is not None:
            call, text = lightning
            setup = "fp16 weights" if text == "16-true" else "scaler"
            yield Finding(
                call.node, f"Lightning trains in fp16 (`precision={text!r}`) with no gradient clipping: one exploding step makes the weights inf/NaN",
                facts=_setup(model, setup),
            )
            return
        if not any(model.is_backward(c) or model.project_backprops(c) for c in model.calls):
            return
        candidates = []
        for what, call in enabling:
            if not trains_here(model, call) or superseded_before_backward(model, call):
                continue
            if what == "fp16 autocast" and not on_training_path(model, call):
                continue
            candidates.append((what, call))
        # point at the scaler (set-up) first, else the training step's autocast
        candidates.sort(key=lambda wc: (wc[0] == "fp16 autocast", wc[1].site.order))
        if candidates:
            what, call = candidates[0]
            scaled = any(w != "fp16 autocast" for w, _ in enabling)
            setup = "fp16 weights" if any(c.dtype == "float16" for c in parameter_casts(model)) else "scaler" if scaled else "autocast"
            yield Finding(
                call.node, f"{what} enables fp16 training, but gradients are never clipped: fp16 overflows at 65504 and one exploding step makes the weights inf/NaN",
                facts=_setup(model, setup),
            )


def _setup(model: TrainingModel, setup: str) -> dict[str, object]:
    """What the probe needs to rerun this code's own set-up: where the weights live ("fp16 weights", or
    fp32 weights under fp16 autocast with a GradScaler ("scaler") or without ("autocast")), and the
    module's first torch optimizer with its literal lr."""
    facts: dict[str, object] = {"setup": setup}
    for call in model.calls:
        qual = call.qualname or ""
        name = qual.rsplit(".", 1)[-1]
        if qual.startswith("torch.optim.") and not qual.startswith("torch.optim.lr_scheduler") and name[:1].isupper():
            facts["optimizer"] = name
            lr = call.kwarg("lr") or call.positional(1)
            if isinstance(lr, (cst.Float, cst.Integer)):
                facts["lr"] = float(lr.value)
            break
    return facts
