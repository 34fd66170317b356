"""TL505 (functional dropout that ignores eval mode) and TL506 (layers in plain containers): what
they flag on code shaped like real models, the near misses they leave alone, the text of their unsafe
fixes, and, with torch, that the fixed code does what the rule pages say."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import lines, lint
from trainlint.config import Settings
from trainlint.diagnostics import Applicability
from trainlint.fixes import fix_source


def _fixed(code: str, rule: str) -> str:
    """The source after every fix of `rule`, unsafe ones included."""
    settings = Settings(select=(rule,), preview=True)
    return fix_source(textwrap.dedent(code), "model.py", settings, unsafe=True).source


# -- TL505 dropout-ignores-eval-mode ----------------------------------------------------------------

TRANSFORMER_BLOCK = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, dim, p):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.p = p

    def attend(self, q, k, v):
        weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        weights = F.dropout(weights, self.p)
        return weights @ v

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        out = self.proj(self.attend(q, k, v))
        return F.dropout(out, p=self.p, training=self.training)
"""


def test_functional_dropout_in_a_helper_method_of_a_module_is_flagged():
    assert lines(TRANSFORMER_BLOCK, "TL505") == [15]


def test_dropout_given_training_in_any_form_is_not_flagged():
    code = """\
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def forward(self, x, mc=False):
            x = F.dropout(x, 0.1, self.training)                 # positional
            x = F.dropout(x, 0.1, training=self.training and self.use_dropout)
            x = F.dropout(x, 0.1, training=True)                 # Monte Carlo dropout
            x = F.dropout2d(x, 0.1, mc or self.training)
            x = F.alpha_dropout(x, 0.1, self.training)
            x = F.dropout(x, 0.0)                                # p=0 drops nothing
            return x
    """
    assert lines(code, "TL505") == []


def test_dropout_outside_module_methods_is_not_flagged():
    code = """\
    import torch.nn as nn
    import torch.nn.functional as F

    def functional_mlp(x, w1, w2):
        return F.dropout(x @ w1, 0.5) @ w2

    class Augment:                       # not an nn.Module: no self.training
        def __call__(self, x):
            return F.dropout(x, 0.1)

    class Tools(nn.Module):
        @staticmethod
        def noise(x):
            return F.dropout(x, 0.1)
    """
    assert lines(code, "TL505") == []


def test_a_name_does_not_make_a_class_a_module():
    code = """\
    import torch.nn.functional as F

    class DropoutModule:
        def forward(self, x):
            return F.dropout(x, 0.1)
    """
    assert lines(code, "TL505") == []


def test_module_base_resolved_through_local_classes_and_imports():
    code = """\
    import torch
    import torch.nn.functional as F
    import pytorch_lightning as pl

    class Base(torch.nn.Module):
        pass

    class Child(Base):
        def forward(self, x):
            return F.dropout(x, 0.3)

    class Lit(pl.LightningModule):
        def forward(self, x):
            return F.dropout(x, 0.3)
    """
    assert lines(code, "TL505") == [10, 14]


def test_dropout_layer_built_in_forward_is_flagged_and_one_stored_on_self_is_not():
    code = """\
    import torch.nn as nn

    class Head(nn.Module):
        def forward(self, x):
            x = nn.Dropout(0.3)(x)
            drop = nn.Dropout2d(0.1)
            x = drop(x)
            if self.lazy is None:
                self.lazy = nn.Dropout(0.1)   # registered: eval() reaches it
            return self.lazy(x)
    """
    found = [d for d in lint(code, "TL505")]
    assert [d.line for d in found] == [5, 6]
    assert all(d.fix is None for d in found), "no obvious rewrite: the layer belongs in __init__"


def test_dropout_fix_adds_training_keyword_after_the_last_argument():
    fixed = _fixed(TRANSFORMER_BLOCK, "TL505")
    assert "weights = F.dropout(weights, self.p, training=self.training)" in fixed
    assert fixed.count("training=self.training") == 2
    trailing = """\
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def forward(me, x):
            return F.dropout(
                x,
                p=0.1,  # rate
            )
    """
    assert "p=0.1, training=me.training,  # rate" in _fixed(trailing, "TL505")
    assert all(d.fix.applicability is Applicability.UNSAFE for d in lint(trailing, "TL505"))


def test_alpha_dropout_without_training_never_drops_and_is_flagged():
    code = """\
    import torch.nn as nn
    from torch.nn.functional import alpha_dropout, feature_alpha_dropout

    class Snn(nn.Module):
        def forward(self, x):
            return feature_alpha_dropout(alpha_dropout(x, 0.1), 0.1)
    """
    found = lint(code, "TL505")
    assert [d.line for d in found] == [6, 6]
    assert all("never drops" in d.message for d in found)


def test_dropout_in_a_hook_that_runs_only_in_training_is_not_flagged():
    code = """\
    import torch.nn.functional as F
    import pytorch_lightning as pl

    class Lit(pl.LightningModule):
        def training_step(self, batch, batch_idx):
            return F.dropout(self.encoder(batch), 0.1).sum()

        def validation_step(self, batch, batch_idx):
            return F.dropout(self.encoder(batch), 0.1).sum()
    """
    assert lines(code, "TL505") == [9]


# -- TL506 submodules-not-registered ---------------------------------------------------------------


def test_layers_in_plain_containers_are_flagged():
    code = """\
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.fc = nn.Linear(dim, dim)

    class Encoder(nn.Module):
        def __init__(self, dim, depth, tasks):
            super().__init__()
            self.blocks = [Block(dim) for _ in range(depth)]
            self.norms = []
            for _ in range(depth):
                self.norms.append(nn.LayerNorm(dim))
            self.scales = [nn.Parameter(torch.ones(dim)) for _ in range(depth)]
            self.heads = {}
            for task in tasks:
                self.heads[task] = nn.Linear(dim, 1)
    """
    assert lines(code, "TL506") == [12, 13, 16, 17]


def test_near_misses_are_not_flagged():
    code = """\
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self, teacher, n):
            super().__init__()
            self.blocks = [nn.Linear(8, 8) for _ in range(n)]
            self.channels = [16, 32, 64]
            self.names = ["a", "b"]
            self.blocks = nn.ModuleList(self.blocks)          # wrapped two lines later
            self.convs = [nn.Conv2d(3, 3, 3) for _ in range(n)]
            for i, conv in enumerate(self.convs):
                self.add_module(f"conv{i}", conv)
            self.stages = [nn.Linear(8, 8), nn.Linear(8, 8)]
            self.body = nn.Sequential(*self.stages)
            self.teacher = [teacher]                          # kept out of parameters() on purpose
            self.ema = [nn.Linear(8, 8)]
            object.__setattr__(self, "frozen", [nn.Linear(8, 8), nn.Linear(8, 8)])
            self.acts = [nn.ReLU(), nn.GELU(), nn.MaxPool2d(2)]
            self.anchors = [torch.zeros(4), torch.ones(4)]
            self.refs = [self.body, self.blocks]
    """
    assert lines(code, "TL506") == []


def test_layers_registered_through_the_module_s_own_setattr_are_not_flagged():
    # rlkit's `Mlp`: `self.fcs = []`, then each layer `self.__setattr__("fc{}".format(i), fc)` and appended;
    # near miss: `object.__setattr__` bypasses the module's registration, so those layers are lost
    code = """
    import torch.nn as nn

    class Mlp(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.fcs = []
            for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
                fc = nn.Linear(a, b)
                self.__setattr__("fc{}".format(i), fc)
                self.fcs.append(fc)
    """
    assert lines(code, "TL506") == []
    assert lines(code.replace('self.__setattr__("fc{}".format(i), fc)', 'object.__setattr__(self, "fc{}".format(i), fc)'), "TL506") == [7]


def test_blocks_that_hold_no_state_and_layers_a_helper_registers_are_not_flagged():
    # a moving-average block around an `AvgPool1d` (Time-Series-Library's decomposition), and layers
    # whose parameters a method of the class registers one by one (pytorch_RVAE's `_add_to_parameters`)
    code = """\
    import torch
    import torch.nn as nn

    class MovingAverage(nn.Module):
        def __init__(self, kernel_size, stride):
            super(MovingAverage, self).__init__()
            self.kernel_size = kernel_size
            self.avg = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=0)

        def forward(self, x):
            front = x[:, 0:1, :].repeat(1, (self.kernel_size - 1) // 2, 1)
            return self.avg(torch.cat([front, x], dim=1).permute(0, 2, 1)).permute(0, 2, 1)

    class Decomposition(nn.Module):
        def __init__(self, kernel_size):
            super(Decomposition, self).__init__()
            self.moving_avg = MovingAverage(kernel_size, stride=1)

    class MultiDecomposition(nn.Module):
        def __init__(self, kernel_size):
            super(MultiDecomposition, self).__init__()
            self.decompositions = [Decomposition(kernel) for kernel in kernel_size]

    class Highway(nn.Module):
        def __init__(self, size, num_layers):
            super(Highway, self).__init__()
            self.gate = [nn.Linear(size, size) for _ in range(num_layers)]
            for i, module in enumerate(self.gate):
                self._add_to_parameters(module.parameters(), "gate_module_{}".format(i))

        def _add_to_parameters(self, parameters, name):
            for i, parameter in enumerate(parameters):
                self.register_parameter(name="{}-{}".format(name, i), param=parameter)
    """
    assert lines(code, "TL506") == []


def test_blocks_with_state_or_a_module_argument_and_helpers_that_register_nothing_are_flagged():
    code = """\
    import torch.nn as nn

    class Pooled(nn.Module):
        def __init__(self, kernel_size, act):
            super().__init__()
            self.pool = nn.AvgPool1d(kernel_size)
            self.act = act                                     # a module handed in: may have parameters

        def forward(self, x):
            return self.act(self.pool(x))

    class Dropped(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.1)                        # switched by train()/eval()

    class Derived(Dropped):
        pass

    class Multi(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.pools = [Pooled(k, nn.PReLU()) for k in sizes]
            self.drops = [Dropped() for _ in sizes]
            self.derived = [Derived() for _ in sizes]
            self.gates = [nn.Linear(4, 4) for _ in sizes]
            for gate in self.gates:
                self._note(gate)

        def _note(self, layer):
            print(layer)
    """
    assert lines(code, "TL506") == [23, 24, 25, 26]


def test_hand_managed_parameters_are_not_flagged_but_a_device_override_is():
    code = """\
    import torch.nn as nn

    class Managed(nn.Module):
        def __init__(self):
            super().__init__()
            self.cells = [nn.LSTMCell(4, 4), nn.LSTMCell(4, 4)]

        def parameters(self, recurse=True):
            for cell in self.cells:
                yield from cell.parameters()

    class MovedOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.cells = [nn.LSTMCell(4, 4), nn.LSTMCell(4, 4)]

        def cuda(self):
            super().cuda()
            for cell in self.cells:
                cell.cuda()
    """
    assert lines(code, "TL506") == [15]


def test_classes_that_are_not_modules_are_not_flagged():
    code = """\
    import torch.nn as nn
    from torch.utils.data import Dataset

    class Pairs(Dataset):
        def __init__(self):
            self.encoders = [nn.Linear(4, 4), nn.Linear(4, 4)]

    class ModelZoo:                      # a plain object: nothing to register into
        def __init__(self):
            self.models = [nn.Linear(4, 4) for _ in range(3)]
    """
    assert lines(code, "TL506") == []


def test_fix_wraps_in_the_container_for_what_is_held_with_the_modules_own_alias():
    code = """\
    import torch as T

    class Net(T.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.layers = [T.nn.Linear(4, 4) for _ in range(n)]
            self.gains = [T.nn.Parameter(T.ones(4)), T.nn.Parameter(T.ones(4))]
            self.heads = {"cls": T.nn.Linear(4, 2), "box": T.nn.Linear(4, 4)}
            self.extra = []
            self.extra.append(T.nn.Linear(4, 4))
            self.by_id = {i: T.nn.Linear(4, 4) for i in range(n)}
            self.mixed = [T.nn.Linear(4, 4), T.nn.Parameter(T.ones(4))]
    """
    fixed = _fixed(code, "TL506")
    assert "self.layers = T.nn.ModuleList([T.nn.Linear(4, 4) for _ in range(n)])" in fixed
    assert "self.gains = T.nn.ParameterList([T.nn.Parameter(T.ones(4)), T.nn.Parameter(T.ones(4))])" in fixed
    assert 'self.heads = T.nn.ModuleDict({"cls": T.nn.Linear(4, 2), "box": T.nn.Linear(4, 4)})' in fixed
    assert "self.extra = T.nn.ModuleList()" in fixed
    # int keys (ModuleDict takes strings only) and a mix of layers and parameters: flagged, no fix
    assert "self.by_id = {i: T.nn.Linear(4, 4) for i in range(n)}" in fixed
    assert "self.mixed = [T.nn.Linear(4, 4), T.nn.Parameter(T.ones(4))]" in fixed
    found = lint(code, "TL506")
    assert len(found) == 6
    assert all(d.fix is None or d.fix.applicability is Applicability.UNSAFE for d in found)


def test_a_module_class_of_another_project_module_counts(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "blocks.py").write_text("import torch.nn as nn\n\nclass Block(nn.Module):\n    pass\n\nclass Config:\n    pass\n")
    model = tmp_path / "model.py"
    model.write_text(textwrap.dedent("""\
        import torch.nn as nn
        from blocks import Block, Config

        class Net(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.blocks = [Block() for _ in range(n)]
                self.configs = [Config() for _ in range(n)]
        """))
    run = subprocess.run(
        [sys.executable, "-m", "trainlint", "--preview", "--select", "TL506", "--output-format", "json", "--no-cache", str(model)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert [d["line"] for d in json.loads(run.stdout)] == [7], run.stderr


# -- the fixes, run ----------------------------------------------------------------------------------

DROPOUT_SCRIPT = """\
import json
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.dropout(F.relu(self.fc1(x)), p=0.5))


model = Classifier()
x = torch.randn(8, 16)
model.eval()
with torch.no_grad():
    first, second = model(x), model(x)
model.train()
print(json.dumps({"eval_outputs_agree": torch.equal(first, second), "train_outputs_differ": not torch.equal(model(x), model(x))}))
"""

REGISTRATION_SCRIPT = """\
import json
import torch
import torch.nn as nn

torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = [nn.Linear(width, width) for _ in range(depth)]
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.out(x)


model = MLP(8, 3)
before = [layer.weight.detach().clone() for layer in model.layers]
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    optimizer.zero_grad()
    model(torch.randn(16, 8)).pow(2).mean().backward()
    optimizer.step()
moved = [not torch.equal(b, layer.weight) for b, layer in zip(before, model.layers)]
print(json.dumps({
    "parameters": sum(p.numel() for p in model.parameters()),
    "state_dict_keys": len(model.state_dict()),
    "hidden_layers_trained": all(moved),
}))
"""


def _run(path: Path) -> dict:
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _fix_with_cli(path: Path, rule: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "trainlint", str(path), "--preview", "--select", rule, "--fix", "--unsafe-fixes", "--no-cache"],
        capture_output=True, text=True, timeout=300, check=False,
    )


def test_dropout_fix_makes_two_eval_forwards_agree(tmp_path: Path):
    pytest.importorskip("torch")
    script = tmp_path / "model.py"
    script.write_text(DROPOUT_SCRIPT)
    assert [d.line for d in lint(DROPOUT_SCRIPT, "TL505")] == [16]
    before = _run(script)
    assert before == {"eval_outputs_agree": False, "train_outputs_differ": True}, "eval mode left dropout on"
    _fix_with_cli(script, "TL505")
    assert "training=self.training" in script.read_text()
    after = _run(script)
    assert after == {"eval_outputs_agree": True, "train_outputs_differ": True}, "off in eval, still on in training"


def test_module_list_fix_registers_the_layers_so_they_train_and_are_saved(tmp_path: Path):
    pytest.importorskip("torch")
    script = tmp_path / "model.py"
    script.write_text(REGISTRATION_SCRIPT)
    before = _run(script)
    assert before == {"parameters": 9, "state_dict_keys": 2, "hidden_layers_trained": False}
    _fix_with_cli(script, "TL506")
    assert "nn.ModuleList(" in script.read_text()
    after = _run(script)
    # three 8x8 layers with biases join the 9 parameters of `out`; each adds a weight and a bias key
    assert after == {"parameters": 9 + 3 * 72, "state_dict_keys": 2 + 3 * 2, "hidden_layers_trained": True}

