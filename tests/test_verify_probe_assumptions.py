"""A probe says where its values come from: a learning rate the script reads from its command line is
taken from the arguments given after `--`, else from the option's default, else assumed and said so."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import lint
from trainlint.verify.runner import with_learning_rate

SCRIPT = """\
    import argparse
    import torch
    from torch import nn

    parser = argparse.ArgumentParser()
    parser.add_argument("--learning-rate", "--lr", type=float{default})
    args = parser.parse_args()
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)).to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    for step in range(10):
        loss = model(torch.randn(4, 8, dtype=torch.bfloat16)).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def test_the_finding_records_the_option_that_sets_the_learning_rate_and_its_default():
    (finding,) = lint(SCRIPT.format(default=", default=3e-4"), select="TL101")
    assert finding.facts == {
        "dtype": "bfloat16", "optimizer": "AdamW", "lr_expression": "args.learning_rate",
        "lr_options": ["--learning-rate", "--lr"], "lr_default": 3e-4,
    }
    (finding,) = lint(SCRIPT.format(default="").replace("lr=args.learning_rate", "lr=1e-2"), select="TL101")
    assert finding.facts["lr"] == 1e-2 and "lr_expression" not in finding.facts


@pytest.mark.parametrize("args, lr, said", [
    (["--lr", "0.01"], 0.01, "the command line: --lr 0.01"),
    (["--epochs", "3", "--learning-rate=2e-5"], 2e-5, "the command line: --learning-rate 2e-05"),
    ([], 3e-4, "the default of --learning-rate, not given after `--`"),
])
def test_the_learning_rate_comes_from_the_script_s_arguments_or_its_default(args, lr, said):
    facts = {"optimizer": "AdamW", "lr_expression": "args.learning_rate", "lr_options": ["--learning-rate", "--lr"], "lr_default": 3e-4}
    assert with_learning_rate(facts, args) == {**facts, "lr": lr, "lr_from": said}


def test_an_unknown_learning_rate_is_assumed_and_said_so_and_a_literal_is_the_script_s():
    facts = {"optimizer": "AdamW", "lr_expression": "config.optim.lr"}
    assumed = with_learning_rate(facts, [])
    assert "lr" not in assumed and assumed["lr_from"].startswith("assumed: the script's lr is `config.optim.lr`, unknown before it runs")
    assert with_learning_rate({"optimizer": "AdamW"}, [])["lr_from"] == "AdamW's default"
    assert with_learning_rate({"optimizer": "AdamW", "lr": 1e-3}, ["--lr", "5"]) == {"optimizer": "AdamW", "lr": 1e-3}


def test_the_probe_reports_the_learning_rate_it_used_and_where_it_came_from(tmp_path: Path):
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT.format(default=", default=3e-4")), encoding="utf-8")
    command = [sys.executable, "-m", "trainlint", "verify", str(script), "--device", "cpu"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert "confirmed on cpu" in done.stdout and "AdamW lr=0.0003 (the default of --learning-rate, not given after `--`)" in done.stdout
    done = subprocess.run([*command, "--", "--lr", "1e-2"], capture_output=True, text=True, timeout=300)
    # at lr 1e-2 an AdamW step is larger than half bf16's spacing at 1.0: the norm weights move
    assert "not reproduced on cpu" in done.stdout and "AdamW lr=0.01 (the command line: --lr 0.01)" in done.stdout
    assert "0.002 <= lr" in done.stdout


SCALED_SGD = """\
    import torch
    from torch import nn

    model = nn.Linear(8, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.cuda.amp.GradScaler()
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
HALF_ADAM = """\
    import torch
    from torch import nn

    model = nn.Linear(8, 1).cuda().half()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    with torch.autocast("cuda", dtype=torch.float16):
        pass
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def test_tl202_records_the_code_s_own_precision_set_up_and_optimizer():
    (finding,) = lint(SCALED_SGD, select="TL202")
    assert finding.facts == {"setup": "scaler", "optimizer": "SGD", "lr": 0.01}
    (finding,) = lint(HALF_ADAM, select="TL202")
    assert finding.facts == {"setup": "fp16 weights", "optimizer": "Adam"}


def test_tl202_s_probe_runs_the_set_up_it_is_given_and_says_what_it_assumed():
    torch = pytest.importorskip("torch")
    from trainlint.verify.probes import probe_tl202

    assert torch is not None
    sgd = probe_tl202({"setup": "scaler", "optimizer": "SGD", "lr": 0.01}, "cpu")
    assert sgd["status"] == "confirmed" and sgd["summary"].startswith("fp32 weights under fp16 autocast with a GradScaler, SGD lr=0.01: one outlier batch")
    assert sgd["evidence"]["without_clipping"]["moved"] > 5 * sgd["evidence"]["with_clipping"]["moved"]
    # Adam keeps the spike in its second moment: its next steps shrink, clipped ones do not
    adam = probe_tl202({"setup": "scaler", "optimizer": "Adam", "lr": 1e-3}, "cpu")
    assert adam["status"] == "confirmed" and adam["evidence"]["without_clipping"]["later_step_share"] < 0.5
    assert adam["evidence"]["with_clipping"]["later_step_share"] > 0.8
    half = probe_tl202({"setup": "fp16 weights", "optimizer": "Adam"}, "cpu")
    assert half["evidence"]["lr"] == 1e-3 and "(assumed: lr 0.001: not written as literals in the flagged file)" in half["summary"]


@pytest.mark.parametrize("code, facts, said", [
    ("TL102", {}, "on a stand-in MLP's gradients at 1e-3 of their size at initialisation (late-training magnitude, assumed)"),
    ("TL103", {}, "(a stand-in MLP's gradients at 1e-3"),
    ("TL104", {"eps": 1e-8}, "(optimizer Adam assumed: none found in the flagged file)"),
    ("TL201", {"max_norm": 1.0}, "the scale is GradScaler's initial one, on a stand-in linear layer"),
    ("TL301", {}, "accumulating as the flagged line does over a stand-in MLP's losses"),
    ("TL204", {}, "fp32 weights under fp16 autocast with a GradScaler"),  # DeepSpeed fp16 keeps fp32 master weights
])
def test_every_probe_says_what_it_stands_in_for_or_assumed(code: str, facts: dict, said: str):
    pytest.importorskip("torch")
    from trainlint.verify.probes import PROBES

    assert said in PROBES[code](facts, "cpu")["summary"]
