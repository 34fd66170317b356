"""TL301 retain-graph-in-loop: a backward per loss, in a loop of its own inside the step over losses one
forward computed (audiolm's discriminator losses, each backpropagated with `retain_graph=True`), hands
the graph on to the next round's backward; a loop that runs a forward per round (DomainBed's SANDMask,
one graph per environment) retains graphs no later backward needs, and is reported."""

from __future__ import annotations

from tests.helpers import lines

PER_LOSS = """
import torch


def train_step(model, discriminators, batch, optimizer):
    fake = model(batch)
    losses = [(name, d(fake).mean()) for name, d in discriminators]
    for name, loss in losses:
        torch.autograd.backward(loss / len(losses), retain_graph=True)
    optimizer.step()
    optimizer.zero_grad()


def train(model, discriminators, loader, optimizer):
    for batch in loader:
        train_step(model, discriminators, batch.cuda(), optimizer)
"""


def test_a_backward_per_loss_of_one_forward_hands_the_graph_on() -> None:
    assert lines(PER_LOSS, "TL301") == []


def test_a_loop_running_a_forward_per_round_retains_graphs_nobody_needs() -> None:
    code = PER_LOSS.replace(
        "    for name, loss in losses:\n        torch.autograd.backward(loss / len(losses), retain_graph=True)\n",
        "    for name, d in discriminators:\n        env_loss = d(model(batch)).mean()\n        torch.autograd.backward(env_loss, retain_graph=True)\n",
    )
    assert lines(code, "TL301") == [10]
