"""AdamW with weight decay, a linear warm-up then a cosine decay of the learning rate (LambdaLR
stepped after each optimizer step), on a two-layer regression."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
STEPS, WARMUP = 1200, 100
x = torch.randn(2000, 12)
y = torch.tanh(x[:, :3].sum(1, keepdim=True)) + 0.1 * x[:, 3:4]
model = nn.Sequential(nn.Linear(12, 64), nn.GELU(), nn.Linear(64, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
schedule = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: (s + 1) / WARMUP if s < WARMUP else 0.5 * (1 + math.cos(math.pi * (s - WARMUP) / (STEPS - WARMUP))))
for step in range(STEPS):
    batch = torch.randint(0, len(x), (64,))
    loss = F.mse_loss(model(x[batch]), y[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    schedule.step()
