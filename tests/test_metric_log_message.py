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


LOGGER_MODULE = """\
class TensorboardLogger(object):
    def __init__(self):
        self._logger = None

    def create(self, path):
        from tensorboardX import SummaryWriter
        self._logger = SummaryWriter(path)

    def noop(self, *args, **kwargs):
        return

    def step(self):
        pass

    def __getattr__(self, name):
        if self._logger is None:
            return self.noop
        return self._logger.__getattribute__(name)


TB_LOGGER = TensorboardLogger()
"""

PROJECT_SCRIPT = """\
import torch
from torch.nn.utils import clip_grad_norm_
from utils.logger import TB_LOGGER

model = torch.nn.Linear(3, 3).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step, batch in enumerate(loader):
    loss = model(batch.cuda()).sum()
    loss.backward()
    TB_LOGGER.step()
    grad_norm = clip_grad_norm_(model.parameters(), 1.0)
    TB_LOGGER.add_scalar('grad_norm', grad_norm, step)
    TB_LOGGER.add_scalar('lr', optimizer.param_groups[0]['lr'], step)
    if step % 100 == 0:
        TB_LOGGER.add_scalar('loss', loss, step)
    optimizer.step()
    optimizer.zero_grad()
"""


def test_a_project_modules_writer_logs_on_the_host(tmp_path: Path) -> None:
    """UNITER's `TB_LOGGER`: an object of a project class that hands `add_scalar` on to a
    `SummaryWriter` through `__getattr__`; logging the clip's total norm reads it every step. The
    learning rate (a number) and the gated loss are no finding."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("")
    (tmp_path / "utils" / "logger.py").write_text(LOGGER_MODULE)
    (tmp_path / "train.py").write_text(PROJECT_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "check", "--no-cache", "--select", "TL401", "--output-format", "concise", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    lines = [line for line in done.stdout.splitlines() if "TL401" in line]
    assert len(lines) == 1, done.stdout
    assert "train.py:12:5" in lines[0] and "`grad_norm` in `TB_LOGGER.add_scalar(...)`" in lines[0]
