"""`trainlint verify run` checks what trains and whether evaluation is deterministic on the script's own
run: each violation named with its numbers, step and cause line, its clean twin silent, deliberate
patterns (a linear probe, LoRA adapters, MC dropout) shown as information. The measurements themselves
(`trainlint.verify.invariants`) are tested directly too."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import messages

torch = pytest.importorskip("torch")

from trainlint.verify.invariant_health import unchanged_parameters  # noqa: E402
from trainlint.verify.invariants import eval_forward_determinism, trainable_parameters  # noqa: E402

SCRIPTS = Path(__file__).resolve().parent / "fixtures" / "scripts"


def verify_run(script: Path, *script_args: str, steps: int = 6, output: str = "json") -> tuple[int, Any]:
    done = _run(script, *script_args, steps=steps, output=output)
    return done.returncode, json.loads(done.stdout) if output == "json" else done.stdout


def _run(script: Path, *script_args: str, steps: int, output: str = "json") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", "run", str(script), "--device", "cpu", "--steps", str(steps), "--format", output, "--", *script_args],
        capture_output=True, text=True, timeout=300,
    )


def information(report: dict[str, Any]) -> list[str]:
    return [i["message"] for i in report["information"]]


# -- what trains ------------------------------------------------------------------------------

def test_a_name_filter_that_leaves_only_batch_norms_trainable_is_a_problem_with_its_line():
    code, report = verify_run(SCRIPTS / "transfer_learning_style.py", "--freeze", "bn-filter")
    assert code == 1
    (problem,) = [p for p in messages(report) if p.startswith("what trains")]
    assert "only 0.8% of the parameters train (576 of 75,498 elements, in BatchNorm2d x18) from step 1" in problem
    assert "transfer_learning_style.py:52 (`p.requires_grad = False`) for 11 tensors" in problem
    trains = report["what_trains"]
    assert trains["pattern"] is None and trains["by_status"]["requires_grad=False"] == 74_922
    assert trains["freeze_sites"][0]["line"] == 52 and trains["first_step"] == 1
    reasons = {r["name"]: r["reason"] for r in unchanged_parameters(report)}
    assert reasons["fc.weight"] == "requires_grad=False" and len(reasons) == 11


def test_a_linear_probe_over_a_frozen_backbone_is_information():
    code, report = verify_run(SCRIPTS / "transfer_learning_style.py", "--freeze", "backbone")
    assert code == 0, report["problems"]
    assert report["problems"] == [] and report["what_trains"]["pattern"] == "head"
    (line,) = [i for i in information(report) if i.startswith("what trains")]
    assert "0.4% of the parameters train (330 of 75,498 elements): the model's last layers, a deliberate pattern" in line
    # every parameter that did not change is listed, each with its reason
    assert len(unchanged_parameters(report)) == 27


def test_full_fine_tuning_reports_nothing_frozen():
    code, report = verify_run(SCRIPTS / "transfer_learning_style.py", "--freeze", "none")
    assert code == 0 and report["problems"] == [] and information(report) == []
    assert report["what_trains"]["share_trained"] == 1.0 and unchanged_parameters(report) == []


def test_lora_adapters_beside_a_frozen_lm_are_information_not_a_problem():
    code, report = verify_run(SCRIPTS / "lora_lm_style.py", steps=5)
    assert code == 0, report["problems"]
    trains = report["what_trains"]
    assert trains["pattern"] == "low-rank adapters" and trains["trained"] == 2048
    assert any("low-rank adapters beside frozen weights, a deliberate pattern" in i for i in information(report))
    code, report = verify_run(SCRIPTS / "lora_lm_style.py", "--adapters", "none", steps=5)
    assert code == 0 and report["what_trains"]["pattern"] == "all" and information(report) == []


HEAD_REPLACED = """\
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 100))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model[2] = nn.Linear(64, {classes})  # the new task's head
    for step in range(20):
        x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_head_replaced_after_the_optimizer_was_built_gets_gradients_but_never_trains(tmp_path: Path):
    script = tmp_path / "head.py"
    script.write_text(textwrap.dedent(HEAD_REPLACED.format(classes=10)), encoding="utf-8")
    code, report = verify_run(script)
    assert code == 1
    (problem,) = [p for p in messages(report) if p.startswith("what trains")]
    assert "2 parameter tensors (650 elements, 23.5% of the model) receive gradients but no optimizer that stepped holds them" in problem
    assert "2.weight, 2.bias" in problem
    reasons = {r["name"]: r["reason"] for r in unchanged_parameters(report)}
    assert reasons == {"2.weight": "not in an optimizer", "2.bias": "not in an optimizer"}


# -- evaluation is deterministic ----------------------------------------------------------------

def test_functional_dropout_without_training_flag_is_named_with_its_line_and_evidence():
    done = _run(SCRIPTS / "dropout_classifier_style.py", "--dropout", "functional", "--steps", "10", steps=10)
    code, report = done.returncode, json.loads(done.stdout)
    assert code == 1
    (problem,) = [p for p in messages(report) if p.startswith("evaluation")]
    assert "`dropout` runs in training behaviour inside eval-mode `Classifier`" in problem
    assert "switched to eval at " in problem and ":32 (`model.eval()`)" in problem
    assert ":22 (`h = F.dropout(h, self.p)`): 2 calls from the evaluation after step 4" in problem
    assert "two forwards of the same batch differ by up to" in problem and "pass `training=self.training`" in problem
    measured = report["eval_behaviour"]["measured"]
    assert measured["deterministic"] is False and measured["max_abs_diff"] > 0
    # the repeated forward leaves the script's randomness as it was: its validation losses are a plain run's
    plain = subprocess.run([sys.executable, str(SCRIPTS / "dropout_classifier_style.py"), "--dropout", "functional", "--steps", "10"],
                           capture_output=True, text=True, timeout=120, check=True)
    val = [line for line in done.stderr.splitlines() if "val loss" in line]
    assert len(val) == 2 and val == plain.stdout.splitlines()[:2]


@pytest.mark.parametrize("dropout, informed", [("gated", False), ("mc", True)])
def test_gated_dropout_is_clean_and_mc_dropout_is_information(dropout: str, informed: bool):
    code, report = verify_run(SCRIPTS / "dropout_classifier_style.py", "--dropout", dropout, steps=10)
    assert code == 0 and report["problems"] == []
    lines = [i for i in information(report) if i.startswith("evaluation")]
    assert bool(lines) == informed
    if informed:
        assert "on purpose (`training=True` in the call, e.g. MC dropout)" in lines[0]


CONDITIONAL_BN_GAN = """\
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class ConditionalBatchNorm2d(nn.Module):
        def __init__(self, channels, classes):
            super().__init__()
            self.bn = nn.BatchNorm2d(channels, affine=False{tracking})
            self.embed = nn.Embedding(classes, channels * 2)
            self.use_batch_stats = True

        def forward(self, x, y):
            out = F.batch_norm(x, self.bn.running_mean, self.bn.running_var, training={training})
            gamma, beta = self.embed(y).chunk(2, 1)
            return gamma[:, :, None, None] * out + beta[:, :, None, None]


    class Generator(nn.Module):
        def __init__(self, nz=16, classes=4):
            super().__init__()
            self.fc = nn.Linear(nz, 32 * 4 * 4)
            self.cbn = ConditionalBatchNorm2d(32, classes)
            self.conv = nn.Conv2d(32, 3, 3, padding=1)

        def forward(self, z, y):
            h = self.fc(z).view(-1, 32, 4, 4)
            return torch.tanh(self.conv(F.relu(self.cbn(h, y))))


    torch.manual_seed(0)
    netG, netD = Generator(), nn.Sequential(nn.Flatten(), nn.Linear(3 * 16, 1))
    optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    fixed_z, fixed_y = torch.randn(8, 16), torch.arange(8) % 4
    for step in range(40):
        real, z, y = torch.randn(16, 3, 4, 4), torch.randn(16, 16), torch.randint(0, 4, (16,))
        fake = netG(z, y)
        lossD = F.softplus(-netD(real)).mean() + F.softplus(netD(fake.detach())).mean()
        optD.zero_grad(); lossD.backward(); optD.step()
        lossG = F.softplus(-netD(fake)).mean()
        optG.zero_grad(); lossG.backward(); optG.step()
        if step % 5 == 4:
            netG.eval()
            with torch.no_grad():
                samples = netG(fixed_z, fixed_y)
            netG.train()
"""


@pytest.mark.parametrize("training, tracking, problem", [
    ("self.use_batch_stats", "", True),  # batch statistics, and the running ones updated, under eval
    ("self.training", "", False),
    ("self.use_batch_stats", ", track_running_stats=False", False),  # batch statistics by design
])
def test_batch_norm_updating_running_statistics_in_eval_is_a_problem(tmp_path: Path, training: str, tracking: str, problem: bool):
    script = tmp_path / "cgan.py"
    script.write_text(textwrap.dedent(CONDITIONAL_BN_GAN.format(training=training, tracking=tracking)), encoding="utf-8")
    code, report = verify_run(script, steps=12)
    found = [p for p in messages(report) if "BatchNorm running statistics change in eval" in p]
    assert bool(found) == problem, report["problems"]
    assert code == (1 if problem else 0), report["problems"]
    if problem:
        assert "`cbn` (ConditionalBatchNorm2d)" in found[0] and "(`netG.eval()`)" in found[0]
        assert "F.batch_norm(x, self.bn.running_mean" in found[0] and "after step 5" in found[0]
        assert "2 buffers changed by two forwards (cbn.bn.running_mean, cbn.bn.running_var)" in found[0]
    # both models of the GAN train in full
    assert report["what_trains"]["share_trained"] == 1.0


# -- the measurements, as a probe calls them ------------------------------------------------------

def test_trainable_parameters_counts_each_reason_and_recognises_patterns():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2), torch.nn.Linear(2, 2))
    model[0].weight.requires_grad_(False)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad][:-2], lr=0.1)
    model(torch.randn(4, 8)).sum().backward()
    report = trainable_parameters(model, [optimizer])
    status = {r["name"]: r["status"] for r in report["parameters"]}
    assert status == {
        "0.weight": "requires_grad=False", "0.bias": "trains", "1.weight": "trains", "1.bias": "trains", "2.weight": "trains",
        "2.bias": "trains", "3.weight": "not in an optimizer", "3.bias": "not in an optimizer",
    }
    assert report["total"] == 64 + 8 + 16 + 16 + 2 + 4 + 2
    # the trainable part is not the last layers (0.bias trains beside a frozen weight), nor a low-rank pair
    assert report["pattern"] is None
    model[0].bias.requires_grad_(False)
    assert trainable_parameters(model, [optimizer])["pattern"] == "head"


def test_a_low_rank_pair_beside_a_frozen_weight_is_an_adapter():
    base = torch.nn.Linear(32, 48)
    base.requires_grad_(False)
    a, b = torch.nn.Parameter(torch.randn(4, 32)), torch.nn.Parameter(torch.zeros(48, 4))
    holder = torch.nn.Module()
    holder.base, holder.a, holder.b = base, a, b
    holder.head = torch.nn.Linear(48, 2)
    holder.head.requires_grad_(False)  # the pattern, not the position, makes it an adapter
    report = trainable_parameters(holder, [torch.optim.SGD([a, b], lr=0.1)], grads_seen={id(a), id(b)})
    assert report["pattern"] == "low-rank adapters" and report["trained"] == 4 * 32 + 48 * 4


def test_eval_forward_determinism_restores_what_it_touched():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.bn = torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)

        def forward(self, x):
            return torch.nn.functional.dropout(self.bn(self.fc(x)), 0.5)

    net = Net()
    x = torch.randn(8, 4)
    state = torch.random.get_rng_state()
    result = eval_forward_determinism(net, (x,))
    assert result["deterministic"] is False and result["max_abs_diff"] > 0 and result["buffers_changed"] == []
    assert net.training and torch.equal(torch.random.get_rng_state(), state)
    net.bn.train()  # a BatchNorm left in training mode: the module stays in eval otherwise
    net.eval()
    net.bn.train()
    before = net.bn.running_mean.clone()
    result = eval_forward_determinism(net, (x,), switch_to_eval=False)
    assert result["buffers_changed"] == ["bn.running_mean", "bn.running_var"]
    assert torch.equal(net.bn.running_mean, before) and net.bn.training and not net.training
