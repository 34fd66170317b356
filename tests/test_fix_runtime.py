"""Every safe fix, run: the fixed training script still trains and computes the same numbers.

Each script trains a tiny model on the CPU for a few steps and prints its losses; `--fix` (safe
fixes only) is applied to a copy and both are run with torch. A fix that is not provably harmless
(TL302's `.detach()` on a value that is differentiated later) must not be offered as safe.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainlint.diagnostics import Applicability
from trainlint.rules import ALL_RULES
from tests.helpers import lint

pytest.importorskip("torch")

SETUP = """\
import torch

torch.manual_seed(0)
device = "cpu"
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = [torch.randn(16, 4) for _ in range(6)]
"""

SCRIPTS = {
    # TL406: a deterministic factory moved to the device every step
    "TL406": SETUP + """
losses = []
for x in loader:
    optimizer.zero_grad()
    scale = torch.full((4,), 0.5).to(device)
    loss = model(x * scale).pow(2).mean()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print(json.dumps(losses))
""",
    # TL302: a running loss total that keeps every step's graph, only ever read as a number
    "TL302": SETUP + """
total = 0.0
losses = []
for x in loader:
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    total += loss
    losses.append(loss.item())
print(json.dumps(losses + [total.item()]))
""",
}

# the repro: the stored loss is backpropagated later in the step through another name
STORED_AND_BACKPROPAGATED = SETUP + """
class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.opt = model, optimizer

    def train_step(self, x):
        self.opt.zero_grad()
        self.loss = self.model(x).pow(2).mean()
        total = self.loss * 1.0
        total.backward()
        self.opt.step()


trainer = Trainer(model, optimizer)
for x in loader:
    trainer.train_step(x)
print(json.dumps([trainer.loss.item()]))
"""


def _run_script(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)


def _trainlint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainlint", *args], capture_output=True, text=True, timeout=300)


def _write(path: Path, code: str) -> Path:
    path.write_text("import json\n" + code)
    return path


@pytest.mark.parametrize("code", sorted(SCRIPTS))
def test_safe_fix_keeps_training_and_its_numbers(tmp_path: Path, code: str):
    script = _write(tmp_path / "train.py", SCRIPTS[code])
    assert any(d.code == code and d.fix is not None for d in lint(script.read_text())), "the script shows the finding"
    before = _run_script(script)
    assert before.returncode == 0, before.stderr
    fixed = _trainlint(str(script), "--fix")  # every safe fix of every default rule
    assert "Fixed" in fixed.stderr, fixed.stderr
    remaining = json.loads(_trainlint(str(script), "--format", "json").stdout)
    assert code not in {d["code"] for d in remaining}, "the fix removed the finding"
    after = _run_script(script)
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout) == json.loads(before.stdout)


def test_detach_is_not_safe_when_the_stored_loss_is_backpropagated_later(tmp_path: Path):
    script = _write(tmp_path / "train.py", STORED_AND_BACKPROPAGATED)
    found = [d for d in lint(script.read_text(), "TL302") if d.fix is not None]
    assert all(d.fix.applicability is Applicability.UNSAFE for d in found)
    original = script.read_text()
    _trainlint(str(script), "--fix")
    assert script.read_text() == original
    assert _run_script(script).returncode == 0, "still trains after --fix"
    if found:  # and the unsafe fix, applied on request, is indeed what breaks backward()
        _trainlint(str(script), "--fix", "--unsafe-fixes", "--select", "TL302")
        broken = _run_script(script)
        assert broken.returncode != 0 and "does not require grad" in broken.stderr


def test_detach_is_not_safe_when_a_helper_in_another_module_backpropagates_the_total(tmp_path: Path):
    (tmp_path / "helpers.py").write_text("def backprop_running(total):\n    total.backward(retain_graph=True)\n")
    script = _write(tmp_path / "train.py", """\
import torch
from helpers import backprop_running

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)  # (one layer: its weight is not saved for backward, so stepping between is fine)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
total = 0.0
for x in [torch.randn(8, 4) for _ in range(4)]:
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    total += loss
    backprop_running(total)
    optimizer.step()
print(json.dumps([total.item()]))
""")
    found = [d for d in lint(script.read_text(), "TL302", name=str(script)) if d.fix is not None]
    assert found and all(d.fix.applicability is Applicability.UNSAFE for d in found)
    original = script.read_text()
    _trainlint(str(script), "--fix")
    assert script.read_text() == original
    assert _run_script(script).returncode == 0, "still trains after --fix"
    _trainlint(str(script), "--fix", "--unsafe-fixes", "--select", "TL302")
    assert "does not require grad" in _run_script(script).stderr, "the unsafe fix is what breaks it"


def test_every_safe_fix_in_the_catalogue_has_a_runtime_test():
    safe = set()
    for rule in ALL_RULES:
        for example in (*rule.invalid, rule.example):
            if example:
                safe |= {d.code for d in lint(textwrap.dedent(example), rule.code)
                         if d.fix is not None and d.fix.applicability is Applicability.SAFE}
    assert safe <= set(SCRIPTS), f"add a runtime test for the safe fixes of {sorted(safe - set(SCRIPTS))}"


def test_detach_of_a_loss_term_known_only_by_its_use_is_not_safe() -> None:
    # `loss_r` is a term of the backpropagated loss, computed by a criterion of an unseen class: it
    # carries the graph when it is a tensor, but it may be a number, which has no `.detach()`
    code = """
    class Trainer:
        def train(self):
            rain_total = 0
            for lr, hr in self.loader:
                derained, rain = self.model(lr)
                loss_r = self.loss(rain, lr - hr)
                loss = self.loss(derained, hr) + 0.9 * loss_r
                rain_total = rain_total + loss_r
                loss.backward()
                self.optimizer.step()
    """
    found = [d for d in lint(code, "TL302") if d.fix is not None]
    assert [d.line for d in found] == [9]
    assert all(d.fix.applicability is Applicability.UNSAFE for d in found)
