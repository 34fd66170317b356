"""Step seeds through modules that call each other: a module's seeds are joined from its callers'
seeds, and callers may call it back. Each module's seeds are joined a bounded number of times however
the calls go round (they were joined again on every path through a cycle: minutes for one module of
a compiler's package), and the answer is the same whichever file a run asks about first (an answer
worked out inside a cycle saw that cycle's other modules as seeding nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainlint.config import Settings
from trainlint.engine.lint import lint_file
from trainlint.project import index

TRAIN = """\
import torch
import helpers

def main(model, loader, optimizer):
    model.cuda()
    for x in loader:
        loss = model(x.cuda())
        loss.backward()
        optimizer.step()
        helpers.step_fn(loss)
"""
# helpers.step_fn runs every step and calls ops.g; ops.g calls back helpers.util, which reads its
# argument on the host: util runs every step only through the cycle helpers -> ops -> helpers (with
# no training token, the modules of an import cycle see each other's functions)
HELPERS = """\
import torch
import ops

def step_fn(loss):
    return ops.g(loss)

def util(t):
    return t.tolist()
"""
OPS = """\
import torch
import helpers

def g(t):
    return helpers.util(t * 2)
"""


def _write(folder: Path, files: dict[str, str]) -> Path:
    (folder / ".git").mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _tl401_lines(path: Path) -> list[int]:
    return [d.line for d in lint_file(str(path), Settings()).diagnostics if d.code == "TL401"]


@pytest.mark.parametrize("first", [None, "ops.py"])
def test_seed_through_a_cycle_of_callers_whichever_module_is_asked_first(tmp_path: Path, first: str | None) -> None:
    project = _write(tmp_path, {"train.py": TRAIN, "helpers.py": HELPERS, "ops.py": OPS})
    if first is not None:
        _tl401_lines(project / first)
    assert _tl401_lines(project / "helpers.py") == [8]  # `t.tolist()` in util


def test_a_module_outside_any_step_has_no_seed_through_the_cycle(tmp_path: Path) -> None:
    # the same cycle, but nothing calls step_fn from a training step: util runs on no step
    project = _write(tmp_path, {"train.py": TRAIN.replace("helpers.step_fn(loss)", "pass"), "helpers.py": HELPERS, "ops.py": OPS})
    assert _tl401_lines(project / "helpers.py") == []


RING = 12


def _ring() -> dict[str, str]:
    """Modules m0..m11, each calling the next two round a ring, and a step calling m0."""
    files = {"train.py": TRAIN.replace("import helpers", "import m0").replace("helpers.step_fn(loss)", "m0.f(loss)")}
    for i in range(RING):
        a, b = (i + 1) % RING, (i + 2) % RING
        # (a read of what `f` computes, `t.sum()`: its own, reported in each module whatever the callers pass)
        files[f"m{i}.py"] = f"import torch\nimport m{a}\nimport m{b}\n\ndef f(t):\n    m{a}.f(t)\n    m{b}.f(t)\n    return t.sum().tolist()\n"
    return files


def test_seeds_of_a_ring_of_callers_are_joined_a_bounded_number_of_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _write(tmp_path, _ring())
    joined: list[Path] = []
    real_join = index.join_seeds
    monkeypatch.setattr(index, "join_seeds", lambda p, target: joined.append(target) or real_join(p, target))
    for i in range(RING):
        assert _tl401_lines(project / f"m{i}.py") == [8], i  # every module's `t.tolist()` runs every step
    # each module's seeds joined once a round, in a few rounds (48 joins); joined again on every path
    # through the ring, as they were, it took 618
    assert len(joined) <= 5 * RING, len(joined)
