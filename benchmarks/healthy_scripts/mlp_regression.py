"""A plain MLP regression whose loss falls from about 10 to 0.01 over 800 steps, with the large, then
rising, gradient norms of a run's first steps (the shape of run that was reported as gradient-norm
spikes from step 1 when spikes were judged against the whole run's median)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
x = torch.randn(1024, 8)
w = torch.randn(8, 1)
y = 2.85 * x @ (w / w.norm()) + 0.3 * torch.sin(x[:, :1] * 3)  # variance about 8.3: the loss starts there
model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(1200):
    batch = torch.randint(0, len(x), (128,))
    loss = F.mse_loss(model(x[batch]), y[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 200 == 0:
        print(step, loss.item())
