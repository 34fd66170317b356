"""The fix-safety harness's variants for the rules whose only fix is unsafe by design: TL504 (a misspelled
freeze respelled, or `module.requires_grad = X` made `module.requires_grad_(X)`), TL505 (`training=self.training`
passed to functional dropout), TL506 (layers kept in a plain list or dict wrapped in `nn.ModuleList` /
`nn.ModuleDict` / `nn.ParameterList` / `nn.ParameterDict`) and TL508 (`sampler.set_epoch(epoch)` at the top of
the epoch loop).

Each fix changes what the program computes (that is its point: a layer stops or starts training, eval forwards
stop dropping, the shuffled order changes every epoch), so `--fix` must never apply it: every variant here is
`safe=False`. Applied anyway (`--unsafe-fixes`), each must still leave a program that parses and runs: every
variant is `unsafe="runs"`. The scripts are shaped like real training code and each one fires its rule.

`Variant` lives here (the harness imports it from this module) so that this module needs nothing of the harness.
"""

from __future__ import annotations

import dataclasses

import textwrap
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Variant:
    rule: str
    name: str
    code: str  # train.py
    safe: bool  # a safe fix must be offered and keep the program's output; or no safe fix may be
    modules: dict[str, str] = field(default_factory=dict)  # other local modules: path -> text
    fires: bool = True  # the rule reports it (a cast is no device move: no finding at all)
    unsafe: str | None = None  # the unsafe fix applied anyway: "breaks" the program, or still "runs"


# -- TL504 freeze-flag-misspelled: `p.require_grad = False` -> `p.requires_grad = False`, and
# `module.requires_grad = X` -> `module.requires_grad_(X)`. The fix freezes what was meant to be frozen:
# what trains changes, so the weights printed at the end change.
FREEZE_STEPS = """\
x = torch.arange(12.0).reshape(4, 3) / 10
for step in range(3):
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
print([round(v, 6) for p in model.parameters() for v in p.detach().flatten().tolist()])
"""


def freeze(name: str, head: str, freezing: str, steps: str = FREEZE_STEPS) -> Variant:
    """A script that builds `model` and `optimizer` (`head`), freezes part of it (`freezing`), trains a few steps."""
    code = textwrap.dedent(head).strip("\n") + "\n" + textwrap.dedent(freezing).strip("\n") + "\n" + steps
    return Variant("TL504", name, code, False, unsafe="runs")


NET_NN = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.backbone(x))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""

TL504_VARIANTS = [
    freeze("named-parameters-of-the-first-layer", """
        import torch

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        """, """
        for name, p in model[0].named_parameters():
            p.require_grad = False
        """),
    freeze("requires-grads-on-a-backbone", NET_NN, """
        for p in model.backbone.parameters():
            p.requires_grads = False
        """),
    freeze("filtered-by-name-with-a-comment", NET_NN.replace("import torch.nn as nn", "from torch import nn"), """
        for name, param in model.named_parameters():
            if name.startswith("backbone."):
                param.require_grads = False  # keep the pretrained features
        """),
    freeze("list-of-the-parameters", NET_NN, """
        for p in list(model.head.parameters()):
            p.require_grad = False
        """),
    freeze("weight-of-a-layer-torch-alias", """
        import torch as T

        T.manual_seed(0)
        model = T.nn.Linear(3, 1)
        optimizer = T.optim.SGD(model.parameters(), lr=0.1)
        """, """
        model.weight.require_grad = False
        """, FREEZE_STEPS.replace("torch.", "T.")),
    freeze("module-flag-in-init", """
        import torch
        import torch.nn as nn

        torch.manual_seed(0)


        class Classifier(nn.Module):
            def __init__(self):
                super().__init__()
                self.backbone = nn.Linear(3, 4)
                self.head = nn.Linear(4, 1)
                self.backbone.requires_grad = False  # the pretrained part

            def forward(self, x):
                return self.head(torch.relu(self.backbone(x)))


        model = Classifier()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        """, ""),
    freeze("module-flag-from-a-config-value", """
        import torch
        from torch import nn

        torch.manual_seed(0)
        freeze_encoder = True
        encoder = nn.Linear(3, 4)
        model = nn.Sequential(encoder, nn.Tanh(), nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        """, """
        encoder.requires_grad = not freeze_encoder
        """),
    freeze("batch-norms-among-the-modules", """
        import torch
        import torch.nn as nn

        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        """, """
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.requires_grad = False
        """),
    freeze("named-children", """
        import torch
        import torch.nn as nn

        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        """, """
        for name, child in model.named_children():
            if name == "0":
                child.requires_grad = False
        """),
    freeze("method-replaced-by-a-flag", """
        import torch
        import torch.nn as nn

        torch.manual_seed(0)
        stem = nn.Linear(3, 4)
        model = nn.Sequential(stem, nn.Tanh(), nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        """, """
        stem.requires_grad_ = False
        """),
    freeze("freeze-method-of-the-model", """
        import torch
        import torch.nn as nn

        torch.manual_seed(0)


        class Finetuner(nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = nn.Linear(3, 4)
                self.classifier = nn.Linear(4, 1)

            def freeze_encoder(self):
                self.encoder.requires_grad = False

            def forward(self, x):
                return self.classifier(self.encoder(x).tanh())


        model = Finetuner()
        model.freeze_encoder()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        """, ""),
    freeze("learned-scale-tensor", """
        import torch

        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scale = torch.ones(1)
        """, """
        scale.require_grad = True
        """, FREEZE_STEPS.replace("model(x).pow(2)", "(model(x) * scale).pow(2)").replace(
            "print(", "print(scale.grad is None, ")),
    freeze("temperature-parameter", """
        import torch
        from torch import nn

        torch.manual_seed(0)
        model = nn.Linear(3, 1)
        temperature = nn.Parameter(torch.ones(1))
        optimizer = torch.optim.SGD([*model.parameters(), temperature], lr=0.1)
        """, """
        temperature.requires_grads = False
        """, FREEZE_STEPS.replace("model(x).pow(2)", "(model(x) / temperature).pow(2)").replace(
            "print(", "print(temperature.tolist(), ")),
    freeze("module-flag-then-a-statement-on-one-line", """
        import torch
        from torch import nn

        torch.manual_seed(0)
        encoder = nn.Linear(3, 4)
        model = nn.Sequential(encoder, nn.Tanh(), nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        """, """
        encoder.requires_grad = False; frozen = ["encoder"]
        print(frozen)
        """),
]


# -- TL505 dropout-ignores-eval-mode: `F.dropout(x, p)` -> `F.dropout(x, p, training=self.training)`. The fix
# turns dropout off in eval mode (or, for alpha dropout, on in training): the outputs printed change.
DROPOUT_RUN = """\


torch.manual_seed(0)
model = {build}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.arange({numel}.0).reshape({shape}) / {numel}
for step in range(3):
    optimizer.zero_grad()
    model(x).pow(2).mean().backward()
    optimizer.step()
model.eval()
with torch.no_grad():
    print([round(v, 6) for v in model(x).flatten().tolist()])
"""


def dropout(name: str, code: str, build: str = "Net()", shape: tuple[int, ...] = (4, 6), torch: str = "torch") -> Variant:
    """A module (`code`) trained a few steps, then run in eval mode; `torch`: how the script names torch."""
    numel = 1
    for n in shape:
        numel *= n
    run = DROPOUT_RUN.format(build=build, numel=numel, shape=", ".join(map(str, shape))).replace("torch.", f"{torch}.")
    return Variant("TL505", name, textwrap.dedent(code).strip("\n") + "\n" + run, False, unsafe="runs")


TL505_VARIANTS = [
    dropout("functional-alias", """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Linear(6, 8)
                self.fc2 = nn.Linear(8, 2)

            def forward(self, x):
                x = F.dropout(F.relu(self.fc1(x)), p=0.5)
                return self.fc2(x)
        """),
    dropout("attention-through-nn-functional", """
        import torch
        from torch import nn


        class Attention(nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv = nn.Linear(6, 18)

            def forward(self, x):
                q, k, v = self.qkv(x).chunk(3, dim=-1)
                attn = torch.softmax(q @ k.transpose(-2, -1) / 6 ** 0.5, dim=-1)
                attn = nn.functional.dropout(attn, p=0.1)
                return attn @ v
        """, build="Attention()", shape=(2, 3, 6)),
    dropout("torch-alias", """
        import torch as T


        class Net(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.body = T.nn.Linear(6, 6)

            def forward(self, x):
                return T.nn.functional.dropout(self.body(x).tanh(), 0.2)
        """, torch="T"),
    dropout("imported-function-and-rate-on-self", """
        import torch
        import torch.nn as nn
        from torch.nn.functional import dropout


        class Net(nn.Module):
            def __init__(self, p=0.3):
                super().__init__()
                self.p = p
                self.fc = nn.Linear(6, 4)

            def forward(self, x):
                return self.fc(dropout(x, self.p))
        """),
    dropout("multi-line-with-comment-and-trailing-comma", """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(6, 3)

            def forward(self, x):
                h = F.dropout(
                    torch.relu(self.fc(x)),
                    p=0.25,  # rate
                )
                return h
        """),
    dropout("multi-line-comment-after-the-last-argument", """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(6, 3)

            def forward(self, x):
                return F.dropout(
                    self.fc(x),
                    0.25  # rate
                )
        """),
    dropout("inplace-keyword-last", """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(6, 5)

            def forward(self, x):
                return F.dropout(self.fc(x).relu(), p=0.2, inplace=False)
        """),
    dropout("dropout2d-after-a-conv", """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class ConvNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(2, 4, 3, padding=1)

            def forward(self, x):
                return F.dropout2d(self.conv(x), 0.5).mean(dim=(2, 3))
        """, build="ConvNet()", shape=(2, 2, 3, 3)),
    dropout("alpha-dropout-never-drops", """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class SelfNormalizing(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(6, 6)

            def forward(self, x):
                return F.alpha_dropout(F.selu(self.fc(x)), 0.2)
        """, build="SelfNormalizing()"),
    dropout("feature-alpha-dropout-imported", """
        import torch
        import torch.nn as nn
        from torch.nn.functional import feature_alpha_dropout


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(6, 6)

            def forward(self, x):
                return feature_alpha_dropout(self.fc(x), 0.2)
        """),
    dropout("helper-nested-in-forward", """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Linear(6, 6)
                self.fc2 = nn.Linear(6, 2)

            def forward(self, x):
                def block(h):
                    return F.dropout(torch.relu(h), 0.3)

                return self.fc2(block(self.fc1(x)))
        """),
    dropout("other-name-for-self-and-an-input-keyword", """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Net(nn.Module):
            def __init__(me):
                super().__init__()
                me.fc = nn.Linear(6, 3)

            def forward(me, x):
                return F.dropout(input=me.fc(x), p=0.4)
        """),
    dropout("method-of-a-subclass-of-a-local-base", """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Base(nn.Module):
            def forward(self, x):
                return self.encode(x)


        class Encoder(Base):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(6, 4, batch_first=True)

            def encode(self, x):
                out, _ = self.rnn(x)
                return F.dropout1d(out.transpose(1, 2), 0.5)
        """, build="Encoder()", shape=(2, 3, 6)),
]


# -- TL506 submodules-not-registered: a plain list or dict of layers -> `nn.ModuleList(...)`,
# `nn.ModuleDict(...)`, `nn.ParameterList(...)`, `nn.ParameterDict(...)`. The fix registers them: the optimizer
# now trains them and `state_dict()` saves them, so the counts and outputs printed change.
REGISTER_RUN = """\


torch.manual_seed(0)
model = {build}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.arange(8.0).reshape(2, 4) / 8
for step in range(3):
    optimizer.zero_grad()
    model(x).pow(2).mean().backward()
    optimizer.step()
with torch.no_grad():
    print(len(model.state_dict()), [round(v, 6) for v in model(x).flatten().tolist()])
"""


def register(name: str, code: str, build: str = "Net()", torch: str = "torch") -> Variant:
    """A module (`code`) with layers in a plain container, built and trained a few steps; `torch`: how the
    script names torch."""
    run = REGISTER_RUN.format(build=build).replace("torch.", f"{torch}.")
    return Variant("TL506", name, textwrap.dedent(code).strip("\n") + "\n" + run, False, unsafe="runs")


TL506_VARIANTS = [
    # `nn` is bound only inside a helper function: the fix spells the module's own top-level `torch.nn`
    register("nn-imported-only-in-a-function", """
        import torch


        def make_head():
            from torch import nn
            return nn.Linear(4, 1)


        class Net(torch.nn.Module):
            def __init__(self, depth=2):
                super().__init__()
                self.layers = [torch.nn.Linear(4, 4) for _ in range(depth)]
                self.out = make_head()

            def forward(self, x):
                for layer in self.layers:
                    x = torch.tanh(layer(x))
                return self.out(x)
        """),
    register("list-comprehension", """
        import torch
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self, depth=2):
                super().__init__()
                self.layers = [nn.Linear(4, 4) for _ in range(depth)]
                self.out = nn.Linear(4, 1)

            def forward(self, x):
                for layer in self.layers:
                    x = torch.tanh(layer(x))
                return self.out(x)
        """),
    register("appended-in-a-loop", """
        import torch
        from torch import nn


        class TextCNN(nn.Module):
            def __init__(self, sizes=(1, 2)):
                super().__init__()
                self.convs = []
                for k in sizes:
                    conv = nn.Conv1d(1, 2, kernel_size=k)
                    self.convs.append(conv)
                self.out = nn.Linear(4, 1)

            def forward(self, x):
                h = x.unsqueeze(1)
                pooled = [conv(h).amax(dim=-1) for conv in self.convs]
                return self.out(torch.cat(pooled, dim=-1))
        """, build="TextCNN()"),
    register("dict-of-heads", """
        import torch
        import torch.nn as nn


        class MultiTask(nn.Module):
            def __init__(self):
                super().__init__()
                self.trunk = nn.Linear(4, 4)
                self.heads = {"cls": nn.Linear(4, 2), "reg": nn.Linear(4, 1)}

            def forward(self, x):
                h = self.trunk(x).relu()
                return torch.cat([head(h) for name, head in self.heads.items()], dim=-1)
        """, build="MultiTask()"),
    register("dict-filled-by-key", """
        import torch
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self, tasks=("a", "b")):
                super().__init__()
                self.trunk = nn.Linear(4, 3)
                self.heads = {}
                for task in tasks:
                    self.heads[task] = nn.Linear(3, 1)

            def forward(self, x):
                h = self.trunk(x)
                return self.heads["a"](h) + self.heads["b"](h)
        """),
    register("parameter-list", """
        import torch
        from torch import nn


        class Mixture(nn.Module):
            def __init__(self, k=3):
                super().__init__()
                self.proj = nn.Linear(4, 4)
                self.weights = [nn.Parameter(torch.full((4,), 0.5)) for _ in range(k)]

            def forward(self, x):
                h = self.proj(x)
                return sum(h * w for w in self.weights)
        """, build="Mixture()"),
    register("parameter-dict", """
        import torch
        import torch.nn as nn


        class Affine(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)
                self.affine = {"scale": nn.Parameter(torch.ones(4)), "shift": nn.Parameter(torch.zeros(4))}

            def forward(self, x):
                return self.fc(x) * self.affine["scale"] + self.affine["shift"]
        """, build="Affine()"),
    register("tuple-of-layers", """
        import torch
        import torch.nn as nn


        class Tower(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = (nn.Linear(4, 4), nn.Linear(4, 4))
                self.out = nn.Linear(4, 2)

            def forward(self, x):
                for block in self.blocks:
                    x = block(x).relu()
                return self.out(x)
        """, build="Tower()"),
    register("multi-line-with-comments-and-trailing-comma", """
        import torch
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = [
                    nn.Linear(4, 4),  # first
                    nn.Linear(4, 4),  # second
                ]
                self.out = nn.Linear(4, 1)

            def forward(self, x):
                for block in self.blocks:
                    x = x + block(x).tanh()
                return self.out(x)
        """),
    register("torch-alias", """
        import torch as T


        class Net(T.nn.Module):
            def __init__(self, n=2):
                super().__init__()
                self.layers = [T.nn.Linear(4, 4) for _ in range(n)]
                self.out = T.nn.Linear(4, 1)

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x).sigmoid()
                return self.out(x)
        """, torch="T"),
    register("blocks-of-a-local-class", """
        import torch
        import torch.nn as nn


        class Block(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.fc = nn.Linear(width, width)
                self.norm = nn.LayerNorm(width)

            def forward(self, x):
                return x + self.fc(self.norm(x))


        class Encoder(nn.Module):
            def __init__(self, n=2):
                super().__init__()
                self.blocks = []
                for _ in range(n):
                    self.blocks.append(Block(4))
                self.out = nn.Linear(4, 1)

            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                return self.out(x)
        """, build="Encoder()"),
    register("extended-then-added-to", """
        import torch
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self, extra=1):
                super().__init__()
                self.layers = []
                self.layers.extend([nn.Linear(4, 4), nn.Linear(4, 4)])
                for _ in range(extra):
                    self.layers += [nn.Linear(4, 4)]
                self.out = nn.Linear(4, 1)

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x).relu()
                return self.out(x)
        """),
    register("dict-comprehension-with-string-keys", """
        import torch
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self, n=3):
                super().__init__()
                self.trunk = nn.Linear(4, 4)
                self.heads = {f"head{i}": nn.Linear(4, 1) for i in range(n)}

            def forward(self, x):
                h = self.trunk(x)
                return torch.cat([self.heads[f"head{i}"](h) for i in range(len(self.heads))], dim=-1)
        """),
    register("nested-in-an-outer-model", """
        import torch
        import torch.nn as nn


        class Experts(nn.Module):
            def __init__(self, n=2):
                super().__init__()
                self.experts = list(nn.Linear(4, 4) for _ in range(n))
                self.gate = nn.Linear(4, n)

            def forward(self, x):
                weights = self.gate(x).softmax(dim=-1)
                return sum(weights[:, i:i + 1] * expert(x) for i, expert in enumerate(self.experts))


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.moe = Experts()
                self.out = nn.Linear(4, 1)

            def forward(self, x):
                return self.out(self.moe(x))
        """, build="Model()"),
    # `self.blocks = a, b`: the fix must pass the tuple as one argument (`nn.ModuleList((a, b))`)
    register("layers-without-brackets", """
        import torch
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.Linear(4, 4), nn.Linear(4, 4)
                self.out = nn.Linear(4, 1)

            def forward(self, x):
                for block in self.blocks:
                    x = block(x).relu()
                return self.out(x)
        """),
]


# -- TL508 sampler-epoch-not-set: `sampler.set_epoch(epoch)` inserted at the top of the epoch loop. The fix
# reshuffles every epoch: the orders of the batches printed change. The samplers are built with `num_replicas`
# and `rank`, so they run without a process group.
SAMPLER_HEAD = """\
import torch
{imports}
torch.manual_seed(0)
dataset = TensorDataset(torch.arange(16.0).reshape(8, 2), torch.arange(8.0).reshape(8, 1))
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
orders = []
"""
SAMPLER_STEP = """\
optimizer.zero_grad()
torch.nn.functional.mse_loss(model(x), y).backward()
optimizer.step()
orders.append(y.flatten().tolist())
"""
SAMPLER_IMPORTS = "from torch.utils.data import DataLoader, DistributedSampler, TensorDataset\n"


def no_fix(variant: Variant) -> Variant:
    """The rule reports it but offers no fix, not even an unsafe one."""
    return dataclasses.replace(variant, unsafe=None)


def epochs(name: str, body: str, imports: str = SAMPLER_IMPORTS) -> Variant:
    """A script that trains over a loader fed by a `DistributedSampler` for a few epochs (`body`, where
    `{step}` is a training step at the indentation it is written at) and prints the orders it saw."""
    body = textwrap.dedent(body).strip("\n")
    lines = []
    for line in body.splitlines():
        if line.strip() == "{step}":
            indent = line[: len(line) - len(line.lstrip())]
            lines.append(textwrap.indent(SAMPLER_STEP, indent).rstrip("\n"))
        else:
            lines.append(line)
    code = SAMPLER_HEAD.format(imports=imports) + "\n".join(lines) + "\nprint(orders, model.weight.tolist())\n"
    return Variant("TL508", name, code, False, unsafe="runs")


TL508_VARIANTS = [
    epochs("module-level", """
        sampler = DistributedSampler(dataset, num_replicas=2, rank=0)
        loader = DataLoader(dataset, batch_size=2, sampler=sampler)
        for epoch in range(3):
            for x, y in loader:
                {step}
        """),
    epochs("qualified-sampler-class", """
        train_sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=2, rank=1)
        train_loader = torch.utils.data.DataLoader(dataset, batch_size=2, sampler=train_sampler)
        for epoch in range(1, 4):
            model.train()
            for x, y in train_loader:
                {step}
        """, imports="import torch.utils.data.distributed\nfrom torch.utils.data import TensorDataset\n"),
    epochs("in-a-main-function", """
        def main(rank=0, world_size=2, epochs=3):
            sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=42)
            loader = DataLoader(dataset, batch_size=2, sampler=sampler, drop_last=True)
            for epoch in range(epochs):
                for step, (x, y) in enumerate(loader):
                    {step}


        main()
        """),
    epochs("epoch-loop-calls-a-train-function", """
        def train_one_epoch(loader, model, optimizer):
            for x, y in loader:
                {step}


        def main():
            train_sampler = DistributedSampler(dataset, num_replicas=2, rank=0)
            train_loader = DataLoader(dataset, batch_size=2, sampler=train_sampler, num_workers=0)
            for epoch in range(3):
                train_one_epoch(train_loader, model, optimizer)


        main()
        """),
    # the sampler is None (or a RandomSampler) on another branch: an unguarded `sampler.set_epoch(epoch)` would
    # raise there, so no fix is offered at all (the finding stays)
    no_fix(epochs("built-under-if-distributed", """
        distributed = True
        sampler = None
        if distributed:
            sampler = DistributedSampler(dataset, num_replicas=2, rank=0)
        loader = DataLoader(dataset, batch_size=2, sampler=sampler, shuffle=(sampler is None))
        for epoch in range(3):
            for x, y in loader:
                {step}
        """)),
    epochs("batch-sampler", """
        sampler = DistributedSampler(dataset, num_replicas=2, rank=0)
        loader = DataLoader(dataset, batch_sampler=BatchSampler(sampler, batch_size=2, drop_last=False))
        for epoch in range(3):
            for x, y in loader:
                {step}
        """, imports="from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset\n"),
    epochs("epoch-loop-opens-with-a-comment", """
        sampler = DistributedSampler(dataset, num_replicas=2, rank=0)
        loader = DataLoader(dataset, batch_size=2, sampler=sampler)
        for ep in range(3):
            # one pass over this rank's shard
            model.train()
            for x, y in loader:
                {step}
        """),
    epochs("positional-replicas-and-rank", """
        sampler = DistributedSampler(dataset, 2, 1)
        loader = DataLoader(dataset, 2, sampler=sampler)
        start_epoch, num_epochs = 0, 3
        for epoch in range(start_epoch, num_epochs):
            for batch in loader:
                x, y = batch
                {step}
        """),
    epochs("in-a-trainer-method", """
        class Trainer:
            def __init__(self, epochs=3):
                self.epochs = epochs

            def run(self, rank, world_size):
                sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
                loader = DataLoader(dataset, batch_size=2, sampler=sampler)
                for epoch in range(self.epochs):
                    for x, y in loader:
                        {step}


        Trainer().run(0, 2)
        """),
    epochs("aliased-import-and-a-loss-total", """
        sampler = DS(dataset, num_replicas=2, rank=0, drop_last=True)
        loader = DataLoader(dataset, batch_size=2, sampler=sampler)
        for epoch in range(3):
            total = 0.0
            for x, y in loader:
                {step}
                total += 1
        """, imports="from torch.utils.data import DataLoader, TensorDataset\nfrom torch.utils.data.distributed import DistributedSampler as DS\n"),
    epochs("epoch-loop-in-a-train-function-with-rank-and-world", """
        def train(rank, world_size, num_epochs=3):
            sampler = DistributedSampler(
                dataset,
                num_replicas=world_size,  # no process group: given by hand
                rank=rank,
            )
            loader = DataLoader(dataset, batch_size=2, sampler=sampler)
            for epoch in range(num_epochs):
                for x, y in loader:
                    {step}


        if __name__ == "__main__":
            train(0, 2)
        """),
]

UNSAFE_FIX_VARIANTS = [*TL504_VARIANTS, *TL505_VARIANTS, *TL506_VARIANTS, *TL508_VARIANTS]
