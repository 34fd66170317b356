"""`trainlint verify run` on the shapes it used to get wrong: a healthy run's large first gradients
taken for spikes (TLR205); dropout that ignores eval mode in an evaluation after the training loop
(TLR502); a dataset's generator kept in a closure, or fingerprinted where NumPy is missing (TLR701); a
freeze the script's configuration asks for and never applies (TLR108). Each through the real command,
with a healthy twin that stays silent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

from trainlint.verify.health import SPIKE_BASELINE, grad_norm_spikes
from trainlint.verify.invariant_health import _named_by
from trainlint.verify.freeze_config import asks_for_freeze

ROOT = Path(__file__).resolve().parents[1]
HEALTHY = ROOT / "benchmarks" / "healthy_scripts"


def verify_run(script: Path, steps: int, *extra: str, env: dict[str, str] | None = None) -> tuple[int, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", "run", str(script), "--device", "cpu", "--steps", str(steps), "--format", "json", *extra],
        capture_output=True, text=True, timeout=300, cwd=script.parent, env=env,
    )
    assert done.stdout, done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


def codes(report: dict[str, Any]) -> list[str]:
    return [p["code"] for p in report["problems"]]


def write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


# -- TLR205: spikes against the steps before, never before a baseline ---------------------------

def _report(norms: list[float | None]) -> dict[str, Any]:
    return {"grad_norm": {"values": norms}}


def test_a_falling_gradient_norm_is_no_spike():
    # a converging run: 10x above the run's median for its first dozen steps, never above its own past
    norms = [20.0 * 0.99 ** i for i in range(800)]
    assert grad_norm_spikes(_report(norms)) is None


def test_a_spike_is_judged_against_the_steps_before_it():
    norms = [1.0 + 0.01 * (i % 7) for i in range(100)]
    norms[59] = 40.0
    spikes = grad_norm_spikes(_report(norms))
    assert spikes is not None and spikes["steps"] == [60] and 1.0 <= spikes["median"] <= 1.07 and spikes["max"] == 40.0


def test_no_step_is_judged_before_the_run_has_a_baseline():
    norms = [1.0, 50.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert grad_norm_spikes(_report(norms)) is None
    norms[1], norms[SPIKE_BASELINE] = 1.0, 50.0  # the first step with SPIKE_BASELINE finite norms before it
    assert grad_norm_spikes(_report(norms))["steps"] == [SPIKE_BASELINE + 1]  # type: ignore[index]


def test_a_plain_mlp_regression_of_800_steps_is_healthy():
    code, report = verify_run(HEALTHY / "mlp_regression.py", 800)
    loss = report["loss"]["values"]
    assert loss[0] > 5 and loss[-1] < 0.05  # it converges: large first gradients, small last ones
    assert code == 0 and report["problems"] == [], report["problems"]


# -- TLR502: dropout that ignores eval mode, evaluated after the training loop --------------------

DROPOUT = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)


    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(16, 64), nn.Linear(64, 4)

        def forward(self, x):
            h = torch.relu(self.fc1(x))
            h = F.dropout(h, p=0.5{training})
            return self.fc2(h)


    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(256, 16)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    for step in range(100):
        batch = torch.randint(0, 256, (32,))
        loss = F.cross_entropy(model(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    model.eval()
    with torch.no_grad():
        print("accuracy", (model(x).argmax(1) == y).float().mean().item())
"""


def test_dropout_without_training_is_found_though_the_evaluation_comes_after_the_steps_run(tmp_path: Path):
    script = write(tmp_path, "train.py", DROPOUT.format(training=""))
    code, report = verify_run(script, 30)  # the script's evaluation never runs: it stops after step 30
    assert code == 1 and codes(report) == ["TLR502"]
    (problem,) = report["problems"]
    assert problem["line"] == 16 and "`dropout` runs in training behaviour inside eval-mode `Net`" in problem["message"]
    assert "found by evaluating `Net` after step 30" in problem["message"] and "pass `training=self.training`" in problem["message"]
    assert "two forwards of the same batch differ by up to" in problem["message"]


def test_dropout_that_follows_the_mode_is_silent(tmp_path: Path):
    script = write(tmp_path, "train.py", DROPOUT.format(training=", training=self.training"))
    code, report = verify_run(script, 30)
    assert code == 0 and report["problems"] == [] and report["information"] == []


# -- TLR701: a generator of the dataset, in a closure, with four workers -------------------------

WORKERS = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, Dataset, get_worker_info


    class Jittered(Dataset):
        def __init__(self, n: int = 512) -> None:
            self.x = torch.randn(n, 16, generator=torch.Generator().manual_seed(0))
            self.y = (self.x[:, 0] > 0).long()
            self.gen = torch.Generator().manual_seed(1234)
            gen = self.gen
            self.augment = lambda t: t + 0.1 * torch.randn(t.shape, generator=gen)

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int):
            return self.augment(self.x[i]), self.y[i]


    def reseed(worker_id: int) -> None:
        info = get_worker_info()
        info.dataset.gen.manual_seed(info.seed)


    if __name__ == "__main__":
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(Jittered(), batch_size=32, shuffle=True, num_workers=4{init})
        for epoch in range(3):
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
"""


def test_a_dataset_generator_every_worker_copies_is_named(tmp_path: Path):
    script = write(tmp_path, "train.py", WORKERS.format(init=""))
    code, report = verify_run(script, 20)
    assert code == 1 and codes(report) == ["TLR701"]
    assert "copied into its 4 workers with the same state" in report["problems"][0]["message"]
    assert report["problems"][0]["line"] == 32  # the DataLoader


def test_a_generator_reseeded_in_worker_init_fn_is_silent(tmp_path: Path):
    script = write(tmp_path, "train.py", WORKERS.format(init=", worker_init_fn=reseed"))
    code, report = verify_run(script, 20)
    assert code == 0 and report["problems"] == []


def test_generators_are_fingerprinted_without_numpy(tmp_path: Path):
    # where NumPy is missing the fingerprint of a torch.Generator used to fail, and the check fell silent
    hidden = tmp_path / "hide" / "numpy"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'numpy\'", name="numpy")\n')
    script = write(tmp_path, "train.py", WORKERS.format(init=""))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden.parent), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    code, report = verify_run(script, 10, env=env)
    assert code == 1 and codes(report) == ["TLR701"]


def test_generators_are_found_in_closures_partials_and_module_transforms():
    torch = pytest.importorskip("torch")
    import functools

    from trainlint.verify.data_workers import fingerprints

    class Jitter(torch.nn.Module):  # a torchvision-v2-style transform
        def __init__(self) -> None:
            super().__init__()
            self.generator = torch.Generator()

    class Data:
        def __init__(self) -> None:
            closed = torch.Generator()
            self.augment = lambda t: t + torch.randn(t.shape, generator=closed)
            self.noise = functools.partial(torch.randn, 4, generator=torch.Generator())
            self.transform = Jitter()

    found = fingerprints(Data())
    assert set(found) == {"dataset.augment.<closed>", "dataset.noise.keywords['generator']", "dataset.transform.generator"}


# -- TLR108: a freeze the configuration asks for, never applied ----------------------------------

FREEZE = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    CONFIG = {{"model": {{"stages": 4, "width": 32, "freeze_stages": [0, 1]}}, "lr": 1e-2}}


    class Net(nn.Module):
        def __init__(self, stages: int, width: int) -> None:
            super().__init__()
            self.stages = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(stages))
            self.head = nn.Linear(width, 1)

        def forward(self, x):
            for stage in self.stages:
                x = stage(x)
            return self.head(x)


    def main() -> None:
        torch.manual_seed(0)
        cfg = CONFIG["model"]
        model = Net(cfg["stages"], cfg["width"])
        if cfg.get("{key}"):
            for i in cfg["{key}"]:
                model.stages[i].requires_grad_(False)
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=CONFIG["lr"])
        x = torch.randn(256, 32)
        y = x[:, :1] * 2
        for step in range(100):
            loss = F.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    if __name__ == "__main__":
        main()
"""


def test_a_freeze_the_configuration_names_and_nothing_applies_is_a_problem(tmp_path: Path):
    script = write(tmp_path, "train.py", FREEZE.format(key="freeze_stage"))  # the key misspelled where it is applied
    code, report = verify_run(script, 20)
    assert code == 1 and codes(report) == ["TLR108"]
    (problem,) = report["problems"]
    assert problem["name"] == "freeze-not-applied" and problem["line"] == 6  # the line that names the setting
    assert "configuration says `cfg['freeze_stages'] = [0, 1]`" in problem["message"]
    assert "4 tensors, 2,112 elements) and all of them train" in problem["message"]
    assert problem["url"].endswith("/run/TLR108-freeze-not-applied.md")


def test_a_freeze_that_is_applied_is_silent(tmp_path: Path):
    script = write(tmp_path, "train.py", FREEZE.format(key="freeze_stages"))
    code, report = verify_run(script, 20)
    assert code == 0 and report["problems"] == []


def test_a_freeze_setting_is_acknowledged_by_a_comment_on_its_line(tmp_path: Path):
    source = FREEZE.format(key="freeze_stage").replace('"lr": 1e-2}', '"lr": 1e-2}  # noqa: TLR108')
    code, report = verify_run(write(tmp_path, "train.py", source), 10)
    assert code == 0 and report["problems"][0]["acknowledged"] == "comment at train.py:6"


def _rows(*names: str, status: str = "trains") -> list[dict[str, Any]]:
    return [{"name": n, "status": status, "numel": 10} for n in names]


def test_what_a_freeze_setting_names():
    rows = _rows("stem.weight", "stages.0.0.weight", "stages.1.0.weight", "stages.2.0.weight", "backbone.layer1.0.weight", "head.weight")
    named = lambda key, value: sorted(r["name"] for r in _named_by({"key": key, "value": value}, rows))  # noqa: E731
    assert named("freeze_stages", [0, 1]) == ["backbone.layer1.0.weight", "stages.0.0.weight", "stages.1.0.weight"]
    assert named("frozen_stages", 1) == ["backbone.layer1.0.weight", "stages.0.0.weight"]
    assert named("freeze_backbone", True) == ["backbone.layer1.0.weight"]
    assert named("freeze_layers", ["stem", "head"]) == ["head.weight", "stem.weight"]
    assert named("freeze", True) == []  # names nothing: judged on whether anything is frozen at all
    assert [asks_for_freeze(v) for v in (False, 0, -1, None, [], "none", True, 2, [1, 0], "backbone")] == [
        None, None, None, None, None, None, True, 2, [0, 1], "backbone"]


# -- item 3: what the verify extra declares ------------------------------------------------------

def test_the_verify_extra_declares_numpy_and_the_readme_says_how_to_get_the_cpu_build():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert any(d.startswith("numpy") for d in extras["verify"]) and any(d.startswith("torch") for d in extras["verify"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme and "pip install torch==2.13.0" in readme


# -- item 4: the HTML report links codes and causes, and labels its axes right -------------------

def test_the_html_report_links_each_code_to_its_page_and_each_cause_to_its_file(tmp_path: Path):
    from trainlint.verify.problem_kinds import Problem
    from trainlint.verify.report_html import render_html

    script = write(tmp_path, "train.py", "print('training')\n")
    problem = Problem("TLR108", "freeze not applied: ...", {"path": str(script), "line": 1, "code": "print('training')"}, 1)
    page = render_html({"script": str(script), "steps": 10, "device": "cpu", "message": "stopped"}, [], [problem])
    assert '<a href="https://github.com/trainlint/trainlint/blob/main/rules/run/TLR108-freeze-not-applied.md"' in page
    assert f'(cause: <a href="{script.resolve().as_uri()}"><code>' in page and "train.py:1</code></a>)" in page


def test_a_chart_says_which_axis_is_logarithmic():
    from trainlint.verify.report_html import line_chart

    wide = line_chart([1.0, 2.0, 1e4, 1.5, 1.2], "", [])  # a spike 10,000x the rest: a log value axis
    assert ">step</text>" in wide and ">log scale</text>" in wide and 'transform="rotate(-90' in wide
    assert "step (log scale)" not in wide  # the steps stay linear
    narrow = line_chart([1.0, 2.0, 3.0], "", [])
    assert ">step</text>" in narrow and "log scale" not in narrow


def test_the_noise_of_a_converged_run_far_below_its_start_is_no_spike():
    # a classifier at ~0 loss: norms of 1e-4 with a 1e-3 batch now and then, after a start near 1
    norms = [4.0, 2.7, 2.2, 0.9, 0.7, 0.3, 0.1, 0.06] + [1e-4] * 100
    norms[70] = 1.3e-3
    assert grad_norm_spikes(_report(norms)) is None
    norms[90] = 5.0  # above anything the run started with: a spike
    assert grad_norm_spikes(_report(norms))["steps"] == [91]  # type: ignore[index]


def test_the_heavy_tail_of_small_batch_norms_is_no_spike():
    # an LSTM's norms: median 0.03 with batches up to 0.27 in the last 25 steps; 0.31 is that spread
    norms = [0.37] * 8 + [0.03, 0.02, 0.04, 0.03, 0.18, 0.03, 0.02, 0.27, 0.03, 0.03, 0.02, 0.19, 0.03, 0.04, 0.03, 0.02, 0.03, 0.03]
    assert grad_norm_spikes(_report([*norms, 0.31])) is None
    assert grad_norm_spikes(_report([*norms, 3.1]))["steps"] == [len(norms) + 1]  # type: ignore[index]
