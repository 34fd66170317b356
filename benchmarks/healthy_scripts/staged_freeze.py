"""A staged network whose configuration freezes its first two stages, applied before the optimizer is
built (argparse settings, as a training script reads them)."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--frozen-stages", type=int, nargs="*", default=[0, 1])
parser.add_argument("--lr", type=float, default=3e-3)
args = parser.parse_args()


class Staged(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stages = nn.ModuleList(nn.Sequential(nn.Linear(24, 24), nn.ReLU()) for _ in range(4))
        self.head = nn.Linear(24, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stage in self.stages:
            x = stage(x)
        return self.head(x)


torch.manual_seed(0)
model = Staged()
for index in args.frozen_stages:
    model.stages[index].requires_grad_(False)
optimizer = torch.optim.Adam((p for p in model.parameters() if p.requires_grad), lr=args.lr)
x = torch.randn(2000, 24)
y = torch.tanh(x[:, :4]).sum(1, keepdim=True)
for step in range(1200):
    batch = torch.randint(0, len(x), (64,))
    loss = F.mse_loss(model(x[batch]), y[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
