"""Progress of a `check` run, through the real command: on a pseudo-terminal a run still going after
the delay shows it, on a pipe it does not unless `--progress` asks, and `--no-progress` turns it off."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STEP = """\
import torch
from helpers_{i} import scale

for x, y in loader:
    x, y = x.cuda(), y.cuda()
    loss = criterion(model(x), y) * scale(x)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    total += loss.item()
"""
HELPER = """\
import torch

def scale(x):
    return torch.ones((), device=x.device)
"""


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A small project: training scripts that import a module of their own each."""
    for i in range(6):
        (tmp_path / f"train_{i}.py").write_text(STEP.format(i=i))
        (tmp_path / f"helpers_{i}.py").write_text(HELPER)
    return tmp_path


def _env(after: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TRAINLINT_PROGRESS_AFTER", "NO_COLOR")}
    env.update(COLUMNS="120", LINES="40", TERM="xterm-256color")
    if after is not None:
        env["TRAINLINT_PROGRESS_AFTER"] = after  # (the run is "slow": still going after this long)
    return env


def _on_terminal(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Run `trainlint ARGS` with a pseudo-terminal for its standard streams; its exit code and output."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "trainlint", *args], stdin=follower, stdout=follower, stderr=follower, env=env, cwd=cwd, close_fds=True
    )
    os.close(follower)
    out = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the follower side closed: the command ended
                    break
                if not chunk:
                    break
                out += chunk
            elif process.poll() is not None:
                break
    finally:
        os.close(leader)
        process.wait(timeout=60)
    # (the terminal's colour and cursor codes removed: what a person reads)
    return process.returncode, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode("utf-8", "replace"))


def _on_pipe(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainlint", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def test_a_slow_run_on_a_terminal_shows_progress(project: Path) -> None:
    code, out = _on_terminal(["check", "--no-cache", "-j", "1", "."], _env("0"), project)
    assert code == 1, out
    assert "/12 files" in out and "checking" in out, out[:2000]
    assert "TL401" in out  # the report follows the (erased) bar


def test_a_run_on_a_pipe_shows_none(project: Path) -> None:
    done = _on_pipe(["check", "--no-cache", "-j", "1", "."], _env("0"), project)
    assert done.returncode == 1
    assert "files" not in done.stderr and "checking" not in done.stderr, done.stderr
    assert "TL401" in done.stdout


def test_ci_on_a_terminal_shows_none(project: Path) -> None:
    code, out = _on_terminal(["check", "--no-cache", "-j", "1", "."], {**_env("0"), "CI": "true"}, project)
    assert code == 1
    assert "/12 files" not in out, out[:2000]


def test_progress_forces_lines_on_a_pipe(project: Path) -> None:
    done = _on_pipe(["check", "--no-cache", "-j", "1", "--progress", "."], _env("0"), project)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[0].startswith("trainlint: checking: 0/12 files") or lines[0].startswith("trainlint: summarising the project: "), done.stderr
    assert lines[-1].startswith("trainlint: checked 12/12 files in "), done.stderr
    assert "\x1b" not in done.stderr  # a log gets plain lines, no terminal codes
    assert "TL401" in done.stdout  # the report itself is unchanged


def test_no_progress_suppresses_it_on_a_terminal(project: Path) -> None:
    code, out = _on_terminal(["check", "--no-cache", "-j", "1", "--no-progress", "."], _env("0"), project)
    assert code == 1
    assert "/12 files" not in out and "checking" not in out, out[:2000]
    assert "TL401" in out


def test_a_quick_run_shows_none(project: Path) -> None:
    """The default delay: a one-file run ends long before it."""
    code, out = _on_terminal(["check", "--no-cache", "--select", "TL401", "helpers_0.py"], _env("30"), project)
    assert code == 0, out
    assert "files" not in out, out[:2000]


def test_show_steps_shows_progress_too(project: Path) -> None:
    code, out = _on_terminal(["check", "--show-steps", "-j", "1", "."], _env("0"), project)
    assert code == 0, out
    assert "/12 files" in out, out[:2000]
