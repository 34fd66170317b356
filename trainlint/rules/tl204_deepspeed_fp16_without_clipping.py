"""TL204 deepspeed-fp16-without-clipping."""

from __future__ import annotations

import json
from typing import Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import TrainingModel
from trainlint.rules.rule import Finding, Rule, UnreadableInput


def config_problem(config: dict) -> str | None:
    """Why a DeepSpeed config trains fp16 without clipping, or None."""
    fp16 = config.get("fp16")
    if not isinstance(fp16, dict) or fp16.get("enabled") not in (True, "true", "auto"):
        return None
    clip = config.get("gradient_clipping")
    if clip is None:
        return "`fp16.enabled` is true and `gradient_clipping` is missing"
    if isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip == 0:
        return "`fp16.enabled` is true and `gradient_clipping` is 0"
    return None


def json_findings(text: str) -> list[tuple[int, int, str]]:
    """(line, column, message) for a DeepSpeed JSON config; positions point at the `fp16` key.

    Text that is not JSON gives no findings; JSON nested too deep to read raises UnreadableInput.
    """
    try:
        config = json.loads(text)
    except RecursionError:
        raise UnreadableInput("cannot read JSON config: nested too deep") from None
    except ValueError:
        return []
    if not isinstance(config, dict):
        return []
    problem = config_problem(config)
    if problem is None:
        return []
    offset = text.find('"fp16"')
    line = text.count("\n", 0, max(offset, 0)) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1 if offset >= 0 else 1
    return [(line, column, f"DeepSpeed config: {problem}; one exploding step in fp16 turns the weights inf/NaN")]


def _literal(node: cst.BaseExpression) -> object:
    if isinstance(node, cst.Dict):
        out = {}
        for el in node.elements:
            if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString):
                out[el.key.evaluated_value] = _literal(el.value)
        return out
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, (cst.Integer, cst.Float)):
        return float(node.value)
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    return object()


class DeepspeedFp16WithoutClipping(Rule):
    code = "TL204"
    name = "deepspeed-fp16-without-clipping"
    severity = Severity.WARNING
    summary = "A DeepSpeed config (JSON file or dict passed to `deepspeed.initialize`) with fp16 enabled and `gradient_clipping` missing or 0."
    hint = 'Add `"gradient_clipping": 1.0` to the config (or use `"bf16": {"enabled": true}`).'
    requires = ("fp16",)
    why = (
        "DeepSpeed clips only when `gradient_clipping` is set; its default is 0 (off). In fp16 a gradient "
        "norm of a few hundred overflows Adam's squared-gradient state (fp16 max 65504), the loss scale "
        "collapses (\"Current loss scale already at minimum\") and the weights become inf/NaN."
    )
    story = (
        "Field report 003: a CIFAR-10 CNN with a DeepSpeed fp16 config and no clipping: gradient norm inf, "
        "loss 17-20, 10% accuracy after 25 epochs; `\"gradient_clipping\": 1.0` fixed it."
    )
    example = """\
import deepspeed

ds_config = {"train_batch_size": 64, "fp16": {"enabled": True}}
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
"""
    fixed_example = """\
import deepspeed

ds_config = {"train_batch_size": 64, "fp16": {"enabled": True}, "gradient_clipping": 1.0}
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
"""
    not_flagged = "Configs with `gradient_clipping` set (including `\"auto\"`), bf16 or fp32 configs, and configs built from variables trainlint cannot read. JSON files are linted when their name looks like a DeepSpeed config (`ds_config*.json`, `*deepspeed*.json`)."
    verification = (
        "`trainlint verify` runs TL202's probe in DeepSpeed's fp16 set-up (fp32 master weights, a dynamic loss "
        "scale that skips overflowing steps): one outlier batch, retried while the scale skips it, with and "
        "without clipping at 1.0, and says which optimizer and lr it assumed. `trainlint verify run` reports "
        "non-finite losses, gradient norms and parameters."
    )
    valid = (
        """
import deepspeed
cfg = {"fp16": {"enabled": True}, "gradient_clipping": 1.0}
deepspeed.initialize(model=model, config=cfg)
""",
    )
    invalid = (
        """
import deepspeed
deepspeed.initialize(model=model, config={"fp16": {"enabled": True}, "gradient_clipping": 0})
""",
    )

    text_inputs = (".json",)

    def check_text(self, text: str) -> list[tuple[int, int, str]]:
        return json_findings(text)

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for call in model.calls:
            if call.qualname != "deepspeed.initialize":
                continue
            config = call.kwarg("config") or call.kwarg("config_params")
            if isinstance(config, cst.Name):
                values = model.bindings(call.site.function, config.value) or model.bindings(None, config.value)
                config = values[-1] if values else None
            if not isinstance(config, cst.Dict):
                continue
            value = _literal(config)
            problem = config_problem(value) if isinstance(value, dict) else None
            if problem:
                yield Finding(config, f"DeepSpeed config: {problem}; one exploding step in fp16 turns the weights inf/NaN")
