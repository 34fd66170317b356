"""Contrastive learning (InfoNCE between two noisy views of each sample) with a projection head and a
learnable temperature."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
data = torch.randn(2000, 32)
encoder = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))
projection = nn.Sequential(nn.ReLU(), nn.Linear(32, 16))
log_temperature = nn.Parameter(torch.tensor(0.0))
optimizer = torch.optim.Adam([*encoder.parameters(), *projection.parameters(), log_temperature], lr=1e-3)
for step in range(1200):
    x = data[torch.randint(0, len(data), (64,))]
    a = F.normalize(projection(encoder(x + 0.2 * torch.randn_like(x))), dim=1)
    b = F.normalize(projection(encoder(x + 0.2 * torch.randn_like(x))), dim=1)
    logits = a @ b.t() / log_temperature.exp().clamp(min=0.05)
    loss = F.cross_entropy(logits, torch.arange(len(x)))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
