"""TL303 eval-forward-with-grad."""

from __future__ import annotations

import re
from typing import Callable, Iterator

from trainlint.diagnostics import Severity
from trainlint.model import Function, TrainingModel
from trainlint.model.names import dotted, tokens
from trainlint.model.training import LOOP_TEXT, MODULE_WORDS
from trainlint.rules.rule import Finding, Rule

EVAL_WORDS = frozenset({"validate", "validation", "evaluate", "evaluation", "eval", "val"})
FORWARD_WORDS = MODULE_WORDS - {"loss", "criterion"}
# `convert_module(model)`, `load_model(path)`: verbs acting on a model, not a forward pass through one
NOT_FORWARD_VERBS = frozenset(
    """convert load build get set wrap unwrap setup prepare save create init make move copy freeze unfreeze
    compile register print log reset apply count summarize summarise export""".split()
)
FRAMEWORK_HOOKS = frozenset({"validation_step", "test_step", "predict_step", "evaluation_loop", "prediction_step", "evaluate"})


_EVAL_CALL = re.compile(r"\.[\s\\]*eval[\s\\]*\(")
_DEF = re.compile(r"\bdef[ \t\\]+(\w+)")


class EvalForwardWithGrad(Rule):
    code = "TL303"
    name = "eval-forward-with-grad"
    severity = Severity.WARNING
    summary = "Forward passes in evaluation code outside `torch.no_grad()` / `torch.inference_mode()`."
    hint = "Wrap evaluation in `with torch.no_grad():` (or decorate the function with `@torch.inference_mode()`)."
    requires = ("eval",)

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        # a forward pass in a loop of an evaluation function: one named so, or one that calls `.eval()`
        if LOOP_TEXT.search(source) is None:
            return False
        if _EVAL_CALL.search(source):
            return True
        return any(EVAL_WORDS & set(tokens(name)) for name in _DEF.findall(source))
    why = (
        "Outside `no_grad`, every forward pass on parameters that require grad records an autograd graph and "
        "saves its activations for a backward that never comes. Evaluation then uses several times the "
        "memory it needs (and OOMs on batch sizes that train fine) and runs slower; accumulated metrics keep "
        "the graphs alive."
    )
    story = "skorch #218 (OOM narrowed to the validation step; fixed by `no_grad`), OpenNMT-py #1141, hszhao/semseg #60."
    example = """\
import torch

def evaluate(model, loader):
    model.eval()
    total = 0
    for x, y in loader:
        total += criterion(model(x), y).item()
    return total
"""
    fixed_example = """\
import torch

@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total = 0
    for x, y in loader:
        total += criterion(model(x), y).item()
    return total
"""
    not_flagged = (
        "Evaluation under `no_grad`/`inference_mode` (a `with` block, a decorator, or every call site inside "
        "one), functions that backpropagate (meta-learning, adversarial evaluation), framework hooks "
        "(Lightning `validation_step`, HF `evaluate`) that disable gradients for you, and test functions."
    )
    verification = "`trainlint verify run` records, by line, the script's outermost forward calls that run with autograd on (in eval mode or not)."
    valid = (
        # preparing a model for inference is not a forward pass through it
        """
def load_for_eval(paths, fabric):
    for path in paths:
        model = load_model(path)
        model.eval()
        model = fabric.convert_module(model)
""",
        """
import torch
def validate(model, loader):
    model.eval()
    with torch.no_grad():
        for x in loader:
            out = model(x)
""",
        """
import torch
def evaluate(model, loader):
    for x in loader:
        out = model(x)

with torch.inference_mode():
    evaluate(model, val_loader)
""",
    )
    invalid = (
        """
import torch
def validate(model, loader):
    model.eval()
    for x, y in loader:
        loss = criterion(model(x), y)
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for fn in model.functions:
            if not self._is_eval_function(model, fn) or model.under_no_grad_everywhere(fn):
                continue
            if any(model.is_backward(c) or model.is_optimizer_step(c) for c in fn.calls):
                continue
            summary = model.summarizer.function(fn)
            if summary.trains or summary.steps or summary.backprops:
                continue  # a driver that trains and evaluates (`eval_linear` calls `train`)
            for call in fn.calls:
                if not call.site.loops or model.under(call.site, "no_grad") or call.site.function is not fn:
                    continue
                if model.callee(call) is not None:
                    continue  # a helper of this module, judged on its own (`@torch.no_grad()` on it)
                if model.value(call.node, call.site).graph is False:
                    continue  # a frozen module (`requires_grad_(False)`) records no graph
                words = tokens((dotted(call.node.func) or "").rsplit(".", 1)[-1])
                if FORWARD_WORDS & set(words) and words[0] not in NOT_FORWARD_VERBS:
                    yield Finding(call.node, f"forward pass in `{fn.name}` records an autograd graph: evaluation holds activations it never backpropagates")
                    break

    @staticmethod
    def _is_eval_function(model: TrainingModel, fn: Function) -> bool:
        if (fn.class_name and fn.name in FRAMEWORK_HOOKS) or fn.name.startswith("test_") or fn in model.step_functions:
            return False
        return bool(EVAL_WORDS & set(tokens(fn.name))) or any(c.method == "eval" and not c.node.args for c in fn.calls)
