"""`trainlint verify run` on scripts written in the style of real public training code (nanoGPT,
minGPT, pytorch/examples' word_language_model and time_sequence_prediction; tests/fixtures/scripts),
with tiny synthetic data on the CPU: each run completes and its evidence is right."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import messages

pytest.importorskip("torch")

SCRIPTS = Path(__file__).resolve().parent / "fixtures" / "scripts"


def verify_run(script: Path, *options: str, script_args: tuple[str, ...] = (), output: str = "json") -> tuple[int, Any, str]:
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", "run", str(script), "--device", "cpu", "--format", output, *options, "--", *script_args],
        capture_output=True, text=True, timeout=300,
    )
    return done.returncode, (json.loads(done.stdout) if output == "json" else done.stdout), done.stderr


def test_float64_lbfgs_script_is_measured_not_blamed():
    # time_sequence_prediction: a double-precision model stepped by LBFGS with a closure
    code, report, stderr = verify_run(SCRIPTS / "time_sequence_prediction_style.py", "--steps", "4", script_args=("--steps", "10"))
    assert report["stopped"] == "steps" and report["steps"] == 4, report["message"]
    assert report["error"] is None and "raised" not in report["message"]
    norms = report["grad_norm"]["values"]
    assert len(norms) == 4 and all(n is not None and n > 0 for n in norms)  # closure gradients, measured in float64
    assert report["grad_norm"]["nonfinite_steps"] == [] and report["frozen"] == [] and report["problems"] == []
    assert code == 0


def test_a_failure_of_the_instruments_is_ours_and_invents_nothing(tmp_path: Path):
    # the script breaks the gradient-norm instrument, standing in for any fault of ours
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import torch
        from trainlint.verify import grad_norms

        def broken(self, params):
            raise RuntimeError("instrument fault")

        grad_norms.GradNorms.add = broken
        model = torch.nn.Linear(4, 1).double()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(20):
            loss = model(torch.randn(8, 4, dtype=torch.double)).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        """), encoding="utf-8")
    code, report, stderr = verify_run(script, "--steps", "5")
    assert code == 2
    assert report["stopped"] == "internal-error" and "not in the script" in report["message"]
    assert report["error"].startswith("RuntimeError: instrument fault")
    assert report["problems"] == [] and report["frozen"] == []
    assert "trainlint: error: trainlint's instruments failed" in stderr and "the script raised" not in stderr
    code, text, _ = verify_run(script, "--steps", "5", output="text")
    assert code == 2 and "Frozen parameters" not in text and "Problems" not in text


def test_nanogpt_with_a_disabled_grad_scaler_reports_in_text():
    code, text, stderr = verify_run(SCRIPTS / "nanogpt_style.py", "--steps", "12", output="text")
    assert code == 0, stderr[-2000:]
    assert "Traceback" not in stderr
    assert "GradScaler disabled: 24 loss(es) passed through unscaled" in text
    assert "No training-health problem in this run." in text


def test_grad_norm_is_measured_before_clipping_and_spikes_are_named():
    # nanoGPT clips at 1.0 after unscale_: a corrupt batch at iteration 9 (step 10) must show its real norm
    code, report, _ = verify_run(SCRIPTS / "nanogpt_style.py", "--steps", "16", script_args=("--corrupt_iter=9",))
    norms = report["grad_norm"]["values"]
    assert 0.3 < norms[0] < 1.0 and norms[9] > 1000  # not the clipped 1.0
    (site,) = report["clipping"]["sites"]
    assert site["kind"] == "norm" and site["limit"] == "1.0" and site["line"] == 169
    assert report["clipping"]["steps_clipped"] == 1 and report["clipping"]["first_clipped_step"] == 10
    (spike,) = [p for p in messages(report) if "spike" in p]
    assert "from step 10" in spike
    assert code == 1
    code, text, _ = verify_run(SCRIPTS / "nanogpt_style.py", "--steps", "16", script_args=("--corrupt_iter=9",), output="text")
    assert "the script clips the gradient norm to 1.0 at" in text and "exceeded it at 1 of 16 steps" in text
    assert "^ spike at step 10" in text


def test_grad_norm_is_unscaled_under_a_grad_scaler():
    # float16 loss scaling (65536 on the first steps): the norm reported is the gradients' true one
    _, plain, _ = verify_run(SCRIPTS / "nanogpt_style.py", "--steps", "3")
    _, scaled, _ = verify_run(SCRIPTS / "nanogpt_style.py", "--steps", "3", script_args=("--dtype=float16",))
    _, late_unscale, _ = verify_run(SCRIPTS / "nanogpt_style.py", "--steps", "3", script_args=("--dtype=float16", "--grad_clip=0.0"))
    assert scaled["loss_scale"]["first"] == 65536.0
    for run in (scaled, late_unscale):
        assert run["grad_norm"]["values"] == pytest.approx(plain["grad_norm"]["values"], rel=1e-3)


def test_a_diverging_mingpt_run_is_a_problem_with_the_step_it_began():
    code, report, _ = verify_run(SCRIPTS / "mingpt_style.py", "--steps", "30", script_args=("--learning_rate", "3", "--grad_norm_clip", "0"))
    (diverged,) = [p for p in messages(report) if "diverged" in p]
    assert diverged.startswith("the loss diverged: 2.897 at the start") and "rising from step 2" in diverged
    assert code == 1
    code, report, _ = verify_run(SCRIPTS / "mingpt_style.py", "--steps", "30")
    assert code == 0 and report["problems"] == [] and report["clipping"]["sites"][0]["limit"] == "1.0"


def test_nanogpt_cast_to_bf16_explains_its_frozen_parameters():
    code, report, _ = verify_run(SCRIPTS / "nanogpt_style.py", "--steps", "30", script_args=("--dtype=bfloat16", "--cast_model=1"))
    frozen = {r["name"]: r for r in report["frozen"] if r["frozen_fraction"] >= 0.5}
    assert {"transformer.ln_f.weight", "transformer.h.0.ln_1.weight"} <= set(frozen)
    ln_f = frozen["transformer.ln_f.weight"]
    assert ln_f["no_master_copy"] is True
    assert ln_f["cast_at"]["line"] == 148 and ln_f["cast_at"]["code"] == "model = model.to(ptdtype)"
    assert (ln_f["cast_at"]["from"], ln_f["cast_at"]["to"]) == ("float32", "bfloat16")
    (problem,) = [p for p in messages(report) if "frozen" in p]
    assert "no float32 master copy" in problem and "nanogpt_style.py:148 (`model = model.to(ptdtype)`)" in problem
    assert code == 1


def test_word_language_model_runs_and_its_per_step_item_is_confirmed(tmp_path: Path):
    # copied out of tests/: the linter treats files under a tests folder as test code, not training scripts
    script = tmp_path / "main.py"
    shutil.copy(SCRIPTS / "word_language_model_style.py", script)
    code, report, _ = verify_run(script, "--steps", "12")
    assert report["steps"] == 12 and report["problems"] == []
    norms = report["grad_norm"]["values"]
    assert len(set(norms)) == 12 and all(n != 0.25 for n in norms)  # before the clip at 0.25
    assert report["clipping"]["sites"][0]["limit"] == "0.25"
    assert {f["code"]: f["verification"]["status"] for f in report["findings"]} == {"TL401": "confirmed"}
    assert code == 1
