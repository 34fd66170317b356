"""A fine-tune: a "pretrained" backbone frozen as the configuration says, a new head trained, the
optimizer over the trainable parameters only."""

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    freeze_backbone: bool = True
    lr: float = 1e-2
    classes: int = 4


torch.manual_seed(0)
config = Config()
backbone = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
model = nn.Sequential()
model.add_module("backbone", backbone)
model.add_module("head", nn.Linear(64, config.classes))
if config.freeze_backbone:
    for p in model.backbone.parameters():
        p.requires_grad = False
optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=config.lr)
inputs = torch.randn(1000, 20)
labels = (inputs[:, 0] > 0).long() + 2 * (inputs[:, 1] > 0).long()
for step in range(1200):
    batch = torch.randint(0, len(inputs), (64,))
    loss = F.cross_entropy(model(inputs[batch]), labels[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
