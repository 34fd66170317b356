"""TL505 dropout-ignores-eval-mode."""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from trainlint.diagnostics import Applicability, Severity
from trainlint.model import Call, Function, TrainingModel
from trainlint.model.facts import ClassInfo
from trainlint.model.hooks import library_step_hook
from trainlint.model.module_classes import method_class
from trainlint.model.walk import iter_nodes
from trainlint.rules.rule import Finding, NodeEdit, NodeFix, Rule

# functional dropout -> its `training` default: True drops in eval mode too, False never drops
DROPOUT_FUNCTIONS = {
    "torch.nn.functional.dropout": True,
    "torch.nn.functional.dropout1d": True,
    "torch.nn.functional.dropout2d": True,
    "torch.nn.functional.dropout3d": True,
    "torch.nn.functional.alpha_dropout": False,
    "torch.nn.functional.feature_alpha_dropout": False,
}
DROPOUT_LAYERS = frozenset({
    "torch.nn.Dropout", "torch.nn.Dropout1d", "torch.nn.Dropout2d", "torch.nn.Dropout3d", "torch.nn.AlphaDropout",
    "torch.nn.FeatureAlphaDropout",
})
TRAINING_POSITION = 2  # dropout(input, p, training, inplace)


class DropoutIgnoresEvalMode(Rule):
    code = "TL505"
    name = "dropout-ignores-eval-mode"
    severity = Severity.WARNING
    summary = "Functional dropout in an `nn.Module` without `training=`, or a dropout layer built inside the method that uses it."
    hint = "Pass `training=self.training` to `F.dropout` (or build the `nn.Dropout` layer once in `__init__`)."
    requires = ("ropout",)  # `dropout` and `Dropout`
    why = (
        "`model.eval()` flips `self.training` on the module tree; a functional call never reads it. "
        "`F.dropout(input, p=0.5, training=True, inplace=False)`: its `training` defaults to True "
        "(https://docs.pytorch.org/docs/stable/generated/torch.nn.functional.dropout.html), so without "
        "`training=self.training` it keeps zeroing a fraction p of the activations (and scaling the rest by "
        "1/(1-p)) after `model.eval()`: two evaluation forwards of the same input differ, and every reported "
        "metric is that of a randomly thinned network. pytorch/pytorch#26338 shows `net.eval()` leaving "
        "`F.dropout` on (\"It is actually expected that you need to manually specify the arg `training=...`\"). "
        "A dropout layer constructed in `forward` is a fresh module, always in training mode, so "
        "`model.eval()` never reaches it either. The opposite: `F.alpha_dropout` and "
        "`F.feature_alpha_dropout` default to `training=False`, so without it they never drop, even in training."
    )
    story = (
        "Academic-Hammer/SciTSR#16: the table-structure model's attention called `torch.nn.functional.dropout(x, "
        "p=self.d_rate)`, so \"during inference the dropout layer is still active despite using `model.eval()`, "
        "affecting model outputs and the overall results\" (fixed by a registered `nn.Dropout`). Over the 41 "
        "public training projects of the real-code set it finds nothing (all of them pass `training=`), so it "
        "stays in preview until it has 10 reviewed findings."
    )
    example = """\
import torch.nn as nn
import torch.nn.functional as F

class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(128, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.dropout(F.relu(self.fc1(x)), p=0.5)
        return self.fc2(x)
"""
    fixed_example = """\
import torch.nn as nn
import torch.nn.functional as F

class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(128, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.dropout(F.relu(self.fc1(x)), p=0.5, training=self.training)
        return self.fc2(x)
"""
    not_flagged = (
        "A call in the body of an `if` testing `self.training` (alone or in an `and`: it runs only in training); "
        "a `training` argument given in any form: by keyword or third positional argument, `training=True` "
        "(Monte Carlo dropout, on purpose), any expression (`training=self.training and self.use_dropout`), "
        "or hidden in `*args`/`**kwargs`; a literal `p` of 0, or a `p` that is a parameter of the method defaulting to 0 (`def p_sample(self, x, noise_dropout=0.)`), or a branch on a parameter of the method that defaults to `False` or `None` (`if need_fp:` in a `forward(self, x, need_fp=False)` whose training step alone passes `True`): dropout only when a call asks for it; functional dropout outside the methods of an "
        "`nn.Module` subclass (a plain function has no `self.training` to pass), in static or class "
        "methods, and in the step hooks a library calls only while training (Lightning's `training_step`); "
        "dropout layers built in `__init__` or stored on `self` (registered, so `eval()` reaches them)."
    )
    evidence = (
        "29 of 30 reviewed findings right (0.97) in twelve public repositories of the real-code set "
        "(`benchmarks/realworld/labels/`): a book's chapters (10), federated-learning, graph, recommendation, "
        "table-recognition and three book repositories, where it left preview (24 right of 25), and the three "
        "`F.dropout(x, 0.3)` of a GAN's MNIST discriminator and a TrajGRU's zoneout `F.dropout2d` (Hzzone/Precipitation-Nowcasting), "
        "and WeNet's CTC `F.dropout(hs_pad, p=self.dropout_rate)`, labelled blind before their runs. The false one: a "
        "`drop_prob` the caller sets to 0 for evaluation (kefirski/pytorch_RVAE). Two more were wrong until a branch on a "
        "flag the caller passes was read as asked for (UniMatch's `if need_fp:`)."
    )
    verification = "`trainlint verify` runs two eval-mode forwards of one batch through `F.dropout(x, p)`: they differ (the same determinism check as `verify run`'s); `verify run` also names the call on the user's own run."
    valid = (
        # run only in training mode: the test does what `training=self.training` would
        """
import torch.nn as nn
import torch.nn.functional as F
class Head(nn.Module):
    def __init__(self, rate):
        super().__init__()
        self.rate = rate
        self.fc = nn.Linear(8, 2)
    def forward(self, x):
        if self.training and self.rate > 0:
            x = F.dropout(x, p=self.rate)
        return self.fc(x)
""",
        """
import torch.nn as nn
import torch.nn.functional as F

class Block(nn.Module):
    def forward(self, x):
        return F.dropout(x, 0.1, self.training)
""",
        """
import torch.nn as nn
import torch.nn.functional as F

class Block(nn.Module):
    def forward(self, x):
        x = F.dropout(x, p=self.p, training=self.training and self.use_dropout)
        return F.dropout2d(x, 0.2, True)  # Monte Carlo dropout, on in evaluation on purpose
""",
        """
import torch.nn.functional as F

def mlp(x, weights):
    return F.dropout(x @ weights, 0.5)
""",
        """
import torch.nn as nn
import torch.nn.functional as F

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)

    def forward(self, x, **kwargs):
        x = F.dropout(x, 0.0)
        return self.drop(F.dropout(x, 0.1, **kwargs))
""",
        """
import torch.nn.functional as F

class Augment:
    def __call__(self, x):
        return F.dropout(x, 0.1)
""",
        # a branch on a flag the caller passes, off by default: dropout only when a call asks for it
        """
import torch
import torch.nn as nn

class DeepLab(nn.Module):
    def forward(self, x, need_fp=False):
        if need_fp:
            return self.head(torch.cat((x, nn.Dropout2d(0.5)(x))))
        return self.head(x)
""",
        # a probability the caller passes, off by default: dropout only when a call asks for it
        """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Diffusion(nn.Module):
    @torch.no_grad()
    def p_sample(self, x, t, noise_dropout=0.):
        noise = torch.randn_like(x)
        if noise_dropout > 0.:
            noise = F.dropout(noise, p=noise_dropout)
        return self.mean(x, t) + noise
""",
    )
    invalid = (
        # a flag of the model's own is not its mode: this drops in evaluation too
        """
import torch.nn as nn
import torch.nn.functional as F
class Head(nn.Module):
    def __init__(self, use_dropout):
        super().__init__()
        self.use_dropout = use_dropout
        self.fc = nn.Linear(8, 2)
    def forward(self, x):
        if self.use_dropout:
            x = F.dropout(x, p=0.2)
        return self.fc(x)
""",
        """
import torch
from torch import nn

class Attention(nn.Module):
    def forward(self, q, k, v):
        attn = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        attn = nn.functional.dropout(attn, p=0.1)
        return attn @ v
""",
        # a parameter that defaults to dropping drops in every evaluation call that leaves it out
        """
import torch.nn as nn
import torch.nn.functional as F

class Decoder(nn.Module):
    def forward(self, x, drop_prob=0.1):
        return self.fc(F.dropout(x, drop_prob))
""",
        """
import torch.nn as nn

class Head(nn.Module):
    def forward(self, x):
        return nn.Dropout(0.3)(x)
""",
        """
import torch.nn as nn
from torch.nn.functional import alpha_dropout

class SelfNormalizing(nn.Module):
    def forward(self, x):
        return alpha_dropout(self.fc(x), 0.1)
""",
        """
import torch.nn as nn
import torch.nn.functional as F

class Base(nn.Module):
    pass

class Encoder(Base):
    def encode(self, x):
        def inner(h):
            return F.dropout2d(h, 0.2)
        return inner(x)
""",
    )

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        return "dropout" in source or "Dropout" in source

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        for call in model.calls:
            qual = call.qualname
            if qual not in DROPOUT_FUNCTIONS and qual not in DROPOUT_LAYERS or _asked_for(model, call):
                continue
            if qual in DROPOUT_FUNCTIONS:
                found = self._functional(model, call, DROPOUT_FUNCTIONS[qual])
                if found is not None:
                    yield found
            elif _evaluated_method(model, call) is not None:
                yield from self._built_in_method(model, call)

    def _functional(self, model: TrainingModel, call: Call, drops_by_default: bool) -> Finding | None:
        owner = _evaluated_method(model, call)
        args = call.node.args
        if owner is None or any(a.star for a in args):
            return None
        if call.kwarg("training") is not None or call.positional(TRAINING_POSITION) is not None:
            return None
        p = call.arg(1, "p")
        if _is_zero(p) or (isinstance(p, cst.Name) and _is_zero(owner[1].defaults.get(p.value))):
            return None  # `p=0`, or `def p_sample(self, x, noise_dropout=0.)`: off unless a call asks for it
        this = owner[1].params[0]
        if drops_by_default and _under_training_test(owner[1].node, call.node, this):
            return None  # `if self.training and rate > 0: F.dropout(...)`: it runs in training only
        name = model.module.code_for_node(call.node.func)
        if drops_by_default:
            message = (
                f"`{name}(...)` has no `training=` argument, and its default is True: it keeps dropping "
                f"activations after `model.eval()`, so evaluation outputs are random"
            )
        else:
            message = (
                f"`{name}(...)` has no `training=` argument, and its default is False: it never drops, "
                f"even in training"
            )
        fix = NodeFix(
            f"pass `training={this}.training`",
            (NodeEdit(args[-1].value, f", training={this}.training", "after"),),
            Applicability.UNSAFE,
        )
        return Finding(call.node, message, fix=fix)

    @staticmethod
    def _built_in_method(model: TrainingModel, call: Call) -> Iterator[Finding]:
        """`nn.Dropout(p)(x)`, or `drop = nn.Dropout(p)` then `drop(x)`, inside a method: a fresh layer,
        in training mode whatever mode the model is in."""
        parent = _called_directly(model, call)
        name = model.module.code_for_node(call.node.func)
        message = (
            f"`{name}(...)` is built inside `{call.site.function.name if call.site.function else 'the method'}`: "
            f"a fresh layer is in training mode, and `model.eval()` never reaches it"
        )
        if parent:
            yield Finding(call.node, message)
            return
        fn = call.site.function
        for assign in model.assigns:
            if assign.value is call.node and fn is not None and len(assign.targets) == 1 and "." not in assign.targets[0]:
                target = assign.targets[0]
                if any(c.name == target and c.site.function is fn and c.site.order > call.site.order for c in fn.calls):
                    yield Finding(call.node, message)
                return


def _evaluated_method(model: TrainingModel, call: Call) -> tuple[ClassInfo, Function] | None:
    """The `nn.Module` method the call is in, unless a library calls it only while training
    (Lightning's `training_step`): dropout there never runs in evaluation."""
    owner = method_class(model, call.site.function)
    if owner is None or library_step_hook(owner[1].name, owner[0].bases):
        return None
    return owner


def _asked_for(model: TrainingModel, call: Call) -> bool:
    """A call in the body of an `if` on a parameter of its method that defaults to `False` or `None`
    (`def forward(self, x, need_fp=False): if need_fp: ... nn.Dropout2d(0.5)(x)`): dropout only when a
    call asks for it, as with a `p` defaulting to 0."""
    fn = call.site.function
    if fn is None:
        return False
    for gate in call.site.gate_nodes:
        test = gate.test if gate is not None else None
        terms = [test.left, test.right] if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And) else [test]
        flags = [t.value for t in terms if isinstance(t, cst.Name) and t.value in fn.params]
        off = [f for f in flags if isinstance(fn.defaults.get(f), cst.Name) and fn.defaults[f].value in ("False", "None")]  # type: ignore[union-attr]
        if off and gate is not None and any(n is call.node for n in iter_nodes(gate.body)):
            return True
    return False


def _is_zero(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, (cst.Integer, cst.Float)) and expr.evaluated_value == 0


def _called_directly(model: TrainingModel, call: Call) -> bool:
    """`nn.Dropout(p)(x)`: the constructed layer is called at once."""
    return any(other.node.func is call.node for other in (call.site.function.calls if call.site.function else model.calls))


def _tests_training(test: cst.BaseExpression, this: str) -> bool:
    """`self.training`, alone or as a term of an `and`."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _tests_training(test.left, this) or _tests_training(test.right, this)
    return (
        isinstance(test, cst.Attribute) and test.attr.value == "training"
        and isinstance(test.value, cst.Name) and test.value.value == this
    )


def _under_training_test(fn_node: cst.CSTNode, call: cst.Call, this: str) -> bool:
    """Whether the call sits in the body of an `if` that tests `self.training` (as an `and` term): the
    dropout then runs only in training mode, as `training=self.training` would have it."""
    stack: list[cst.CSTNode] = [fn_node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.If) and _tests_training(current.test, this) and any(n is call for n in iter_nodes(current.body)):
            return True
        if isinstance(current, (cst.FunctionDef, cst.If, cst.IndentedBlock, cst.Else, cst.For, cst.While, cst.With, cst.Try)) or current is fn_node:
            stack.extend(c for c in current.children if isinstance(c, (cst.BaseSuite, cst.BaseCompoundStatement, cst.Else)))
    return False
