"""Gradient accumulation: four micro-batches per optimizer step, each loss divided by four, cleared
after the step."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
ACCUMULATE = 4
x = torch.randn(4000, 10)
labels = ((x[:, 0] * x[:, 1]) > 0).long()
model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
for micro in range(1200 * ACCUMULATE):
    batch = torch.randint(0, len(x), (16,))
    loss = F.cross_entropy(model(x[batch]), labels[batch]) / ACCUMULATE
    loss.backward()
    if (micro + 1) % ACCUMULATE == 0:
        optimizer.step()
        optimizer.zero_grad()
