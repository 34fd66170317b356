"""A torch distribution lives where its parameters are and draws its samples there: SAC's
`Normal(0, 1).sample()` is a host tensor, moved to the device every step (TL406); a policy's
`Normal(mu, sigma)` of device outputs samples on the device, and so does one built from device tensors."""

from __future__ import annotations

from tests.helpers import lint

SAC = """
    import torch
    from torch.distributions import Normal

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


    def evaluate(policy, state):
        mu, log_sigma = policy(state)
        sigma = torch.exp(log_sigma)
        dist = Normal(mu, sigma)
        noise = Normal(0, 1)
        z = noise.sample()
        action = torch.tanh(mu + sigma * z.to(device))
        return action, dist.log_prob(action).sum(1)


    def update(policy, opt, states):
        for state in states:
            action, log_prob = evaluate(policy, state.to(device))
            loss = -log_prob.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def _tl406(code: str) -> list[int]:
    return sorted(d.line for d in lint(code, "TL406", name="sac.py") if d.code == "TL406")


def test_a_sample_of_a_distribution_built_from_numbers_is_a_host_tensor_moved_every_step() -> None:
    assert _tl406(SAC) == [14]


def test_a_distribution_of_device_tensors_samples_on_the_device() -> None:
    # near miss: a standard normal built on the device draws there (its `.to(device)` copies nothing)
    on_device = "noise = Normal(torch.zeros(1, device=device), torch.ones(1, device=device))"
    assert _tl406(SAC.replace("noise = Normal(0, 1)", on_device)) == []


MIXUP = """
    import torch


    def train(model, opt, loader, mixup):
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            alpha = mixup[1]
            lam = float(torch.distributions.beta.Beta(alpha, alpha).sample())
            loss = model(lam * x + (1 - lam) * x.flip(0), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_a_draw_of_a_distribution_whose_parameters_are_not_known_is_no_device_tensor() -> None:
    # EfficientViT's mixup ratio: `Beta(alpha, alpha)` of a configuration's values, read with float()
    assert [d.line for d in lint(MIXUP, "TL401") if d.code == "TL401"] == []
