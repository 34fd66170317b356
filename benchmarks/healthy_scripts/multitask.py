"""A shared trunk with two heads (a regression and a classification), their losses summed, RMSprop."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
x = torch.randn(3000, 12)
value = x[:, :2].sum(1, keepdim=True)
label = (x[:, 2] > 0).long()


class MultiTask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.LayerNorm(64))
        self.regress, self.classify = nn.Linear(64, 1), nn.Linear(64, 2)

    def forward(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(inputs)
        return self.regress(h), self.classify(h)


model = MultiTask()
optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
for step in range(1200):
    batch = torch.randint(0, len(x), (64,))
    predicted, logits = model(x[batch])
    loss = F.mse_loss(predicted, value[batch]) + F.cross_entropy(logits, label[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
