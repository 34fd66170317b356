"""A variational autoencoder (reparameterised sampling, reconstruction plus KL) on 2-D clustered data."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
centres = torch.randn(6, 24) * 2
data = centres[torch.randint(0, 6, (3000,))] + 0.3 * torch.randn(3000, 24)


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(24, 64), nn.ReLU(), nn.Linear(64, 8))
        self.decoder = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 24))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mean, log_var = self.encoder(x).chunk(2, dim=1)
        z = mean + torch.randn_like(mean) * (0.5 * log_var).exp()
        return self.decoder(z), mean, log_var


model = VAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(1200):
    x = data[torch.randint(0, len(data), (64,))]
    recon, mean, log_var = model(x)
    kl = -0.5 * (1 + log_var - mean.pow(2) - log_var.exp()).sum(1).mean()
    loss = F.mse_loss(recon, x, reduction="none").sum(1).mean() + kl
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
