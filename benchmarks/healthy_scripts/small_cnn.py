"""A small CNN with batch norm on 16x16 synthetic images (a bright quadrant is the class), evaluated
every 100 steps under `model.eval()` and `torch.no_grad()`."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, 4, (n,))
    images = torch.randn(n, 1, 16, 16) * 0.5
    for i, label in enumerate(labels.tolist()):
        r, c = divmod(label, 2)
        images[i, 0, r * 8:(r + 1) * 8, c * 8:(c + 1) * 8] += 1.0
    return images, labels


model = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Dropout(0.2),
    nn.Linear(64, 4),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
validation = batch(128)
for step in range(1200):
    model.train()
    images, labels = batch(32)
    loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 100 == 99:
        model.eval()
        with torch.no_grad():
            accuracy = (model(validation[0]).argmax(1) == validation[1]).float().mean().item()
        print(step, accuracy)
