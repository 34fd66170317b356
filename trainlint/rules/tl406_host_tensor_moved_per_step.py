"""TL406 host-tensor-moved-per-step."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from trainlint.diagnostics import Applicability, Severity
from trainlint.model import Call, TrainingModel
from trainlint.model.torchnames import DETERMINISTIC_FACTORIES as DETERMINISTIC, RANDOM_FACTORIES as RANDOM
from trainlint.model.names import dotted
from trainlint.model.torchnames import literal_string
from trainlint.model.lattice import HOST
from trainlint.rules.rule import Finding, NodeEdit, NodeFix, Rule



def _moves_device(call: Call) -> bool:
    """`.cuda()`, `.to(device)`: a copy to a device (not `.to(torch.float16)` or `.to("cpu")`)."""
    if call.method == "cuda":
        return True
    if not call.node.args:
        return False
    first = call.node.args[0]
    if first.keyword is not None and first.keyword.value != "device":
        return False
    text = dotted(first.value) or ""
    if text.startswith("torch.") and text.rsplit(".", 1)[-1] in DTYPE_NAMES:
        return False
    if text and "dtype" in text.rsplit(".", 1)[-1].lower():
        return False  # `w.to(dtype)`: a cast, the tensor stays where it is
    return (literal_string(first.value) or "cuda").split(":")[0] != "cpu"


DTYPE_NAMES = frozenset({"float16", "bfloat16", "float32", "float64", "float", "half", "double", "long", "int", "int64", "int32", "bool", "uint8"})


class HostTensorMovedPerStep(Rule):
    code = "TL406"
    name = "host-tensor-moved-per-step"
    severity = Severity.INFO
    summary = "A tensor built on the host (`torch.zeros(...)`, `torch.tensor(...)`) then moved with `.cuda()`/`.to(device)` every step."
    hint = "Create it on the device: `torch.zeros(n, device=device)`."
    requires = (".cuda(", ".to(")
    per_step = True
    why = (
        "Building a tensor on the CPU and copying it fills host memory, then issues a pageable "
        "host-to-device copy that blocks the host - every step. The tuning guide: \"Instead of calling "
        "torch.rand(size).cuda() ... produce the output directly on the target device\"; the profiler's "
        "ExtraCUDACopyPattern reports exactly this."
    )
    story = "NVIDIA/TransformerEngine #1941 (`torch.tensor([0])` copies \"causing a lot of CPU syncs\"); mmsegmentation #3231 (`torch.rand(...).to(device)` vs `device=`)."
    example = """\
import torch

for x in loader:
    mask = torch.ones(x.shape[0]).to(device)
    loss = model(x, mask)
    loss.backward()
    optimizer.step()
"""
    fixed_example = """\
import torch

for x in loader:
    mask = torch.ones(x.shape[0], device=device)
    loss = model(x, mask)
    loss.backward()
    optimizer.step()
"""
    not_flagged = "Moving the batch from the DataLoader (`x.to(device)`: use `pin_memory=True` and `non_blocking=True`), factories that already pass `device=`, and code outside training steps."
    verification = "`trainlint verify run` records copies of host tensors to the device by line and per step (on CUDA)."
    valid = (
        """
import torch
for x in loader:
    x = x.to(device, non_blocking=True)
    mask = torch.ones(4, device=device)
    model(x, mask).backward()
    optimizer.step()
""",
    )
    invalid = (
        """
import torch
for x in loader:
    noise = torch.randn(x.shape).cuda()
    model(x + noise).backward()
    optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for call in model.calls:
            if call.method not in ("cuda", "to") or not model.every_step(call.site):
                continue
            if isinstance(call.receiver, cst.Name) and _moves_device(call):
                # `alpha = torch.rand(n, 1); alpha = alpha.cuda()`: built on the host a line above
                value = model.value(call.receiver, call.site)
                name = (value.origin or "").removeprefix("torch.")
                if value.is_tensor and value.device == HOST and name in DETERMINISTIC | RANDOM and not name.endswith("_like"):
                    yield Finding(call.node, f"`{call.receiver.value}` is built on the host by `torch.{name}(...)` and copied to the device every step")
                continue
            if not isinstance(call.receiver, cst.Call):
                continue
            factory = model.imports.resolve(call.receiver.func) or ""
            name = factory.rsplit(".", 1)[-1]
            if not factory.startswith("torch.") or factory.count(".") != 1 or name not in DETERMINISTIC | RANDOM:
                continue
            if name.endswith("_like"):
                continue  # `torch.randn_like(x)` is built on x's device; nothing came from the host
            if any(a.keyword is not None and a.keyword.value == "device" for a in call.receiver.args):
                continue
            if call.method == "to" and not call.node.args:
                continue
            yield Finding(call.node, f"`torch.{name}(...)` is built on the host and copied to the device every step", fix=self._fix(model, call, name))

    @staticmethod
    def _fix(model: TrainingModel, call: Call, name: str) -> NodeFix | None:
        args = call.node.args
        if call.method == "cuda" and not args:
            device = '"cuda"'
        elif call.method == "to" and len(args) == 1 and args[0].keyword is None:
            device = model.module.code_for_node(args[0].value)
        else:
            return None
        factory = call.receiver
        assert isinstance(factory, cst.Call)
        inner = model.module.code_for_node(factory)
        new = inner[:-1].rstrip() + (", " if factory.args else "") + f"device={device})"
        # random factories draw from the device's generator: the values change, so the fix is unsafe
        applicability = Applicability.UNSAFE if name in RANDOM else Applicability.SAFE
        return NodeFix(f"create on the device: `{new}`", (NodeEdit(call.node, new),), applicability)
