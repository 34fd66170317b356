"""A frozen bf16 base with fp32 low-rank adapters: only the adapters train, so bf16 storage is fine."""

import torch
import torch.nn as nn


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int = 8):
        super().__init__()
        self.base = base
        self.a = nn.Parameter(torch.randn(rank, base.in_features) * 0.01)
        self.b = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x):
        return self.base(x) + (x.float() @ self.a.T @ self.b.T).to(x.dtype)


def main(steps: int = 20) -> None:
    base = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32)).to(torch.bfloat16)
    base.requires_grad_(False)
    adapted = LoRALinear(base[0])
    optimizer = torch.optim.AdamW([adapted.a, adapted.b], lr=1e-3)
    for step in range(steps):
        x = torch.randn(8, 32, dtype=torch.bfloat16)
        loss = adapted(x).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
