"""A GAN on a 2-D ring of Gaussians: alternating discriminator and generator steps, each with its own
Adam optimizer."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def real_batch(n: int) -> torch.Tensor:
    angles = torch.randint(0, 8, (n,)).float() * (2 * math.pi / 8)
    return torch.stack([angles.cos(), angles.sin()], 1) * 2 + torch.randn(n, 2) * 0.05


generator = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
discriminator = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3, betas=(0.5, 0.999))
for step in range(1200):
    real, noise = real_batch(128), torch.randn(128, 4)
    fake = generator(noise)
    d_loss = (F.binary_cross_entropy_with_logits(discriminator(real), torch.ones(128, 1))
              + F.binary_cross_entropy_with_logits(discriminator(fake.detach()), torch.zeros(128, 1)))
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    g_loss = F.binary_cross_entropy_with_logits(discriminator(fake), torch.ones(128, 1))
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
