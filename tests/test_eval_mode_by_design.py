"""TL503 eval-mode-not-reset: a training function that switches the model to eval mode before its step
loop, or at the top of each step before the backward, trains in eval mode by design (a linear probe on
frozen features keeps batch-norm statistics fixed, simsiam's `main_lincls.py`, CSI's linear heads);
a switch after the step's update, or in an evaluation the loop runs, still leaves training in eval mode."""

from __future__ import annotations

from tests.helpers import lines

LINEAR_PROBE = """
import torch
import torch.nn.functional as F


def validate(model, loader):
    model.eval()
    with torch.no_grad():
        return sum(F.cross_entropy(model(x.cuda()), y.cuda()).item() for x, y in loader)


def train(model, loader, optimizer):
    model.eval()
    for x, y in loader:
        loss = F.cross_entropy(model(x.cuda()), y.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def main(model, train_loader, val_loader, optimizer, epochs):
    for epoch in range(epochs):
        train(model, train_loader, optimizer)
        validate(model, val_loader)
"""


def test_a_train_function_that_switches_to_eval_before_its_loop_trains_in_eval_mode_by_design() -> None:
    assert lines(LINEAR_PROBE, "TL503") == []


def test_a_switch_at_the_top_of_each_step_before_the_backward_is_by_design() -> None:
    code = LINEAR_PROBE.replace("    model.eval()\n    for x, y in loader:\n", "    for x, y in loader:\n        model.eval()\n")
    assert lines(code, "TL503") == []


def test_without_that_switch_the_evaluations_eval_leaves_training_in_eval_mode() -> None:
    code = LINEAR_PROBE.replace("    model.eval()\n    for x, y in loader:\n", "    for x, y in loader:\n")
    assert lines(code, "TL503") == [7]


def test_a_switch_after_the_steps_update_leaves_the_next_steps_in_eval_mode() -> None:
    code = LINEAR_PROBE.replace("    model.eval()\n    for x, y in loader:\n", "    for x, y in loader:\n").replace(
        "        optimizer.step()\n", "        optimizer.step()\n        model.eval()\n"
    )
    assert lines(code, "TL503") == [7, 18]
