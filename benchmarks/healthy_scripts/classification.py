"""A small classifier (cross-entropy over 5 classes) trained with SGD and momentum on separable blobs."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
centres = torch.randn(5, 16) * 3
labels = torch.randint(0, 5, (2000,))
inputs = centres[labels] + torch.randn(2000, 16)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 5))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(1200):
    batch = torch.randint(0, len(inputs), (64,))
    loss = F.cross_entropy(model(inputs[batch]), labels[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
