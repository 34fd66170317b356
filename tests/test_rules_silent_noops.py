"""Code that runs without an error and does nothing: a misspelled freeze (TL504), clipping after the
step has used the gradients (TL205), and probabilities passed to a loss that expects logits (TL509)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import lines, lint
from trainlint.diagnostics import Applicability
from trainlint.fixes import apply_fixes


def fixed(code: str, rule: str) -> str:
    """The snippet with every fix `rule` offers applied."""
    source = textwrap.dedent(code)
    found = [d for d in lint(source, rule) if d.code == rule and d.fix is not None]
    assert found, "the rule offers a fix"
    assert all(d.fix.applicability is Applicability.UNSAFE for d in found)
    return apply_fixes(source, found)[0]


# -- TL504 freeze-flag-misspelled -------------------------------------------------------------------


def test_typo_on_named_parameters_loop_variable_is_flagged_and_fixed():
    code = """\
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    for name, p in model.named_parameters():
        if name.startswith("0."):
            p.require_grad = False
    """
    assert lines(code, "TL504") == [5]
    assert "p.requires_grad = False" in fixed(code, "TL504")


def test_both_misspellings_on_parameters_are_flagged():
    code = """\
    import torch
    net = torch.nn.Linear(4, 2)
    for p in net.parameters():
        p.requires_grads = False
    for p in filter(lambda q: q.ndim > 1, net.parameters()):
        p.require_grads = False
    """
    assert lines(code, "TL504") == [4, 6]


def test_correct_flag_and_method_are_not_flagged():
    code = """\
    import torch
    net = torch.nn.Linear(4, 2)
    for p in net.parameters():
        p.requires_grad = False
    net.requires_grad_(False)
    net.weight.requires_grad = True
    """
    assert lines(code, "TL504") == []


def test_requires_grad_on_a_parameter_built_with_nn_parameter_is_right():
    code = """\
    import torch
    import torch.nn as nn
    w = nn.Parameter(torch.zeros(3, 3))
    w.requires_grad = False
    """
    assert lines(code, "TL504") == []


def test_module_flag_on_a_submodule_of_a_local_class_is_flagged_and_fixed():
    code = """\
    import torch.nn as nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Linear(4, 4)
            self.head = nn.Linear(4, 2)

    net = Net()
    net.encoder.requires_grad = False
    """
    assert lines(code, "TL504") == [9]
    assert "net.encoder.requires_grad_(False)" in fixed(code, "TL504")


def test_module_flag_on_a_class_with_its_own_flag_is_not_flagged():
    code = """\
    import torch.nn as nn
    class Adapter(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)
            self.requires_grad = True
        def forward(self, x):
            return self.proj(x) if self.requires_grad else self.proj(x).detach()

    adapter = Adapter()
    adapter.requires_grad = False
    """
    assert lines(code, "TL504") == []


def test_module_flag_on_a_class_with_an_unseen_base_is_not_flagged():
    code = """\
    from mylib import BaseModel
    class Net(BaseModel):
        pass

    net = Net()
    net.requires_grad = False
    """
    assert lines(code, "TL504") == []


def test_unknown_receivers_are_not_flagged_by_their_name():
    code = """\
    model = load_model("ckpt.pt")
    model.requires_grad = False
    backbone.requires_grad = False
    """
    assert lines(code, "TL504") == []


def test_pretrained_model_and_torch_module_flags_are_flagged():
    code = """\
    import torch
    from transformers import AutoModel
    text_encoder = AutoModel.from_pretrained("bert-base-uncased")
    text_encoder.requires_grad = False
    head = torch.nn.Linear(768, 2)
    head.requires_grad_ = False
    """
    assert lines(code, "TL504") == [4, 6]
    assert "head.requires_grad_(False)" in fixed(code, "TL504")


def test_submodules_from_modules_iteration_are_flagged():
    code = """\
    import torch.nn as nn
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    for name, m in model.named_modules():
        if isinstance(m, nn.BatchNorm1d):
            m.requires_grad = False
    """
    assert lines(code, "TL504") == [5]


def test_a_custom_flag_read_by_the_module_is_not_a_typo():
    code = """\
    class Options:
        def __init__(self):
            self.require_grad = True

    opts = Options()
    opts.require_grad = False
    for p in params:
        p.require_grad = False
    if opts.require_grad:
        pass
    """
    assert lines(code, "TL504") == []


# -- TL205 clip-after-step --------------------------------------------------------------------------


def test_clip_after_step_under_an_option_is_flagged():
    code = """\
    import torch
    for batch in loader:
        optimizer.zero_grad()
        loss = model(batch)
        loss.backward()
        optimizer.step()
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    """
    found = [d for d in lint(code, "TL205") if d.code == "TL205"]
    assert [d.line for d in found] == [8]
    assert "optimizer.step()" in found[0].message and "optimizer.zero_grad()" in found[0].message


def test_clip_between_backward_and_step_is_right():
    code = """\
    import torch
    for batch in loader:
        optimizer.zero_grad()
        model(batch).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    """
    assert lines(code, "TL205") == []


def test_clip_after_zero_grad_before_backward_is_flagged():
    code = """\
    import torch
    def train_step(model, batch, optimizer):
        optimizer.zero_grad(set_to_none=True)
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
        loss = model(batch)
        loss.backward()
        optimizer.step()
    """
    assert lines(code, "TL205") == [4]


def test_clip_after_step_in_a_step_function_with_zero_grad_at_its_top_is_flagged():
    code = """\
    import torch
    class Trainer:
        def train_step(self, batch):
            self.optimizer.zero_grad()
            loss = self.model(batch)
            loss.backward()
            self.optimizer.step()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
            return loss.detach()
    """
    assert lines(code, "TL205") == [8]


def test_clip_after_step_with_nothing_clearing_the_gradients_is_left_to_tl501():
    code = """\
    import torch
    for batch in loader:
        model(batch).backward()
        optimizer.step()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    """
    assert lines(code, "TL205") == []


def test_clip_in_the_else_branch_of_the_amp_step_is_right():
    code = """\
    import torch
    for batch in loader:
        optimizer.zero_grad()
        loss = model(batch)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
    """
    assert lines(code, "TL205") == []


def test_clip_after_one_optimizer_step_before_another_is_not_flagged():
    code = """\
    import torch
    for x in loader:
        d_opt.zero_grad()
        g_opt.zero_grad()
        (d_loss + g_loss).backward()
        d_opt.step()
        torch.nn.utils.clip_grad_norm_(G.parameters(), 1.0)
        g_opt.step()
    """
    assert lines(code, "TL205") == []


def test_clip_after_an_imported_step_helper_is_flagged(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "steps.py").write_text("def step_and_log(optimizer, loss):\n    optimizer.step()\n    return loss.item()\n")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import torch
        from steps import step_and_log
        for batch in loader:
            optimizer.zero_grad()
            loss = model(batch)
            loss.backward()
            step_and_log(optimizer, loss)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        """))
    found = [d for d in lint(script.read_text(), "TL205", name=str(script)) if d.code == "TL205"]
    assert [d.line for d in found] == [8]


# -- TL509 probabilities-into-logits-loss ------------------------------------------------------------


def test_model_whose_forward_ends_in_softmax_into_cross_entropy_is_flagged():
    code = """\
    import torch.nn as nn
    import torch.nn.functional as F
    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 200)
            self.fc2 = nn.Linear(200, 10)
        def forward(self, x):
            x = F.relu(self.fc1(x))
            x = self.fc2(x)
            return F.softmax(x, dim=1)

    net = MLP()
    loss_func = nn.CrossEntropyLoss()
    for images, labels in loader:
        log_probs = net(images)
        loss = loss_func(log_probs, labels)
        loss.backward()
    """
    assert lines(code, "TL509") == [17]


def test_log_softmax_into_cross_entropy_or_nll_is_right():
    code = """\
    import torch
    import torch.nn.functional as F
    for x, y in loader:
        out = model(x)
        a = F.cross_entropy(F.log_softmax(out, dim=-1), y)
        b = F.nll_loss(out.log_softmax(-1), y)
        c = F.cross_entropy(torch.log(F.softmax(out, dim=-1)), y)
        (a + b + c).backward()
    """
    assert lines(code, "TL509") == []


def test_softmax_method_and_reshape_into_functional_cross_entropy_is_flagged():
    code = """\
    import torch.nn.functional as F
    def loss_fn(model, idx, targets):
        logits = model(idx)
        probs = logits.softmax(dim=-1)
        return F.cross_entropy(probs.view(-1, probs.size(-1)), targets.view(-1))
    """
    assert lines(code, "TL509") == [5]


def test_sigmoid_into_bce_with_logits_is_flagged_and_into_bce_is_right():
    code = """\
    import torch
    import torch.nn as nn
    bce_logits = nn.BCEWithLogitsLoss()
    bce = nn.BCELoss()
    for x, y in loader:
        p = torch.sigmoid(model(x))
        loss = bce_logits(p, y) + bce(p, y)
        loss.backward()
    """
    assert lines(code, "TL509") == [7]


def test_name_bound_to_softmax_on_one_path_only_is_not_flagged():
    code = """\
    import torch.nn.functional as F
    for x, y in loader:
        out = model(x)
        if use_probs:
            out = F.softmax(out, dim=1)
        loss = F.cross_entropy(out, y)
        loss.backward()
    """
    assert lines(code, "TL509") == []


def test_soft_targets_are_not_the_input():
    code = """\
    import torch.nn.functional as F
    for x, y in loader:
        with torch.no_grad():
            target = F.softmax(teacher(x) / 2.0, dim=-1)
        loss = F.cross_entropy(student(x), target)
        loss.backward()
    """
    assert lines(code, "TL509") == []


def test_sequential_ending_in_softmax_held_by_a_class_is_flagged():
    code = """\
    import torch.nn as nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 3), nn.Softmax(dim=1))
        def forward(self, x):
            return self.body(x)

    model = Net()
    criterion = nn.CrossEntropyLoss()
    for x, y in loader:
        criterion(model(x), y).backward()
    """
    assert lines(code, "TL509") == [12]


def test_a_layer_attribute_named_softmax_that_is_not_a_softmax_is_not_flagged():
    code = """\
    import torch.nn as nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.softmax = nn.Linear(4, 3)   # a misleading name: the layer decides
            self.criterion = nn.CrossEntropyLoss()
        def forward(self, x, y):
            return self.criterion(self.softmax(x), y)
    """
    assert lines(code, "TL509") == []


# -- the unsafe fix, run ---------------------------------------------------------------------------

FROZEN_TYPO = """\
import json
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
for name, p in model[0].named_parameters():
    p.require_grad = False
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
before = model[0].weight.detach().clone()
for _ in range(3):
    optimizer.zero_grad()
    model(torch.randn(16, 4)).pow(2).mean().backward()
    optimizer.step()
print(json.dumps({"frozen_moved": bool((model[0].weight != before).any())}))
"""

FROZEN_MODULE = """\
import json
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(torch.tanh(self.encoder(x)))


torch.manual_seed(0)
net = Net()
net.encoder.requires_grad = False
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
before = net.encoder.weight.detach().clone()
head_before = net.head.weight.detach().clone()
for _ in range(3):
    optimizer.zero_grad()
    net(torch.randn(16, 4)).pow(2).mean().backward()
    optimizer.step()
print(json.dumps({"frozen_moved": bool((net.encoder.weight != before).any()), "head_moved": bool((net.head.weight != head_before).any())}))
"""


@pytest.mark.parametrize("script", [FROZEN_TYPO, FROZEN_MODULE], ids=["parameter-typo", "module-flag"])
def test_the_fixed_freeze_keeps_the_layer_unchanged(tmp_path: Path, script: str):
    pytest.importorskip("torch")
    path = tmp_path / "train.py"
    path.write_text(script)

    def run() -> dict:
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert run()["frozen_moved"] is True, "the misspelled freeze lets the layer train"
    args = ("--preview", "--select", "TL504", "--no-cache")
    subprocess.run([sys.executable, "-m", "trainlint", str(path), "--fix", *args], capture_output=True, timeout=300)
    assert path.read_text() == script, "an unsafe fix is not applied by --fix alone"
    subprocess.run([sys.executable, "-m", "trainlint", str(path), "--fix", "--unsafe-fixes", *args], capture_output=True, timeout=300)
    assert path.read_text() != script
    after = run()
    assert after["frozen_moved"] is False, "the fixed freeze keeps the layer's weights"
    assert after.get("head_moved", True) is True, "the rest of the model still trains"
    remaining = subprocess.run([sys.executable, "-m", "trainlint", str(path), "--output-format", "json", *args], capture_output=True, text=True, timeout=300)
    assert "TL504" not in {d["code"] for d in json.loads(remaining.stdout)}


def test_parameter_typo_is_flagged_even_when_the_class_has_a_flag_of_that_name():
    code = """\
    import torch.nn as nn
    from transformers import AutoModel
    class BertRNN(nn.Module):
        def __init__(self, requires_grads=False):
            super().__init__()
            self.requires_grads = requires_grads
            self.bert = AutoModel.from_pretrained("bert-base-uncased")
            if self.requires_grads is False:
                for p in self.bert.parameters():
                    p.requires_grads = False
    """
    assert lines(code, "TL504") == [10]


def test_a_tensor_guessed_from_its_name_is_not_flagged():
    code = """\
    total_loss.require_grad = False
    """
    assert lines(code, "TL504") == []
