"""Module summaries outlive the run: kept in the result cache by content, authenticated like results,
read back by a later run (or the editor) while every file they were computed from is unchanged, and
computed once per module content and variant however many workers need them. Through the command,
counting computations with TRAINLINT_SUMMARY_LOG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

HELPERS = """\
import torch
from inner import scale

def log_loss(loss):
    return scale(loss).item()
"""
INNER = """\
import torch

def scale(t):
    return t * 2
"""
TRAIN = """\
import torch
from helpers import log_loss

def main(model, loader, optimizer):
    model.cuda()
    for x in loader:
        x = x.cuda()
        loss = model(x)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        log_loss(loss)
"""


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("")
    (root / "helpers.py").write_text(HELPERS)
    (root / "inner.py").write_text(INNER)
    (root / "train.py").write_text(TRAIN)
    return root


def _run(root: Path, log: Path, *args: str, key: str = "k1") -> tuple[list[dict[str, object]], list[str]]:
    """`trainlint check --format json ARGS` in `root`: the findings, and the modules it summarised."""
    log.unlink(missing_ok=True)
    env = {**os.environ, "TRAINLINT_SUMMARY_LOG": str(log), "TRAINLINT_CACHE_KEY": key}
    done = subprocess.run([sys.executable, "-m", "trainlint", "check", "--format", "json", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    computed = [Path(line.split("\t")[0]).name for line in log.read_text().splitlines()] if log.exists() else []
    return json.loads(done.stdout), computed


def test_a_later_run_reads_the_summaries_an_earlier_one_kept(tmp_path: Path) -> None:
    root = _project(tmp_path)
    log, cache = tmp_path / "summaries.log", tmp_path / "cache"
    first, computed = _run(root, log, "train.py", "--cache-dir", str(cache))
    # (inner.py has no training code: it is known by its outline, which is no summary computed)
    assert "helpers.py" in computed and "inner.py" not in computed, computed
    # the file's result is not reusable (other settings), the summaries it read are: none is computed
    second, computed = _run(root, log, "train.py", "--cache-dir", str(cache), "--select", "TL4")
    assert computed == [], computed
    assert [d for d in first if str(d["code"]).startswith("TL4")] == second
    # a module the summaries were computed from changes: those are computed again
    (root / "inner.py").write_text(INNER + "\n# edited\n")
    _, computed = _run(root, log, "train.py", "--cache-dir", str(cache), "--select", "TL40")
    assert "helpers.py" in computed, computed


def test_kept_summaries_are_authenticated(tmp_path: Path) -> None:
    root = _project(tmp_path)
    log, cache = tmp_path / "summaries.log", tmp_path / "cache"
    _run(root, log, "train.py", "--cache-dir", str(cache), key="first")
    _, computed = _run(root, log, "train.py", "--cache-dir", str(cache), "--select", "TL4", key="first")
    assert computed == [], computed
    # whoever does not hold the key that wrote them cannot have them read: computed again
    _, computed = _run(root, log, "train.py", "--cache-dir", str(cache), "--select", "TL40", key="second")
    assert "helpers.py" in computed, computed


def test_each_module_is_summarised_once_per_content_and_variant(tmp_path: Path) -> None:
    """However many files import it. (Two workers that need the same summary at the same moment may
    both compute it: a run's workers share what is done, not what is under way.)"""
    root = _project(tmp_path)
    for i in range(6):  # many files that need the same summaries
        (root / f"train_{i}.py").write_text(TRAIN)
    log = tmp_path / "summaries.log"
    _run(root, log, ".", "--no-cache", "-j", "1")
    computed = [(os.path.abspath(root / line.split("\t")[0]), *line.split("\t")[1:]) for line in log.read_text().splitlines()]
    repeated = {k: n for k, n in Counter(computed).items() if n > 1}
    assert computed and not repeated, repeated


def test_the_same_findings_from_another_folder(tmp_path: Path) -> None:
    """A summary names files as the run that made it was given them: one kept by a run in the project's
    folder is not read by a run elsewhere as if its relative names were its own."""
    root = _project(tmp_path)
    log, cache = tmp_path / "summaries.log", tmp_path / "cache"
    here, _ = _run(root, log, "train.py", "helpers.py", "--cache-dir", str(cache))
    there, computed = _run(root.parent, log, "project/train.py", "project/helpers.py", "--cache-dir", str(cache))
    assert "helpers.py" in computed, computed
    assert here and [(Path(str(d["path"])).name, d["line"], d["code"]) for d in here] == [
        (Path(str(d["path"])).name, d["line"], d["code"]) for d in there]
    assert all(Path(str(d["path"])).parts[0] == "project" for d in there), there
