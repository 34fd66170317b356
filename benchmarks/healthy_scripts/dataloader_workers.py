"""A map-style dataset with its own augmentation generator, fed by a DataLoader with two workers whose
`worker_init_fn` reseeds that generator per worker (each worker draws its own noise)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, get_worker_info


class NoisyPoints(Dataset):
    def __init__(self, n: int = 4096) -> None:
        data = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 8, generator=data)
        self.y = (self.x[:, 0] + self.x[:, 1] > 0).long()
        self.rng = torch.Generator().manual_seed(1)  # the augmentation's

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i] + 0.1 * torch.randn(8, generator=self.rng), self.y[i]


def reseed(worker_id: int) -> None:
    info = get_worker_info()
    info.dataset.rng.manual_seed(info.seed)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(NoisyPoints(), batch_size=64, shuffle=True, num_workers=2, worker_init_fn=reseed, persistent_workers=True)
    for epoch in range(20):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
