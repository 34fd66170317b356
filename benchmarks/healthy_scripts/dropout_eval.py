"""Functional dropout that follows the module's mode (`training=self.training`), evaluated under
`model.eval()` every 250 steps and after training."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 64), nn.Linear(64, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.dropout(torch.relu(self.fc1(x)), p=0.3, training=self.training))


x = torch.randn(1500, 16)
y = torch.bucketize(x[:, 0], torch.tensor([-0.5, 0.5]))
model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def evaluate() -> float:
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


for step in range(1200):
    model.train()
    batch = torch.randint(0, len(x), (64,))
    loss = F.cross_entropy(model(x[batch]), y[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 250 == 249:
        print(step, evaluate())
print("final", evaluate())
