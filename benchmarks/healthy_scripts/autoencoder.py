"""An MLP autoencoder compressing 32-dimensional data that lies near a 4-dimensional subspace."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
basis = torch.randn(4, 32)
data = torch.randn(2000, 4) @ basis + 0.05 * torch.randn(2000, 32)
encoder = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
decoder = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 32))
optimizer = torch.optim.Adam(list(encoder.parameters()) + list(decoder.parameters()), lr=1e-3)
for step in range(1200):
    x = data[torch.randint(0, len(data), (64,))]
    loss = F.mse_loss(decoder(encoder(x)), x)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
