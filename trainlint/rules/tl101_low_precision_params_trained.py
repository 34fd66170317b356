"""TL101 low-precision-params-trained."""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.gates import isinstance_tests
from trainlint.model.names import dotted
from trainlint.model.precision import Cast, dotted_root, master_weights_kept, parameter_casts, reaches
from trainlint.model.torchnames import LOW_PRECISION_STRINGS, is_false
from trainlint.model.lattice import Kind
from trainlint.rules.rule import Finding, Rule

# Optimizers that keep no fp32 master copy of the parameters they update.
PLAIN_OPTIMIZER_PREFIX = "torch.optim."
HALF_SPACING = {"bfloat16": "2^-8 = 0.0039", "float16": "2^-11 = 0.00049"}
HF_TRAINERS = frozenset({"transformers.Trainer", "transformers.Seq2SeqTrainer", "trl.SFTTrainer", "trl.Trainer"})


def _frozen(model: TrainingModel, targets: frozenset[str]) -> bool:
    """`base.requires_grad_(False)` or `for p in base.parameters(): p.requires_grad = False`."""
    for call in model.calls:
        if call.method == "requires_grad_" and is_false(call.arg(0, "requires_grad")):
            if call.receiver is not None and (dotted_root(call.receiver) in targets or dotted(call.receiver) in targets):
                return True
    for a in model.assigns:
        if any(t.endswith(".requires_grad") for t in a.targets) and is_false(a.value):
            for loop in a.site.loops:
                if isinstance(loop.node, cst.For) and model.roots_of(loop.node.iter, a.site.function) & targets:
                    return True
    return False


def _builds_optimizer(model: TrainingModel, call: Call) -> bool:
    """`model.configure_optimizers(...)` (nanoGPT/minGPT): a method that returns a torch optimizer."""
    if call.method is None or call.receiver is None:
        return False
    value = model.value(call.node, call.site)
    return value.kind is Kind.OPTIMIZER and (value.origin or "").startswith(PLAIN_OPTIMIZER_PREFIX)


class LowPrecisionParamsTrained(Rule):
    code = "TL101"
    name = "low-precision-params-trained"
    severity = Severity.ERROR
    summary = "A model cast to bf16/fp16 is trained by an optimizer that keeps no fp32 master copy."
    hint = "Keep the parameters in fp32 and run the forward pass under `torch.autocast(device_type, dtype=torch.bfloat16)`."
    requires = ("bfloat16", "float16", "half", "torch_dtype", "optim")  # a cast may live in an imported builder

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        # a cast names its dtype (`torch.bfloat16`, `.half()`, "bf16"), a torch optimizer comes from
        # `torch.optim` and a trainer is an HF `*Trainer`; either may come from a project module
        casts = any(word in source for word in LOW_PRECISION_STRINGS)
        optimizes = "optim" in source or "Trainer" in source
        return (casts and optimizes) or imports_project()
    why = (
        "bf16 keeps 8 bits of mantissa: the spacing between representable numbers at 1.0 is 2^-7 = 0.0078 "
        "(2^-8 just below 1.0). An optimizer that updates bf16 parameters in place rounds each new value "
        "to the nearest bf16, so any update smaller than about 0.002-0.004 at 1.0 is lost. AdamW's updates "
        "are about the learning rate (1e-5 to 1e-3): norm weights initialised at 1.0 never move, and weight "
        "decay (lr x wd ~ 1e-5) is lost everywhere. fp16 has 2^-10 spacing at 1.0, and its gradients and "
        "Adam states also underflow. `torch.autocast` computes in bf16 while the parameters and the "
        "optimizer state stay fp32 - that is the mixed-precision recipe the PyTorch docs give: \"You should "
        "not call half() or bfloat16() on your model(s) or inputs when using autocasting.\""
    )
    story = (
        "Field report 002: `model = model.to(dtype=torch.bfloat16)` in train.py, then AdamW at lr 3e-4. "
        "After 754 steps the loss had not decreased; all 49 RMSNorm weights were still exactly 1.0 while "
        "94% of the other parameters had moved. The fix removed the cast and kept bf16 in autocast."
    )
    example = """\
import torch

model = GPT(config).to(device)
model = model.to(dtype=torch.bfloat16)        # parameters now bf16
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
"""
    fixed_example = """\
import torch

model = GPT(config).to(device)                 # parameters stay fp32
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
"""
    not_flagged = (
        "Inference-only code (no optimizer over the cast model); a frozen low-precision base "
        "(`requires_grad_(False)`, PEFT/LoRA adapters) whose trainable adapters are fp32; optimizers that "
        "handle low-precision weights (anything outside `torch.optim`: optimi, torchao's bf16 stochastic "
        "rounding AdamW, DeepSpeed engines with fp32 master weights, a `torch.optim` optimizer handed to apex's "
        "`FP16_Optimizer(optimizer, ...)`, which steps fp32 master copies); a cast of a different module than the "
        "one optimized (a bf16 teacher with an fp32 student). The fast-CIFAR recipe (a network cast to fp16 "
        "with its BatchNorm layers set back to fp32) keeps the norm gains moving, and the finding says so: "
        "only its fp16 convolutions and linear layers lose small updates. A layer that a model class builds "
        "cast (`self.embed = nn.Embedding(v, d).bfloat16()` in `__init__`) is followed to the instances of the "
        "class in the same module: it is flagged when an optimizer takes that layer's parameters "
        "(`model.embed.weight`) or all of the model's (`model.parameters()`), not when it takes other layers "
        "only (`model.blocks.parameters()`), when the module sets the layer back to fp32 or freezes it, or when "
        "the cast value is a tensor (a bf16 buffer) rather than a torch layer."
    )
    verification = (
        "`trainlint verify` predicts from the dtype's spacing (`torch.nextafter`) which fraction of parameter "
        "elements can never move under this optimizer and learning rate, then measures it with a short run, "
        "against fp32 master weights for contrast (AdamW lr=3e-4 on bf16 ones: 100% frozen; fp32: 0%). "
        "`trainlint verify run` lists the script's parameter tensors whose elements stayed unchanged although "
        "their gradients were non-zero."
    )
    valid = (
        """
import torch
model = GPT(config).to(torch.bfloat16)
model.eval()
with torch.no_grad():
    out = model(x)
""",
        """
import torch
from transformers import AutoModelForCausalLM
base = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.bfloat16)
base.requires_grad_(False)
adapters = torch.nn.ModuleList([LoRA(768) for _ in range(12)])
optimizer = torch.optim.AdamW(adapters.parameters(), lr=1e-4)
""",
        """
import torch
model = GPT(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x)
""",
        # a layer built in bf16 by the class, but the optimizer trains the blocks only
        """
import torch
import torch.nn as nn
class GPT(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim).bfloat16()
        self.blocks = nn.ModuleList([nn.Linear(dim, dim) for _ in range(4)])
        self.rotary = torch.randn(64, dim).bfloat16()
model = GPT(50304, 768).cuda()
optimizer = torch.optim.AdamW(model.blocks.parameters(), lr=3e-4)
""",
        # the bf16 layer is set back to fp32 before training
        """
import torch
import torch.nn as nn
class GPT(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim).bfloat16()
model = GPT(50304, 768)
model.embed.float()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
""",
    )
    invalid = (
        # modded-nanogpt: a layer its class builds in bf16, trained by Adam through the instance
        """
import torch
import torch.nn as nn
class GPT(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim).bfloat16()
        self.blocks = nn.ModuleList([nn.Linear(dim, dim) for _ in range(4)])
model = GPT(50304, 768).cuda()
optimizer1 = torch.optim.AdamW([dict(params=[model.embed.weight], lr=0.3)], betas=(0.8, 0.95))
""",
        # the fast-CIFAR recipe: BatchNorm back in fp32, the convolution weights still fp16
        """
import torch
import torch.nn as nn
net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)).half()
for m in net.modules():
    if isinstance(m, nn.BatchNorm2d):
        m.float()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
""",
        """
import torch
model = GPT(config)
model = model.to(dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
""",
        """
import torch as T
def build(cfg):
    net = Net(cfg)
    net.half()
    return net

net = build(cfg)
opt = T.optim.Adam([{"params": net.parameters(), "lr": 1e-3}])
""",
        """
import torch
from torch import bfloat16
torch.set_default_dtype(bfloat16)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        if model.imports.imports_module("peft"):
            return
        casts = parameter_casts(model)
        if not casts:  # rare; finding a built optimizer asks for the value of every method call
            return
        optimizers = [c for c in model.calls if (self._is_plain_optimizer(c) or _builds_optimizer(model, c)) and not master_weights_kept(model, c)]
        if not optimizers:
            return
        default_cast = next((c for c in casts if not c.targets and c.function is None), None)
        for cast in casts:
            if cast is default_cast or not cast.targets or _frozen(model, cast.targets):
                continue
            for opt in optimizers:
                params = self._params(opt)
                if params is None:
                    continue
                roots = model.roots_of(params, opt.site.function)
                if reaches(cast, opt, roots):
                    yield self._finding(model, cast, opt)
                    break
        if default_cast is not None:
            later = [o for o in optimizers if o.site.order > default_cast.call.site.order]
            if later:
                yield self._finding(model, default_cast, later[0])

    def _finding(self, model: TrainingModel, cast: Cast, opt: Call) -> Finding:
        optimizer = (opt.qualname or opt.name or "optimizer").rsplit(".", 1)[-1]
        line = model.module.code_for_node(opt.node).split("(")[0]
        lr = opt.kwarg("lr")
        facts: dict[str, object] = {"dtype": cast.dtype, "optimizer": optimizer}
        if isinstance(lr, (cst.Float, cst.Integer)):
            facts["lr"] = float(lr.value)
        elif lr is not None:
            facts.update(_lr_source(model, lr))
        for key in ("weight_decay", "eps"):
            value = opt.kwarg(key)
            if isinstance(value, (cst.Float, cst.Integer)):
                facts[key] = float(value.value)
        what = "the default dtype is set to" if not cast.targets else f"`{sorted(cast.targets)[0]}` is cast to"
        if cast.targets and _norms_kept_in_fp32(model):
            # the fast-CIFAR recipe: BatchNorm back in fp32, the convolutions and linear layers not
            facts["norms_fp32"] = True
            return Finding(
                cast.call.node,
                f"{what} {cast.dtype} (its norm layers kept in float32) and trained by `{line}`, which keeps no fp32 "
                f"master copy of the other weights: updates smaller than half the {cast.dtype} spacing of a weight "
                f"({HALF_SPACING[cast.dtype]} at 1.0) round away in the convolutions and linear layers",
                facts=facts,
            )
        return Finding(
            cast.call.node,
            f"{what} {cast.dtype} and trained by `{line}`, which keeps no fp32 master copy: "
            f"updates smaller than half the {cast.dtype} spacing at 1.0 ({HALF_SPACING[cast.dtype]}) round away, "
            "so weights near 1.0 (norm gains) never move",
            facts=facts,
        )

    @staticmethod
    def _is_plain_optimizer(call: Call) -> bool:
        qual = call.qualname or ""
        if qual in HF_TRAINERS:
            return call.kwarg("peft_config") is None
        if not qual.startswith(PLAIN_OPTIMIZER_PREFIX) or qual.startswith("torch.optim.lr_scheduler"):
            return False
        return qual.rsplit(".", 1)[-1][:1].isupper()

    @staticmethod
    def _params(opt: Call) -> cst.BaseExpression | None:
        if (opt.qualname or "") in HF_TRAINERS:
            return opt.arg(0, "model")
        if not (opt.qualname or "").startswith(PLAIN_OPTIMIZER_PREFIX) and opt.receiver is not None:
            return opt.receiver  # `model.configure_optimizers(...)` optimizes the model's parameters
        return opt.arg(0, "params")


NORM_LAYERS = frozenset({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LayerNorm", "GroupNorm", "_BatchNorm"})


def _norms_kept_in_fp32(model: TrainingModel) -> bool:
    """Norm layers set back to float32 after a half cast (`if isinstance(m, nn.BatchNorm2d): m.float()`),
    or left out of it (`if not isinstance(m, nn.BatchNorm2d): m.half()`), in a module's loop over its
    layers."""
    for call in model.calls:
        if call.method not in ("float", "half") or not call.site.loops:
            continue
        for _, names, negated in isinstance_tests(call.site.gate_nodes):
            resolved = [model.imports.resolve(n) or "" for n in names]
            norms = any(q.startswith("torch.nn") and q.rsplit(".", 1)[-1] in NORM_LAYERS for q in resolved)
            if norms and negated == (call.method == "half"):
                return True
    return False


def _lr_source(model: TrainingModel, lr: cst.BaseExpression) -> dict[str, object]:
    """Where a learning rate that is not a literal comes from: its expression, and for `args.lr`-style
    values the command-line option that sets it and that option's default (the probe's assumptions)."""
    expression = model.module.code_for_node(lr)
    facts: dict[str, object] = {"lr_expression": expression}
    name = expression.rsplit(".", 1)[-1].replace("-", "_")
    for call in model.calls:
        if call.method != "add_argument":
            continue
        flags = [a.value for a in call.node.args if a.keyword is None and isinstance(a.value, cst.SimpleString)]
        options = [str(f.evaluated_value) for f in flags if isinstance(f.evaluated_value, str)]
        dest = call.kwarg("dest")
        named = isinstance(dest, cst.SimpleString) and dest.evaluated_value == name
        if not named and not any(o.lstrip("-").replace("-", "_") == name for o in options):
            continue
        facts["lr_options"] = [o for o in options if o.startswith("-")]
        default = call.kwarg("default")
        if isinstance(default, (cst.Float, cst.Integer)):
            facts["lr_default"] = float(default.value)
        break
    return facts
