"""TL301 retain-graph-in-loop: a backward per loss, in a loop of its own inside the step over losses one
forward computed (audiolm's discriminator losses, each backpropagated with `retain_graph=True`), hands
the graph on to the next round's backward; a loop that runs a forward per round (DomainBed's SANDMask,
one graph per environment) retains graphs no later backward needs, and is reported."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lines, lint_project

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


# Phenaki's VQ-GAN: the adaptive weight's gradient keeps the graph (`retain_graph=True`) in a helper
# the model's `forward` calls; the trainer, in another module, backpropagates the loss `forward` returns
ADAPTIVE_WEIGHT = {
    "vae.py": """
        import torch
        from torch import nn


        def grad_layer_wrt_loss(loss, layer):
            return torch.autograd.grad(outputs=loss, inputs=layer, grad_outputs=torch.ones_like(loss), retain_graph=True)[0].detach()


        class VAE(nn.Module):
            def __init__(self):
                super().__init__()
                self.dec = nn.Linear(8, 8)

            def forward(self, x):
                recon = self.dec(x)
                gen_loss = recon.mean()
                perceptual_loss = (recon - x).abs().mean()
                norm_grad_wrt_gen = grad_layer_wrt_loss(gen_loss, self.dec.weight).norm(p=2)
                norm_grad_wrt_perceptual = grad_layer_wrt_loss(perceptual_loss, self.dec.weight).norm(p=2)
                weight = norm_grad_wrt_perceptual / norm_grad_wrt_gen.clamp(min=1e-5)
                return perceptual_loss + weight * gen_loss
    """,
    "train.py": """
        from vae import VAE


        def train(loader, optimizer):
            vae = VAE().cuda()
            for x in loader:
                loss = vae(x.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
    """,
}


def test_a_retaining_helper_of_a_forward_whose_loss_the_trainer_backpropagates_is_consumed(tmp_path: Path) -> None:
    assert lint_project(tmp_path, ADAPTIVE_WEIGHT, "TL301") == []


def test_the_same_helper_called_after_the_steps_backward_is_reported(tmp_path: Path) -> None:
    # near miss: a diagnostic the trainer runs after the update, which no backward follows
    vae = ADAPTIVE_WEIGHT["vae.py"].replace(
        "                norm_grad_wrt_gen = grad_layer_wrt_loss(gen_loss, self.dec.weight).norm(p=2)\n"
        "                norm_grad_wrt_perceptual = grad_layer_wrt_loss(perceptual_loss, self.dec.weight).norm(p=2)\n"
        "                weight = norm_grad_wrt_perceptual / norm_grad_wrt_gen.clamp(min=1e-5)\n"
        "                return perceptual_loss + weight * gen_loss\n",
        "                return perceptual_loss + gen_loss\n\n"
        "            def grad_norm(self, x):\n"
        "                return grad_layer_wrt_loss(self.dec(x).mean(), self.dec.weight).norm(p=2)\n",
    )
    train = ADAPTIVE_WEIGHT["train.py"].replace("                optimizer.zero_grad()\n", "                optimizer.zero_grad()\n                vae.grad_norm(x.cuda())\n")
    assert lint_project(tmp_path, {"vae.py": vae, "train.py": train}, "TL301") == ["vae.py:7:TL301"]
