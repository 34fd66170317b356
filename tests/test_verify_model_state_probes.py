"""The probes of the second-wave rules confirm their rule's claim on a model shaped like the flagged
code, and do not confirm it on the corrected code (measured with `verify run`'s invariant functions)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainlint.verify.invariants import TRAINS, eval_forward_determinism, trainable_parameters  # noqa: E402
from trainlint.verify.model_state_probes import PROBES  # noqa: E402
from trainlint.verify.runner import PROBED, run_probe  # noqa: E402


@pytest.mark.parametrize("code", sorted(PROBES))
def test_probe_confirms_the_rule(code: str):
    result = PROBES[code]({}, "cpu")
    assert result["status"] == "confirmed", result
    assert code in PROBED  # chosen without importing torch


def test_probe_runs_in_a_child_process_with_the_findings_facts():
    result = run_probe("TL505", {"p": 0.2}, "cpu", timeout=120)
    assert result["status"] == "confirmed" and result["evidence"]["p"] == 0.2 and result["device"] == "cpu"


def test_the_corrected_code_is_not_confirmed():
    """The twins: what the fixes produce passes the same measurements."""
    torch.manual_seed(0)
    # TL505 fixed: training=self.training
    class Fixed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.nn.functional.dropout(self.fc(x), 0.5, training=self.training)

    assert eval_forward_determinism(Fixed(), (torch.randn(4, 8),))["deterministic"]
    # TL506 fixed: ModuleList; TL504 fixed: requires_grad; TL507 fixed: the optimizer rebuilt
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ModuleList([torch.nn.Linear(8, 8)]))
    for p in model[0].parameters():
        p.requires_grad = False
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model[1][0](model[0](torch.randn(2, 8))).sum().backward()
    report = trainable_parameters(model, [optimizer])
    statuses = {r["name"]: r["status"] for r in report["parameters"]}
    assert statuses["1.0.weight"] == TRAINS and statuses["0.weight"] == "requires_grad=False"
