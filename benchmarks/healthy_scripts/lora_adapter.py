"""Low-rank adapters (rank 4) beside frozen 128x128 weights: only the adapters train, towards a
teacher that is the same network with other adapters."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class LoRALinear(nn.Module):
    def __init__(self, width: int, rank: int = 4) -> None:
        super().__init__()
        self.base = nn.Linear(width, width)
        self.base.requires_grad_(False)
        self.down = nn.Parameter(torch.randn(rank, width) * 0.01)
        self.up = nn.Parameter(torch.zeros(width, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + x @ self.down.t() @ self.up.t()


model = nn.Sequential(LoRALinear(128), nn.ReLU(), LoRALinear(128), nn.ReLU(), LoRALinear(128))
teacher = copy.deepcopy(model)
with torch.no_grad():
    for layer in teacher[::2]:
        layer.down.normal_(0, 0.1)
        layer.up.normal_(0, 0.5)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
for step in range(1200):
    x = torch.randn(32, 128)
    with torch.no_grad():
        y = teacher(x)
    loss = F.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
