"""Matrix factorisation: user and item embeddings whose dot product predicts a rating, trained with
Adagrad on the observed pairs."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
USERS, ITEMS, RANK = 300, 200, 8
true_users, true_items = torch.randn(USERS, RANK), torch.randn(ITEMS, RANK)
pairs = torch.stack([torch.randint(0, USERS, (20000,)), torch.randint(0, ITEMS, (20000,))], 1)
ratings = (true_users[pairs[:, 0]] * true_items[pairs[:, 1]]).sum(1) / RANK ** 0.5


class Factorisation(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.users, self.items = nn.Embedding(USERS, RANK), nn.Embedding(ITEMS, RANK)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        return (self.users(user) * self.items(item)).sum(1) + self.bias


model = Factorisation()
optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1)
for step in range(1200):
    batch = torch.randint(0, len(pairs), (256,))
    loss = F.mse_loss(model(pairs[batch, 0], pairs[batch, 1]), ratings[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
