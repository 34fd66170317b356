"""TL401 on a metric logger names the value that is the tensor (issue 44: "which value?")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """\
import torch
import wandb

for step, (x, y) in enumerate(loader):
    x, y = x.cuda(), y.cuda()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    wandb.log({"train/loss": loss, "lr": scheduler.get_last_lr()[0], "epoch": epoch, "step": step})
    writer.add_scalar("loss", loss, step)
"""


def test_the_logged_tensor_is_named_in_the_message(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "check", "--no-cache", "--select", "TL401", "--output-format", "concise", str(script)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stdout.splitlines() if "TL401" in line]
    assert len(lines) == 2, done.stdout
    assert "`loss` in `wandb.log({...})` is a tensor on the accelerator" in lines[0]
    assert "`loss` in `writer.add_scalar(\"loss\", loss, step)` is a tensor on the accelerator" in lines[1]


def test_several_tensors_are_counted(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace('"lr": scheduler.get_last_lr()[0]', '"scaled": loss.detach() * 2'))
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "check", "--no-cache", "--select", "TL401", "--output-format", "concise", str(script)],
        capture_output=True, text=True, timeout=120,
    )
    assert "`loss` (and 1 more) in `wandb.log({...})`" in done.stdout, done.stdout
