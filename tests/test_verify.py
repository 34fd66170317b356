"""The runtime verifier: each probe on a known-bad and a known-good configuration (CPU; CUDA where present)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trainlint.verify import probes  # noqa: E402
from trainlint.verify.runner import run_probe  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CUDA = torch.cuda.is_available()


def test_tl101_bf16_adamw_freezes_norm_weights_fp32_does_not():
    bad = probes.probe_tl101({"dtype": "bfloat16", "optimizer": "torch.optim.AdamW", "lr": 3e-4, "weight_decay": 0.1}, "cpu")
    assert bad["status"] == "confirmed"
    norm = bad["evidence"]["tensors"]["norm weights (1.0)"]
    assert norm["predicted_frozen"] == 1.0 and norm["measured_frozen"] == 1.0 and norm["fp32_frozen"] == 0.0
    assert bad["evidence"]["decay_lost"] is True
    # a learning rate above half the bf16 gap at 1.0 (0.0039 / 2) moves them: not reproduced
    good = probes.probe_tl101({"dtype": "bfloat16", "optimizer": "AdamW", "lr": 1e-2}, "cpu")
    assert good["status"] == "not reproduced"
    assert good["evidence"]["tensors"]["norm weights (1.0)"]["measured_frozen"] < 0.1


def test_tl104_eps_underflows_in_fp16_but_not_when_representable():
    bad = probes.probe_tl104({"optimizer": "Adam", "eps": 1e-8}, "cpu")
    assert bad["status"] == "confirmed" and bad["evidence"]["eps_in_fp16"] == 0.0
    assert bad["evidence"]["nonfinite_after_one_step"] > 0
    good = probes.probe_tl104({"optimizer": "Adam", "eps": 1e-4}, "cpu")
    assert good["status"] == "not reproduced" and good["evidence"]["nonfinite_after_one_step"] == 0


def test_fp16_probes():
    underflow = probes.probe_fp16_gradients({}, "cpu")
    assert underflow["status"] == "confirmed"
    assert underflow["evidence"]["underflow_without_scaler"] > 0.01 > underflow["evidence"]["underflow_with_scaler_65536"]
    spikes = probes.probe_tl202({}, "cpu")
    assert spikes["status"] == "confirmed"
    assert spikes["evidence"]["nonfinite_without_clipping"] == 1024 and spikes["evidence"]["nonfinite_with_clipping"] == 0


def test_tl201_clipping_scaled_gradients_cuts_the_update():
    result = probes.probe_tl201({"max_norm": 1.0}, "cpu")
    assert result["status"] == "confirmed"
    evidence = result["evidence"]
    assert evidence["effective_threshold"] == 1.0 / 65536
    assert evidence["grad_norm_after_step_unscales"] == pytest.approx(1.0 / 65536, rel=1e-3)
    # a max_norm far above the scaled norm never triggers: nothing to confirm
    assert probes.probe_tl201({"max_norm": 1e9}, "cpu")["status"] == "not reproduced"


def test_graph_growth_probe_counts_nodes_per_step():
    result = probes.probe_graph_growth({}, "cpu")
    assert result["status"] == "confirmed"
    nodes = result["evidence"]["graph_nodes_per_step"]
    assert nodes == sorted(nodes) and nodes[-1] > nodes[0] and result["evidence"]["node_growth_per_step"] > 0


@pytest.mark.skipif(CUDA, reason="checks the CPU answer")
def test_sync_cost_cannot_be_measured_on_cpu():
    assert probes.probe_sync_cost({"kind": "item"}, "cpu")["status"] == "cannot check here"


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_sync_cost_is_measured_on_cuda():
    result = probes.probe_sync_cost({"kind": "synchronize"}, "cuda")
    assert result["status"] in ("confirmed", "not reproduced")
    assert result["evidence"]["step_with_sync_ms"] > 0


def test_probe_runs_in_a_child_process_with_a_timeout():
    result = run_probe("TL104", {"eps": 1e-8}, "cpu", timeout=120)
    assert result["status"] == "confirmed" and result["device"] == "cpu" and result["duration_s"] >= 0
    slow = run_probe("TL101", {"dtype": "bfloat16"}, "cpu", timeout=0.01)
    assert slow["status"] == "cannot check here" and "did not finish" in slow["summary"]


def test_verify_command_on_the_examples():
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", str(ROOT / "examples"), "--format", "json", "--device", "cpu"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 1, done.stderr
    rows = {row["code"]: row for row in json.loads(done.stdout)}
    assert rows["TL101"]["verification"]["status"] == "confirmed"
    assert rows["TL202"]["verification"]["status"] == "confirmed"
    assert rows["TL302"]["verification"]["status"] == "confirmed"
    assert rows["TL401"]["verification"]["status"] == "cannot check here"
    assert rows["TL403"]["verification"] is None
    clean = subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", str(ROOT / "examples" / "clean"), "--device", "cpu"],
        capture_output=True, text=True, timeout=600,
    )
    assert clean.returncode == 0 and "nothing to verify" in clean.stdout


def test_tl103_bf16_gradients_need_no_scaler():
    result = probes.probe_tl103({}, "cpu")
    assert result["status"] == "confirmed"
    assert result["evidence"]["underflow_bf16"] == 0.0 and result["evidence"]["underflow_fp16"] > 0.01
    # gradients far below bf16's smallest normal (~1e-38) underflow there too: nothing to confirm
    assert probes.probe_tl103({"grad_scale": 1e-40}, "cpu")["status"] == "not reproduced"


def test_rule_pages_promise_only_the_checks_that_exist():
    from trainlint.rules import ALL_RULES
    from trainlint.verify.runner import PROBED
    from trainlint.verify.script_run import JUDGED

    assert PROBED == set(probes.PROBES)
    for rule in ALL_RULES:
        text = rule.verification
        assert ("`trainlint verify run`" in text) == (rule.code in JUDGED), rule.code
        assert ("`trainlint verify` " in text) == (rule.code in PROBED), rule.code


def test_tl201_probe_gets_the_code_s_max_norm():
    from trainlint.config import Settings
    from trainlint.engine.lint import lint_source

    source = (
        "import torch\n"
        "for x in loader:\n"
        "    scaler.scale(model(x)).backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
    )
    (finding,) = lint_source(source, "train.py", Settings()).diagnostics
    assert finding.code == "TL201" and finding.facts == {"max_norm": 0.5}
    assert probes.probe_tl201(finding.facts, "cpu")["evidence"]["effective_threshold"] == 0.5 / 65536
