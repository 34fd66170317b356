"""`trainlint verify run` checks that optimizer steps update the parameters they hold and that the loss
improves: an lr of 0, an optimizer built over another model's parameters, gradients cleared between
backward and step, and an LM whose loss stays at chance level are each named with the step and the
line; their clean twins are silent. The trend test is tested on its own too."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import messages

pytest.importorskip("torch")

from trainlint.verify.update_health import learning, mann_kendall, sen_slope_interval, update_lines  # noqa: E402


def verify_run(tmp_path: Path, code: str, steps: int = 25, output: str = "json") -> tuple[int, Any]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(code), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", "run", str(script), "--device", "cpu", "--steps", str(steps), "--format", output],
        capture_output=True, text=True, timeout=300,
    )
    return done.returncode, json.loads(done.stdout) if output == "json" else done.stdout


def named(report: dict[str, Any], prefix: str) -> list[str]:
    return [p for p in messages(report) if p.startswith(prefix)]


# -- updates happen ---------------------------------------------------------------------------------

FINE_TUNE = """\
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 4))
    w = torch.randn(32, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr={lr}, momentum=0.9)
    for epoch in range(3):
        for step in range(20):
            x = torch.randn(64, 32)
            y = (x @ w).argmax(1)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def test_an_lr_of_zero_is_named_with_the_line_that_built_the_optimizer(tmp_path: Path):
    code, report = verify_run(tmp_path, FINE_TUNE.format(lr="0.0"))
    assert code == 1
    (problem,) = named(report, "updates")
    assert "SGD param group 0 (6 tensors, 21,252 elements, float32, built at" in problem
    assert "train.py:7 (`optimizer = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)`)" in problem
    assert "was unchanged by all 25 steps (lr=0), from step 1: the learning rate is 0" in problem
    (group,) = report["updates"]["groups"]
    assert group["steps_unchanged"] == 25 and group["ratio_median"] == 0


def test_a_healthy_fine_tune_reports_its_update_ratios_and_learns(tmp_path: Path):
    code, report = verify_run(tmp_path, FINE_TUNE.format(lr="0.05"), steps=40)
    assert code == 0 and report["problems"] == []
    (group,) = report["updates"]["groups"]
    assert group["steps_unchanged"] == 0 and 1e-5 < group["ratio_median"] < 0.1
    assert group["ratio_min"] <= group["ratio_median"] <= group["ratio_max"] and len(group["ratio_per_step"]) == 40
    assert learning(report)["status"] == "improving"
    (line,) = update_lines(report)
    assert line.startswith("SGD group 0: 6 tensors, 21,252 float32 elements, lr 0.05, update/weight median")
    code, text = verify_run(tmp_path, FINE_TUNE.format(lr="0.05"), steps=40, output="text")
    assert "Updates per optimizer step" in text and "Learning: improving: the loss falls (Mann-Kendall p =" in text


GAN = """\
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    netG = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.Tanh())
    netD = nn.Sequential(nn.Linear(32, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam({g_params}.parameters(), lr=2e-4, betas=(0.5, 0.999))
    criterion = nn.BCEWithLogitsLoss()
    for i in range(40):
        real = torch.randn(16, 32) * 0.5 + 1
        noise = torch.randn(16, 16)
        netD.zero_grad()
        fake = netG(noise)
        errD = criterion(netD(real), torch.ones(16, 1)) + criterion(netD(fake.detach()), torch.zeros(16, 1))
        errD.backward()
        optimizerD.step()
        netG.zero_grad()
        errG = criterion(netD(fake), torch.ones(16, 1))
        errG.backward()
        optimizerG.step()
"""


EMA = """\
    import copy

    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    student = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    ema = copy.deepcopy(student)  # the averaged copy used for evaluation
    ema.requires_grad_(False)
    optimizer = torch.optim.SGD({params}.parameters(), lr=0.1)
    for step in range(40):
        x, y = torch.randn(32, 32), torch.randint(0, 10, (32,))
        loss = nn.functional.cross_entropy(student(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for e, s in zip(ema.parameters(), student.parameters()):
                e.mul_(0.99).add_(s, alpha=0.01)
"""


def test_an_optimizer_built_over_another_models_parameters_changes_nothing(tmp_path: Path):
    code, report = verify_run(tmp_path, EMA.format(params="ema"), steps=12)
    assert code == 1
    (problem,) = named(report, "updates")
    assert "SGD param group 0 (4 tensors, 2,762 elements, float32, built at" in problem
    assert "train.py:10 (`optimizer = torch.optim.SGD(ema.parameters(), lr=0.1)`)" in problem
    assert "had no gradient at any of its 12 steps, from step 1, so step() changed nothing: the loss's backward reaches none of them" in problem
    code, report = verify_run(tmp_path, EMA.format(params="student"), steps=12)
    assert code == 0 and report["problems"] == []


def test_a_gan_with_both_optimizers_right_reports_no_update_problem(tmp_path: Path):
    code, report = verify_run(tmp_path, GAN.format(g_params="netG"), steps=12)
    assert code == 0 and report["problems"] == []
    assert [g["optimizer"] for g in report["updates"]["groups"]] == ["Adam", "Adam"]


CLEARED = """\
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(30):
        x = torch.randn(16, 10)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        loss.backward()
        {first}
        {second}
"""


def test_gradients_cleared_between_backward_and_step_are_named_with_the_clearing_line(tmp_path: Path):
    code, report = verify_run(tmp_path, CLEARED.format(first="optimizer.zero_grad()", second="optimizer.step()"))
    assert code == 1
    (problem,) = named(report, "updates")
    assert "AdamW param group 0 (4 tensors, 385 elements, float32, built at" in problem
    assert "had no gradient at any of its 25 steps, from step 1, so step() changed nothing" in problem
    assert "cleared between backward and step by" in problem and "train.py:11 (`optimizer.zero_grad()`)" in problem
    code, report = verify_run(tmp_path, CLEARED.format(first="optimizer.step()", second="optimizer.zero_grad()"))
    assert code == 0 and report["problems"] == []


# -- learning happens -----------------------------------------------------------------------------------

LM = """\
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    ntokens, bptt, batch = 64, 16, 8
    # a corpus with a learnable next-token rule: each token follows from the one before it
    data = torch.zeros(4096, dtype=torch.long)
    for i in range(1, len(data)):
        data[i] = (data[i - 1] * 5 + 3) % ntokens


    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(ntokens, 32)
            self.rnn = nn.GRU(32, 64, batch_first=True)
            self.decoder = nn.Linear(64, ntokens)

        def forward(self, x):
            return self.decoder(self.rnn(self.encoder(x))[0])


    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    criterion = nn.CrossEntropyLoss()
    for step in range(200):
        starts = torch.randint(0, len(data) - bptt - 1, (batch,))
        source = torch.stack([data[s:s + bptt] for s in starts])
        targets = torch.stack([data[s + 1:s + 1 + bptt] for s in {target_starts}])
        output = model(source)
        loss = criterion(output.reshape(-1, ntokens), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_an_lm_whose_targets_do_not_match_its_inputs_stays_at_chance_level(tmp_path: Path):
    # the targets are drawn at other offsets than the inputs: nothing to learn, the loss stays at log(64)
    code, report = verify_run(tmp_path, LM.format(target_starts="starts[torch.randperm(batch)]"), steps=60)
    assert code == 1
    (problem,) = named(report, "learning")
    assert problem.startswith("learning: the loss stays at chance level over 60 steps, from step 1: the last third's median loss")
    assert "at chance level for 64 classes (log 64 = 4.159)" in problem
    assert report["learning"] == {"classes": 64, "loss_function": "cross_entropy"}
    assert named(report, "updates") == []  # the steps do update the parameters


def test_the_same_lm_with_aligned_targets_learns(tmp_path: Path):
    code, report = verify_run(tmp_path, LM.format(target_starts="starts"), steps=60)
    assert code == 0 and report["problems"] == []
    verdict = learning(report)
    assert verdict["status"] == "improving" and verdict["last_third"] < 0.5 * verdict["chance"]


def test_a_short_run_is_too_early_to_tell(tmp_path: Path):
    code, report = verify_run(tmp_path, LM.format(target_starts="starts[torch.randperm(batch)]"), steps=8)
    assert code == 0 and named(report, "learning") == []
    assert learning(report)["status"] == "too early to tell"


# -- the trend test --------------------------------------------------------------------------------------

def _report(values: list[float], **extra: Any) -> dict[str, Any]:
    return {"loss": {"values": values}, "steps": len(values), **extra}


def test_the_trend_test_separates_a_fall_a_flat_loss_and_noise():
    rng = random.Random(0)
    falling = [2.0 * math.exp(-i / 30) + rng.gauss(0, 0.05) for i in range(60)]
    flat = [1.5 + rng.gauss(0, 0.01) for _ in range(60)]
    noisy = [1.5 + rng.gauss(0, 1.0) for _ in range(20)]
    assert mann_kendall(falling)[1] < 1e-6 and learning(_report(falling))["status"] == "improving"
    assert learning(_report(flat))["status"] == "not improving"
    assert learning(_report(flat[:40]))["status"] == "too early to tell"  # a short plateau is not judged
    assert learning(_report(noisy))["status"] == "too early to tell"  # a 2% fall cannot be ruled out
    low, high = sen_slope_interval([float(i) for i in range(30)])
    assert low == high == 1.0
    # a flat loss while the learning rate is warming up is not judged
    warm = {"updates": {"groups": [{"lr_first": 1e-5, "lr_last": 1e-3}]}}
    assert learning(_report(flat, **warm))["status"] == "too early to tell"


SCALED = """\
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    for step in range(30):
        x = torch.randn(8, 16)
        pred = model(x)
        loss = (pred - x.sum(1, keepdim=True)).pow(2).mean(){extra}
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""


def test_a_grad_scaler_that_skips_every_step_is_named_with_its_line(tmp_path: Path):
    # sqrt's gradient at 0 is infinite: every step's gradients are NaN and GradScaler skips them all
    _, report = verify_run(tmp_path, SCALED.format(extra=" + (pred - pred.detach()).pow(2).sqrt().mean()"), steps=10)
    (problem,) = named(report, "updates")
    # the run stops after 10 iterations, though no optimizer step ran: skipped steps count towards --steps
    assert problem.startswith("updates: GradScaler.step skipped all 10 optimizer steps (inf/NaN gradients every time, from step 1)")
    assert report["steps"] == 0 and report["skipped_steps"] == 10 and report["message"].startswith("stopped after 10 iterations: 0 optimizer steps, 10 skipped")
    assert "train.py:14 (`scaler.step(optimizer)`): the parameters were never updated" in problem
    code, report = verify_run(tmp_path, SCALED.format(extra=""), steps=10)
    assert code == 0 and report["problems"] == [] and report["updates"]["scaler"]["skipped"] == 0
